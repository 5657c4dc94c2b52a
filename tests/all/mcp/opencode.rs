//! OpenCode (npm `opencode-ai`, pinned) with warden as a local MCP server:
//! `opencode run`, offline against a loopback model, calls warden's `read`
//! plugin as `warden_read`; the plugin runs inside warden's boundary, a
//! denied path stays denied, and the audit names OpenCode as the caller.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{audit_rows, row};
use crate::common::*;
use crate::mock_provider::{Reply, chat_text, chat_tool_call};

/// A loopback Chat Completions model that answers by what it is shown, so
/// OpenCode's side requests (a session title) cannot take the scripted
/// turns: a request offering `warden_read` with no tool result yet calls it
/// twice (an allowed file and a denied one); a request carrying tool
/// results answers with text; anything else gets a short text.
struct Model {
    url: String,
    seen: Arc<Mutex<Vec<Value>>>,
}

fn sse_body(reply: Reply) -> Vec<u8> {
    match reply {
        Reply::Sse { body, .. } => body,
        _ => unreachable!(),
    }
}

fn start_model() -> Model {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let record = record.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let offers_warden = request["tools"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "warden_read"));
                let has_results = request["messages"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
                let answer = if offers_warden && !has_results {
                    two_reads()
                } else if has_results {
                    sse_body(chat_text("The notes say hello.", 10, 5))
                } else {
                    sse_body(chat_text("MCP test", 5, 2))
                };
                record.lock().unwrap().push(request);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&answer);
            });
        }
    });
    Model { url, seen }
}

/// One turn calling `warden_read` twice: notes.txt, then secret.env.
fn two_reads() -> Vec<u8> {
    let first = sse_body(chat_tool_call(
        "call_a",
        "warden_read",
        &json!({"filePath": "notes.txt"}),
    ));
    let first = String::from_utf8(first).unwrap();
    // The second call is the same stream shape at tool index 1; the first
    // stream's finish, usage and [DONE] are dropped so both share one turn.
    let cut = first.find("\"finish_reason\":\"tool_calls\"").unwrap();
    let start_of_finish = first[..cut].rfind("data: ").unwrap();
    let second = json!({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 1, "id": "call_b", "type": "function",
         "function": {"name": "warden_read", "arguments": json!({"filePath": "secret.env"}).to_string()}}]},
        "finish_reason": null}]});
    let tail = &first[start_of_finish..];
    format!("{}data: {second}\n\n{tail}", &first[..start_of_finish]).into_bytes()
}

/// `opencode ARGS`, offline (see [`crate::opencode::offline`]), with `config`.
fn opencode(bin: &Path, home: &Path, cwd: &Path, config: &Path) -> Command {
    let mut c = Command::new("timeout");
    c.arg("180").arg(bin).current_dir(cwd);
    crate::opencode::offline(&mut c, home);
    c.env("OPENCODE_CONFIG", config);
    c
}

#[tokio::test]
async fn opencode_calls_a_warden_plugin_over_mcp_and_warden_rules_hold() {
    // The same pinned install as the tests of OpenCode's own clients.
    let bin = crate::opencode::opencode_bin();
    let env = Env::new();
    env.file("notes.txt", "hello from warden\n");
    env.file("secret.env", "TOKEN=1\n");
    env.config(json!({"permission": {"read": {"*.env": "deny"}}}));
    let model = start_model();
    let config = env.root.path().join("opencode.json");
    std::fs::write(
        &config,
        json!({
            "$schema": "https://opencode.ai/config.json",
            "model": "mock/m",
            "small_model": "mock/m",
            "provider": {"mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Loopback",
                "options": {"baseURL": model.url, "apiKey": "none"},
                "models": {"m": {"name": "m", "tool_call": true}}
            }},
            "mcp": {"warden": {
                "type": "local",
                "command": [env!("CARGO_BIN_EXE_warden"), "mcp", "--dir", env.project().display().to_string()],
                "environment": {"WARDEN_DATA_DIR": env.data().display().to_string()}
            }}
        })
        .to_string(),
    )
    .unwrap();
    let home = env.root.path().join("home");
    let out = opencode(&bin, &home, &env.project(), &config)
        .args(["run", "--format", "json", "read my notes"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "opencode run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What OpenCode showed its model as the two results.
    let seen = model.seen.lock().unwrap().clone();
    let answered = seen
        .iter()
        .find(|r| {
            r["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
        })
        .unwrap_or_else(|| {
            panic!("the model never saw a tool result; requests: {seen:#?}\n{stdout}")
        });
    let results: Vec<(String, String)> = answered["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (
                m["tool_call_id"].as_str().unwrap_or("").to_string(),
                content,
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "call_a");
    assert!(results[0].1.contains("hello from warden"), "{results:?}");
    assert_eq!(results[1].0, "call_b");
    assert!(
        results[1].1.contains(
            "permission denied: `read` on `secret.env` is denied by the rule `read *.env deny`; the call did not run"
        ),
        "{results:?}"
    );

    // In warden: one MCP session named after OpenCode, the plugin ran for
    // notes.txt, the denied path never reached it, and every call's audit
    // starts with the caller.
    let ledger = env.ledger();
    let sessions = ledger.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(
        sessions[0].title.starts_with("mcp: opencode"),
        "{}",
        sessions[0].title
    );
    let caller = format!("mcp:{}", sessions[0].title.trim_start_matches("mcp: "));
    let mut rows = audit_rows(&ledger.audit_trail(&sessions[0].id).await.unwrap());
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    // OpenCode may run the two calls in either order; each call's rows keep theirs.
    let by_call = |path_ok: bool| {
        if path_ok {
            vec![
                row("", "caller", &caller, "called", "read"),
                row("", "permission", "read", "allowed", "ok"),
                row("", "tool", "read", "ran", "ok"),
            ]
        } else {
            vec![
                row("", "caller", &caller, "called", "read"),
                row("", "permission", "read", "denied", "refused"),
            ]
        }
    };
    let strip = |rows: &[(String, String, String, String, String)]| {
        rows.iter()
            .map(|r| {
                (
                    "".to_string(),
                    r.1.clone(),
                    r.2.clone(),
                    r.3.clone(),
                    r.4.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let first_call: Vec<_> = rows.iter().filter(|r| r.0 == "mcp_1").cloned().collect();
    let second_call: Vec<_> = rows.iter().filter(|r| r.0 == "mcp_2").cloned().collect();
    assert_eq!(rows.len(), first_call.len() + second_call.len(), "{rows:?}");
    let (a, b) = (strip(&first_call), strip(&second_call));
    assert!(
        (a == by_call(true) && b == by_call(false)) || (a == by_call(false) && b == by_call(true)),
        "{rows:?}"
    );
}
