//! Every ask ends, with an event: at its deadline, and when its session is
//! aborted. (A watcher leaving is covered beside the broker, in
//! `permission/ask.rs`.)

use serde_json::{Value, json};

use crate::common::*;
use crate::server::{Server, client, is_idle, model, new_session, send, subscribe, until};

/// The events about asks and warnings, as (type, reply or message).
fn ask_events(seen: &[Value]) -> Vec<(String, String)> {
    seen.iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("permission.asked" | "permission.replied" | "session.warning")
            )
        })
        .map(|e| {
            let what = match e["type"].as_str().unwrap() {
                "permission.asked" => e["permission"].as_str().unwrap_or("").to_string(),
                "permission.replied" => e["reply"].as_str().unwrap_or("").to_string(),
                _ => e["message"].as_str().unwrap_or("").to_string(),
            };
            (e["type"].as_str().unwrap().to_string(), what)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_nobody_answers_is_refused_at_its_deadline_and_the_model_is_told_why() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}, "ask_timeout_ms": 400}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "could not read it"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;

    // The synchronous request comes back: the ask did not hold it.
    let (status, body) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let seen = until(&mut events, is_idle).await;
    let asks = ask_events(&seen);
    assert_eq!(asks.len(), 3, "{asks:?}");
    assert_eq!(asks[0], ("permission.asked".into(), "read".into()));
    assert_eq!(asks[1], ("permission.replied".into(), "reject".into()));
    assert_eq!(asks[2].0, "session.warning");
    assert!(
        asks[2]
            .1
            .contains("was refused: nobody answered within 400 ms"),
        "{asks:?}"
    );

    // The call's error says why (and a refusal ends the turn: the model is
    // not asked again, as with any refused ask).
    assert_eq!(env.requests().len(), 1);
    let parts = tool_parts(
        &env.ledger()
            .messages(&warden_protocol::SessionId(id.clone()))
            .await
            .unwrap(),
    );
    assert_eq!(parts.len(), 1);
    match &parts[0].1 {
        warden_protocol::ToolState::Error { error, .. } => assert_eq!(
            error,
            "permission denied: `read` on `a.txt` needs approval and nobody answered within 400 ms (ask_timeout_ms), so it was refused"
        ),
        other => panic!("{other:?}"),
    }
    let (_, pending) = send(&c, "GET", &s.url("/permission"), None).await;
    assert_eq!(pending, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_session_settles_its_waiting_ask_with_an_event() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "never"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;
    let (status, _) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 204);
    let mut seen = until(&mut events, |e| e["type"] == "permission.asked").await;
    let rid = seen.last().unwrap()["id"].as_str().unwrap().to_string();
    let (status, aborted) = send(&c, "POST", &s.url(&format!("/session/{id}/abort")), None).await;
    assert_eq!((status, aborted), (200, json!(true)));
    seen.extend(until(&mut events, is_idle).await);
    assert_eq!(
        ask_events(&seen),
        [
            ("permission.asked".to_string(), "read".to_string()),
            ("permission.replied".into(), "reject".into())
        ]
    );
    let replied = seen
        .iter()
        .find(|e| e["type"] == "permission.replied")
        .unwrap();
    assert_eq!(
        replied["requestID"].as_str(),
        Some(rid.as_str()),
        "{replied}"
    );
    let (_, pending) = send(&c, "GET", &s.url("/permission"), None).await;
    assert_eq!(pending, json!([]));
    // Answering it now is too late.
    let (status, _) = send(
        &c,
        "POST",
        &s.url(&format!("/permission/{rid}/reply")),
        Some(json!({"reply": "once"})),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_of_an_unknown_session_is_a_404() {
    let env = Env::new();
    let s = Server::start(&env, &[], &[]);
    let res = client()
        .get(s.url("/event?session=ses_nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ses_nope"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_s_no_model_error_speaks_of_the_request() {
    let env = Env::new();
    let s = Server::launch(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let (status, body) = send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/message")),
        Some(json!({"parts": [{"type": "text", "text": "hi"}]})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "no model chosen: name one in the request (\"model\": {\"providerID\", \"modelID\"}), or give the server a default model (its --model option or \"model\" in its config)"
    );
}
