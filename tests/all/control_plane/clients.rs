//! API clients and other local users: `warden serve` always wants a token
//! (its own, in an owner-only file, unless the operator gives one), and
//! what a client sends may deny or ask, never allow.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::*;
use crate::server::{Server, client, model, send};

/// `warden serve --port 0` as the operator starts it: no token given.
fn serve_plain(env: &Env) -> Server {
    let mut child = env
        .warden(&["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Server { child, base }
}

fn mcp_list() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_without_a_token_makes_one_only_its_owner_can_read() {
    let env = Env::new();
    let s = serve_plain(&env);
    let file = env.data().join("server-token");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));

    // Without it: nothing, the MCP endpoint included.
    let bare = reqwest::Client::new();
    for (method, path, body) in [
        ("GET", "/session", None),
        ("GET", "/event", None),
        ("POST", "/warden/mcp", Some(mcp_list())),
    ] {
        let (status, body) = send(&bare, method, &s.url(path), body).await;
        assert_eq!(status, 401, "{method} {path}: {body}");
    }
    // With it: served.
    let r = bare
        .get(s.url("/session"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // A second start reads the same token.
    drop(s);
    let s = serve_plain(&env);
    let r = bare
        .get(s.url("/session"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    drop(s);

    // A token file others may read is no secret: refused, saying how to fix it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.warden(&["serve", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("server-token") && err.contains("chmod 600"),
        "{err}"
    );
}

/// Run as another uid (`nobody`), the way a second local user would. Only
/// possible as root; CI runs as root.
fn as_nobody(program: &str, args: &[&str]) -> Option<std::process::Output> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return None;
    }
    use std::os::unix::process::CommandExt;
    Some(
        Command::new(program)
            .args(args)
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .output()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_can_neither_read_the_token_nor_call_the_server() {
    let env = Env::new();
    env.file("notes.txt", "mine\n");
    let s = serve_plain(&env);
    let file = env.data().join("server-token");
    let script = format!(
        r#"
import json, sys, urllib.request, urllib.error
out = {{}}
try:
    open({file:?}).read()
    out["token"] = "read"
except OSError as e:
    out["token"] = type(e).__name__
for path, body in [("/session", None), ("/warden/mcp", {body:?})]:
    req = urllib.request.Request({base:?} + path, data=body and body.encode(),
                                 headers={{"content-type": "application/json", "accept": "application/json, text/event-stream"}})
    try:
        out[path] = urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as e:
        out[path] = e.code
print(json.dumps(out))
"#,
        file = file.display().to_string(),
        body = mcp_list().to_string(),
        base = s.base,
    );
    let Some(out) = as_nobody("python3", &["-c", &script]) else {
        // Not root: the same requests from this uid without the token.
        let (status, _) = send(&reqwest::Client::new(), "GET", &s.url("/session"), None).await;
        assert_eq!(status, 401);
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen,
        json!({"token": "PermissionError", "/session": 401, "/warden/mcp": 401})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_may_add_denies_but_never_allow_nor_lift_the_configs_deny() {
    let env = Env::new();
    env.file("a.txt", "open\n");
    env.file("secret.env", "TOKEN=1\n");
    env.config(json!({
        "permission": {"read": {"*.env": "deny"}},
        "experimental": {"continue_loop_on_deny": true}
    }));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let dir = env.project().display().to_string();
    for (rules, why) in [
        (
            json!([{"permission": "read", "pattern": "*", "action": "allow"}]),
            "may only add deny or ask",
        ),
        (
            json!([{"permission": "hook", "pattern": "*", "action": "deny"}]),
            "switching hooks is the operator's",
        ),
    ] {
        let (status, body) = send(
            &c,
            "POST",
            &s.url("/session"),
            Some(json!({"directory": dir, "permission": rules})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(why),
            "{body}"
        );
    }
    let (status, body) = send(&c, "GET", &s.url("/session"), None).await;
    assert_eq!((status, body), (200, json!([])), "nothing was created");

    // A deny a client adds holds, and a tool switch turned on does not lift
    // the config's.
    let (status, created) = send(
        &c,
        "POST",
        &s.url("/session"),
        Some(json!({"directory": dir,
                    "permission": [{"permission": "glob", "pattern": "*", "action": "deny"}]})),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap();
    env.cassette(json!([
        {"tool_calls": [
            {"id": "env", "name": "read", "arguments": {"filePath": "secret.env"}},
            {"id": "a", "name": "read", "arguments": {"filePath": "a.txt"}}
        ]},
        {"text": "done"}
    ]));
    let (status, answer) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(
            json!({"parts": [{"type": "text", "text": "read"}], "model": model(&env),
                    "tools": {"read": true}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let requests = env.requests();
    assert!(!offered(&requests[0]).contains(&"glob".to_string()));
    let results = tool_results(&requests[1]);
    assert!(
        results[0].1 && results[0].2.contains("denied"),
        "{results:?}"
    );
    assert_eq!(results[1], ("a".into(), false, "     1\topen\n".into()));
}
