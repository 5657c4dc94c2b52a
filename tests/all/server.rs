//! `warden serve` through a real HTTP client on 127.0.0.1: sessions driven
//! over HTTP, the event stream in order, permission answers, many prompts
//! and sessions at once, aborts, bad requests, tokens, and two servers
//! sharing one ledger.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use warden_llm::sse::SseParser;
use warden_protocol::ToolState;

use crate::common::*;

/// A running `warden serve`; killed when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(crate) fn start(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Server {
        let mut args = vec!["--allow-scripted"];
        args.extend_from_slice(extra);
        Server::launch(env, &args, vars)
    }

    /// `warden serve --port 0 ARGS` with these environment variables. A
    /// server always authenticates: unless the test gives a token of its
    /// own (or `--no-auth`), it gets [`TEST_TOKEN`], which [`client`] sends.
    pub(crate) fn launch(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Server {
        Server::launch_under(env, &[], Stdio::inherit(), extra, vars)
    }

    /// [`Server::launch`], started by `wrapper` (see [`Env::warden_under`]),
    /// its stderr (the log) going to `stderr`.
    pub(crate) fn launch_under(
        env: &Env,
        wrapper: &[String],
        stderr: Stdio,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Server {
        let mut args = vec!["serve", "--port", "0"];
        let own = extra.iter().any(|a| *a == "--token" || *a == "--no-auth")
            || vars
                .iter()
                .any(|(k, _)| *k == "OPENCODE_SERVER_PASSWORD" || *k == "WARDEN_TOKEN");
        if !own {
            args.extend_from_slice(&["--token", TEST_TOKEN]);
        }
        args.extend_from_slice(extra);
        let mut cmd = env.warden_under(wrapper, &args);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
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

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The token test servers take unless a test gives its own.
pub(crate) const TEST_TOKEN: &str = "warden-test-token-7f3a";

/// An HTTP client that sends [`TEST_TOKEN`] unless a request carries an
/// `Authorization` header of its own.
pub(crate) fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {TEST_TOKEN}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

pub(crate) async fn send(
    c: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = c.request(method.parse().unwrap(), url);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Subscribe to `/event` and forward each event's JSON data.
pub(crate) async fn subscribe(url: String) -> mpsc::UnboundedReceiver<Value> {
    let (tx, rx) = mpsc::unbounded_channel();
    let res = client().get(&url).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut stream = res.bytes_stream();
    tokio::spawn(async move {
        let mut parser = SseParser::new();
        while let Some(Ok(chunk)) = stream.next().await {
            for e in parser.push(&chunk).unwrap() {
                if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                    let _ = tx.send(flat(v));
                }
            }
        }
    });
    rx
}

/// Read events until one matches, returning everything read.
pub(crate) async fn until(
    rx: &mut mpsc::UnboundedReceiver<Value>,
    pred: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("the event came in time")
            .expect("the stream stayed open");
        let done = pred(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

pub(crate) fn is_idle(e: &Value) -> bool {
    e["type"] == "session.status" && e["status"]["type"] == "idle"
}

/// The scripted model, as OpenCode's clients name a model.
pub(crate) fn model(env: &Env) -> Value {
    json!({"providerID": "scripted", "modelID": env.root.path().join("cassette.json").display().to_string()})
}

pub(crate) async fn new_session(c: &reqwest::Client, s: &Server, env: &Env) -> String {
    let (status, body) = send(
        c,
        "POST",
        &s.url("/session"),
        Some(json!({"directory": env.project().display().to_string()})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_driven_over_http_streams_every_state_in_order() {
    let env = Env::new();
    env.file("package.json", r#"{"scripts": {"build": "tsc"}}"#);
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "One script: build."}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let (status, health) = send(&c, "GET", &s.url("/health"), None).await;
    assert_eq!((status, health["ok"].clone()), (200, json!(true)));
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;
    let first = until(&mut events, |_| true).await;
    assert_eq!(first[0]["type"], "server.connected");

    let (status, answer) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(json!({"parts": [{"type": "text", "text": "which scripts?"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["info"]["role"], "assistant");
    assert_eq!(answer["parts"][1]["text"], "One script: build.");

    let seen = until(&mut events, is_idle).await;
    assert!(seen.iter().all(|e| e["sessionID"] == id.as_str()
        || e["part"]["sessionID"] == id.as_str()
        || e["info"]["sessionID"] == id.as_str()));
    let states: Vec<String> = seen
        .iter()
        .filter(|e| e["type"] == "message.part.updated" && e["part"]["type"] == "tool")
        .map(|e| e["part"]["state"]["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, ["pending", "running", "completed"]);
    let statuses: Vec<&str> = seen
        .iter()
        .filter(|e| e["type"] == "session.status")
        .map(|e| e["status"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["busy", "idle"]);
    // The tool completed before the answer's text was written.
    let completed = seen
        .iter()
        .position(|e| e["part"]["state"]["status"] == "completed")
        .unwrap();
    let answer_text = seen
        .iter()
        .position(|e| e["part"]["text"] == "One script: build.")
        .unwrap();
    assert!(completed < answer_text);

    // A late client reads the same state from REST.
    let (status, msgs) = send(&c, "GET", &s.url(&format!("/session/{id}/message")), None).await;
    assert_eq!(status, 200);
    let roles: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["info"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    let (_, view) = send(&c, "GET", &s.url(&format!("/session/{id}")), None).await;
    assert_eq!(view["status"]["type"], "idle");

    // The OpenAPI document describes what is served.
    let (status, doc) = send(&c, "GET", &s.url("/doc"), None).await;
    assert_eq!(status, 200);
    for path in [
        "/session",
        "/session/{sessionID}/message",
        "/session/{sessionID}/prompt_async",
        "/session/{sessionID}/abort",
        "/event",
        "/permission/{requestID}/reply",
        "/plugin",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from /doc");
    }
    assert!(
        doc["components"]["schemas"]
            .get("MessageWithParts")
            .is_some()
    );
    assert!(doc["components"]["schemas"].get("ToolState").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_ask_answered_over_http_decides_the_call() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "read it"},
        {"tool_calls": [{"id": "c2", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "never"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;

    for (reply, expect) in [("once", "completed"), ("reject", "error")] {
        let (status, _) = send(
            &c,
            "POST",
            &s.url(&format!("/session/{id}/prompt_async")),
            Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
        )
        .await;
        assert_eq!(status, 204);
        let seen = until(&mut events, |e| e["type"] == "permission.asked").await;
        let ask = seen.last().unwrap();
        assert_eq!(
            (ask["permission"].as_str(), ask["patterns"][0].as_str()),
            (Some("read"), Some("a.txt"))
        );
        let (_, pending) = send(
            &c,
            "GET",
            &s.url(&format!("/permission?session={id}")),
            None,
        )
        .await;
        assert_eq!(pending.as_array().unwrap().len(), 1);
        let rid = ask["id"].as_str().unwrap();
        let (status, _) = send(
            &c,
            "POST",
            &s.url(&format!("/permission/{rid}/reply")),
            Some(json!({"reply": reply})),
        )
        .await;
        assert_eq!(status, 200);
        let seen = until(&mut events, is_idle).await;
        let last_state = seen
            .iter()
            .rev()
            .find(|e| e["type"] == "message.part.updated" && e["part"]["type"] == "tool")
            .unwrap()["part"]["state"]
            .clone();
        assert_eq!(last_state["status"], expect, "{reply}: {last_state}");
        if reply == "reject" {
            assert!(
                last_state["error"]
                    .as_str()
                    .unwrap()
                    .contains("the user rejected it"),
                "{last_state}"
            );
        }
        // An answered ask is gone; answering it again is a 404.
        let (status, err) = send(
            &c,
            "POST",
            &s.url(&format!("/permission/{rid}/reply")),
            Some(json!({"reply": "once"})),
        )
        .await;
        assert_eq!(status, 404);
        assert_eq!(err["error"]["code"], "not_found");
    }
    assert_eq!(env.requests().len(), 3, "the rejection stopped the loop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_watching_another_session_does_not_make_this_one_wait() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "could not read it"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let watched = new_session(&c, &s, &env).await;
    let unwatched = new_session(&c, &s, &env).await;
    let _events = subscribe(s.url(&format!("/event?session={watched}"))).await;

    // Answered when the loop ends: the ask was refused at once, not left waiting.
    let (status, body) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{unwatched}/message")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, messages) = send(
        &c,
        "GET",
        &s.url(&format!("/session/{unwatched}/message")),
        None,
    )
    .await;
    let states: Vec<Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().clone())
        .filter(|p| p["type"] == "tool")
        .map(|p| p["state"].clone())
        .collect();
    assert_eq!(states.len(), 1, "{messages}");
    assert_eq!(states[0]["status"], "error");
    assert!(
        states[0]["error"]
            .as_str()
            .unwrap()
            .contains("nobody was attached"),
        "{}",
        states[0]
    );
    let (_, pending) = send(&c, "GET", &s.url("/permission"), None).await;
    assert_eq!(pending, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_prompts_on_one_session_are_answered_in_order() {
    let env = Env::new();
    let turns: Vec<Value> = (1..=50)
        .map(|n| json!({"text": format!("answer {n}")}))
        .collect();
    env.cassette(json!(turns));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let url = s.url(&format!("/session/{id}/message"));
    let m = model(&env);
    let replies = futures::future::join_all((1..=50).map(|k| {
        let (c, url, m) = (c.clone(), url.clone(), m.clone());
        async move {
            let (status, body) = send(
                &c,
                "POST",
                &url,
                Some(
                    json!({"parts": [{"type": "text", "text": format!("prompt {k}")}], "model": m}),
                ),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            (k, body["parts"][1]["text"].as_str().unwrap().to_string())
        }
    }))
    .await;
    // The ledger alternates prompt, answer; the n-th prompt handled got answer n.
    let msgs = env
        .ledger()
        .messages(&warden_protocol::SessionId(id))
        .await
        .unwrap();
    assert_eq!(msgs.len(), 100);
    let mut order = Vec::new();
    for (i, pair) in msgs.chunks(2).enumerate() {
        assert_eq!(pair[0].info.role(), "user");
        assert_eq!(pair[1].info.role(), "assistant");
        assert_eq!(pair[1].text(), format!("answer {}", i + 1));
        order.push(pair[0].text());
    }
    // And each caller got the answer to its own prompt.
    for (k, answer) in replies {
        let position = order
            .iter()
            .position(|t| t == &format!("prompt {k}"))
            .unwrap();
        assert_eq!(answer, format!("answer {}", position + 1), "prompt {k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_at_once_all_complete() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "done"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(new_session(&c, &s, &env).await);
    }
    let m = model(&env);
    let answers = futures::future::join_all(ids.iter().map(|id| {
        let (c, url, m) = (
            c.clone(),
            s.url(&format!("/session/{id}/message")),
            m.clone(),
        );
        async move {
            send(
                &c,
                "POST",
                &url,
                Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": m})),
            )
            .await
        }
    }))
    .await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["parts"][1]["text"], "done");
    }
    let ledger = env.ledger();
    for id in &ids {
        let msgs = ledger
            .messages(&warden_protocol::SessionId(id.clone()))
            .await
            .unwrap();
        let calls = tool_parts(&msgs);
        assert_eq!(calls.len(), 1);
        assert!(matches!(calls[0].1, ToolState::Completed { .. }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_running_guest_and_the_next_prompt_works() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 60000, "dirs": [{"path": ".", "mode": "rw"}]}))]}));
    let mark = env.project().join("kept-running.txt");
    env.cassette(json!([
        {"tool_calls": [{"id": "slow", "name": "sleep_then_write", "arguments": {"ms": 1500, "path": mark.display().to_string()}}]},
        {"text": "after the abort"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;
    let (status, _) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "go"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 204);
    until(&mut events, |e| e["part"]["state"]["status"] == "running").await;
    let (status, aborted) = send(&c, "POST", &s.url(&format!("/session/{id}/abort")), None).await;
    assert_eq!((status, aborted), (200, json!(true)));
    let seen = until(&mut events, is_idle).await;
    let last = seen
        .iter()
        .rev()
        .find(|e| e["part"]["type"] == "tool")
        .unwrap()["part"]["state"]
        .clone();
    assert_eq!(last["status"], "error");
    assert_eq!(last["interrupted"], true);
    assert!(
        last["error"].as_str().unwrap().contains("aborted"),
        "{last}"
    );
    // The guest stopped: well after it would have slept, it left no mark.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!mark.exists(), "the aborted guest kept running");

    let (status, answer) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(json!({"parts": [{"type": "text", "text": "and now?"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["parts"][1]["text"], "after the abort");
    let results = tool_results(env.requests().last().unwrap());
    assert!(
        results[0].1 && results[0].2.contains("interrupted"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_and_change_nothing() {
    let env = Env::new();
    env.cassette(json!([{"text": "hi"}]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let msg = s.url(&format!("/session/{id}/message"));
    let raw = |method: &'static str, url: String, body: Option<(&'static str, Vec<u8>)>| {
        let c = c.clone();
        async move {
            let mut req = c.request(method.parse().unwrap(), &url);
            if let Some((ct, b)) = body {
                req = req.header("content-type", ct).body(b);
            }
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            let body: Value =
                serde_json::from_str(&res.text().await.unwrap()).unwrap_or(Value::Null);
            (status, body)
        }
    };
    let cases = vec![
        (
            "unknown session",
            raw("GET", s.url("/session/ses_nope"), None).await,
            404,
            "not_found",
        ),
        (
            "unknown session prompt",
            raw(
                "POST",
                s.url("/session/ses_nope/message"),
                Some(("application/json", br#"{"parts": [{"type": "text", "text": "x"}]}"#.to_vec())),
            )
            .await,
            404,
            "not_found",
        ),
        (
            "malformed JSON",
            raw(
                "POST",
                msg.clone(),
                Some(("application/json", b"{\"parts\": ".to_vec())),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "wrong type",
            raw(
                "POST",
                msg.clone(),
                Some(("application/json", br#"{"parts": [{"type": "text", "text": 5}]}"#.to_vec())),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "unknown field",
            raw(
                "POST",
                msg.clone(),
                Some(("application/json", br#"{"parts": [{"type": "text", "text": "x"}], "txt": 1}"#.to_vec())),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "empty text",
            raw(
                "POST",
                msg.clone(),
                Some(("application/json", br#"{"parts": [{"type": "text", "text": "  "}]}"#.to_vec())),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "a file part",
            raw(
                "POST",
                msg.clone(),
                Some((
                    "application/json",
                    br#"{"parts": [{"type": "file", "mime": "text/plain", "url": "file:///etc/passwd"}]}"#.to_vec(),
                )),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "bad model",
            raw(
                "POST",
                msg.clone(),
                Some((
                    "application/json",
                    br#"{"parts": [{"type": "text", "text": "x"}], "model": {"providerID": "nope", "modelID": "x"}}"#.to_vec(),
                )),
            )
            .await,
            400,
            "bad_request",
        ),
        (
            "not JSON",
            raw("POST", msg.clone(), Some(("text/plain", b"hello".to_vec()))).await,
            415,
            "unsupported_media_type",
        ),
        (
            "oversized",
            raw(
                "POST",
                msg.clone(),
                Some((
                    "application/json",
                    format!("{{\"parts\": [{{\"type\": \"text\", \"text\": \"{}\"}}]}}", "x".repeat(2 << 20)).into_bytes(),
                )),
            )
            .await,
            413,
            "too_large",
        ),
        (
            "unknown route",
            raw("GET", s.url("/nope"), None).await,
            404,
            "not_found",
        ),
        (
            "wrong method",
            raw("PUT", s.url("/session"), None).await,
            405,
            "method_not_allowed",
        ),
        (
            "bad reply",
            raw(
                "POST",
                s.url("/permission/per_x/reply"),
                Some(("application/json", br#"{"reply": "maybe"}"#.to_vec())),
            )
            .await,
            400,
            "bad_request",
        ),
    ];
    for (what, (status, body), want, code) in cases {
        assert_eq!(status, want, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(
            !body["error"]["message"].as_str().unwrap().is_empty(),
            "{what}"
        );
    }
    let (_, sessions) = send(&c, "GET", &s.url("/session"), None).await;
    assert_eq!(sessions.as_array().unwrap().len(), 1);
    assert!(
        env.ledger()
            .messages(&warden_protocol::SessionId(id))
            .await
            .unwrap()
            .is_empty(),
        "nothing was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_request_and_is_required_off_loopback() {
    let env = Env::new();
    let out = env
        .warden(&["serve", "--host", "0.0.0.0", "--port", "0", "--no-auth"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("drop --no-auth"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let s = Server::start(&env, &["--token", "s3cret"], &[]);
    // A client that sends no credentials of its own.
    let c = reqwest::Client::new();
    let (status, body) = send(&c, "GET", &s.url("/session"), None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("unauthorized"))
    );
    let (status, _) = send(&c, "GET", &s.url("/health"), None).await;
    assert_eq!(status, 401);
    let ok = c
        .get(s.url("/session"))
        .header("authorization", "Bearer s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let wrong = c
        .get(s.url("/session"))
        .header("authorization", "Bearer s3cre")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let events = c.get(s.url("/event")).send().await.unwrap();
    assert_eq!(events.status().as_u16(), 401);
    let events = c.get(s.url("/event?token=s3cret")).send().await.unwrap();
    assert_eq!(events.status().as_u16(), 200);

    // OpenCode's clients send HTTP Basic, user `opencode`, and the password
    // from OPENCODE_SERVER_PASSWORD; the server takes it from there too.
    drop(s);
    let s = Server::start(&env, &[], &[("OPENCODE_SERVER_PASSWORD", "pw")]);
    for (user, password, want) in [
        ("opencode", "pw", 200),
        ("opencode", "px", 401),
        ("someone", "pw", 401),
    ] {
        let r = c
            .get(s.url("/session"))
            .basic_auth(user, Some(password))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), want, "{user}:{password}");
    }
    let (status, _) = send(&c, "GET", &s.url("/session"), None).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_lets_the_named_origins_in_and_no_others() {
    let env = Env::new();
    let s = Server::start(&env, &["--cors", "https://app.example"], &[]);
    let c = client();
    let preflight = c
        .request(reqwest::Method::OPTIONS, s.url("/session"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status().as_u16(), 204);
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "https://app.example");
    assert_eq!(
        h["access-control-allow-headers"],
        "authorization, content-type"
    );
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let allowed = c
        .get(s.url("/session"))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status().as_u16(), 200);
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = c
        .get(s.url("/session"))
        .header("origin", "https://other.example")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 403);
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let out = env
        .warden(&["serve", "--port", "0", "--cors", "app.example"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not an origin"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_catalogue_is_answered_from_warden_s_own_config() {
    let env = Env::new();
    let cassette = env.cassette(json!([{"delay_ms": 60000, "text": "slow"}]));
    env.config(json!({"agent": {"review": {"description": "Reads only.", "steps": 3}}}));
    let path = cassette.display().to_string();
    let s = Server::launch(&env, &["--model", &format!("scripted:{path}")], &[]);
    let c = client();
    let get = |p: &str| {
        let (c, url) = (c.clone(), s.url(p));
        async move { send(&c, "GET", &url, None).await }
    };

    let (_, providers) = get("/config/providers").await;
    assert_eq!(providers["default"], json!({"scripted": path}));
    assert_eq!(providers["providers"][0]["id"], "scripted");
    assert_eq!(
        providers["providers"][0]["models"][&path]["providerID"],
        "scripted"
    );
    let (_, all) = get("/provider").await;
    assert_eq!(all["connected"], json!(["scripted"]));
    let (_, config) = get("/config").await;
    assert_eq!(config["model"], format!("scripted/{path}"));
    assert_eq!(config["default_agent"], "build");
    let (_, agents) = get("/agent").await;
    let names: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["build", "review"], "the default agent first");
    assert_eq!(agents[1]["description"], "Reads only.");
    assert_eq!(agents[1]["mode"], "primary");
    let (_, paths) = get("/path").await;
    assert_eq!(paths["worktree"], env.project().display().to_string());
    assert_eq!(paths["state"], env.data().display().to_string());
    let (_, project) = get("/project/current").await;
    assert_eq!(project["id"], "global");
    for (route, empty) in [
        ("/command", json!([])),
        ("/formatter", json!([])),
        ("/lsp", json!([])),
        ("/mcp", json!({})),
        ("/experimental/workspace", json!([])),
        ("/provider/auth", json!({})),
    ] {
        assert_eq!(get(route).await, (200, empty), "{route}");
    }
    let (status, api) = get("/api/skill").await;
    assert_eq!((status, &api["data"]), (200, &json!([])));
    assert_eq!(get("/api/nope").await.0, 404);
    let (_, vcs) = get("/vcs").await;
    assert_eq!(vcs["branch"], Value::Null);

    // Session status lists busy sessions only; the global stream wraps
    // each envelope with the session's directory.
    let mut global = subscribe(s.url("/global/event")).await;
    let first = global.recv().await.unwrap();
    assert_eq!(first["payload"]["type"], "server.connected");
    assert_eq!(first["payload"]["properties"], json!({}));
    assert!(first["payload"]["id"].as_str().unwrap().starts_with("evt_"));
    let id = new_session(&c, &s, &env).await;
    assert_eq!(get("/session/status").await, (200, json!({})));
    let (status, _) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "go"}]})),
    )
    .await;
    assert_eq!(status, 204);
    let seen = until(&mut global, |e| {
        e["payload"]["type"] == "session.status"
            && e["payload"]["properties"]["status"]["type"] == "busy"
    })
    .await;
    let busy = seen.last().unwrap();
    assert_eq!(busy["directory"], env.project().display().to_string());
    assert_eq!(busy["payload"]["properties"]["sessionID"], id.as_str());
    assert_eq!(
        get("/session/status").await,
        (200, json!({id.clone(): {"type": "busy"}}))
    );
    let (status, aborted) = send(&c, "POST", &s.url(&format!("/session/{id}/abort")), None).await;
    assert_eq!((status, aborted), (200, json!(true)));
    let seen = until(&mut global, |e| e["payload"]["type"] == "session.idle").await;
    let kinds: Vec<&str> = seen
        .iter()
        .filter(|e| e["payload"]["properties"]["sessionID"] == id.as_str())
        .filter_map(|e| e["payload"]["type"].as_str())
        .filter(|t| t.starts_with("session."))
        .collect();
    assert_eq!(kinds, ["session.status", "session.idle"]);
    for route in ["todo", "diff", "children"] {
        assert_eq!(
            get(&format!("/session/{id}/{route}")).await,
            (200, json!([])),
            "{route}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_ledger_never_run_a_session_at_once_queue_each_other_s_prompts_and_one_takes_over_when_the_other_dies()
 {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 60000}))]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "long", "name": "sleep", "arguments": {"ms": 30000}}]},
        {"text": "taken over"},
        {"text": "and B's own prompt"}
    ]));
    let ttl = [("WARDEN_LEASE_TTL_MS", "1000")];
    let mut a = Server::start(&env, &[], &ttl);
    let b = Server::start(&env, &[], &ttl);
    let c = client();
    let id = new_session(&c, &a, &env).await;
    let mut events = subscribe(a.url(&format!("/event?session={id}"))).await;
    let (status, _) = send(
        &c,
        "POST",
        &a.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "go"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 204);
    until(&mut events, |e| e["part"]["state"]["status"] == "running").await;

    // B accepts a prompt for the session A is running: it is queued in the
    // ledger, not written into the session, and B does not run the session.
    let (status, body) = send(
        &c,
        "POST",
        &b.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "me too"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let session = warden_protocol::SessionId(id.clone());
    let users = |msgs: &[warden_protocol::MessageWithParts]| {
        msgs.iter()
            .filter(|m| m.info.role() == "user")
            .map(|m| m.text())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        users(&env.ledger().messages(&session).await.unwrap()),
        ["go"]
    );
    // Nor does it wait out the lease while A keeps renewing it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        users(&env.ledger().messages(&session).await.unwrap()),
        ["go"]
    );
    // A's prompt is taken (its run is going), B's waits its turn.
    let open = env.ledger().open_prompts(&session).await.unwrap();
    let states: Vec<&str> = open.iter().map(|p| p.state.to_row().0).collect();
    assert_eq!(states, ["taken", "queued"], "{open:?}");

    // Kill A: B takes the session over, finishes it, then answers the
    // prompt it queued.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let msgs = loop {
        let msgs = env.ledger().messages(&session).await.unwrap();
        if msgs
            .last()
            .is_some_and(|m| m.text() == "and B's own prompt")
        {
            break msgs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "B did not take over: {msgs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let turns: Vec<(String, String)> = msgs
        .iter()
        .map(|m| (m.info.role().to_string(), m.text()))
        .collect();
    let turn = |r: &str, t: &str| (r.to_string(), t.to_string());
    assert_eq!(
        turns,
        [
            turn("user", "go"),
            turn("assistant", ""),
            turn("assistant", "taken over"),
            turn("user", "me too"),
            turn("assistant", "and B's own prompt"),
        ]
    );
    assert!(
        env.ledger()
            .open_prompts(&session)
            .await
            .unwrap()
            .is_empty()
    );
    let calls = tool_parts(&msgs);
    assert_eq!(calls.len(), 1, "the call ran once and was not repeated");
    assert!(
        matches!(
            &calls[0].1,
            ToolState::Error {
                interrupted: true,
                ..
            }
        ),
        "{:?}",
        calls[0].1
    );
    let (_, view) = send(&c, "GET", &b.url(&format!("/session/{id}")), None).await;
    assert_eq!(view["status"]["type"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_auth_only_localhost_names_and_no_cassettes_unless_allowed() {
    let env = Env::new();
    env.cassette(json!([{"text": "hi"}]));
    // Started without --allow-scripted, and without a token (only by asking).
    let mut cmd = env.warden(&["serve", "--port", "0", "--no-auth"]);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let s = Server {
        base: line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .to_string(),
        child,
    };
    let c = client();
    // A page that rebinds its own name to 127.0.0.1 still sends its name.
    let rebound = c
        .get(s.url("/session"))
        .header("host", "evil.example:4096")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 403);
    let body: Value = serde_json::from_str(&rebound.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "forbidden_host");
    let cross = c
        .get(s.url("/session"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status().as_u16(), 403);
    let local = c
        .get(s.url("/session"))
        .header("host", "localhost")
        .send()
        .await
        .unwrap();
    assert_eq!(local.status().as_u16(), 200);

    let id = new_session(&c, &s, &env).await;
    let (status, body) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(json!({"parts": [{"type": "text", "text": "hi"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-scripted"),
        "{body}"
    );
}

/// A client that opens an event stream and never reads it cannot hold
/// answers back: once its connection's buffers are full (a 24 MB answer
/// fills them), the answer waits for it a bounded while, then goes, and
/// the next prompt's answer does not wait for it at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_that_never_reads_does_not_hold_answers_back() {
    use std::io::Write as _;
    let env = Env::new();
    let big = "x".repeat(24 << 20);
    env.cassette(json!([{"text": big}, {"text": "small"}]));
    let s = Server::start(&env, &[], &[]);
    let addr = s.base.trim_start_matches("http://").to_string();
    // Raw: the request is sent, the response never read.
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stalled,
        "GET /event HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TEST_TOKEN}\r\n\r\n"
    )
    .unwrap();
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let model = json!({"providerID": "scripted",
                       "modelID": env.root.path().join("cassette.json").display().to_string()});
    for expected in [24 << 20, 5] {
        let (status, answer) = send(
            &c,
            "POST",
            &s.url(&format!("/session/{id}/message")),
            Some(json!({"parts": [{"type": "text", "text": "go"}], "model": model})),
        )
        .await;
        assert_eq!(status, 200);
        let text = answer["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "text")
            .and_then(|p| p["text"].as_str())
            .unwrap();
        assert_eq!(text.len(), expected);
    }
    drop(stalled);
}
