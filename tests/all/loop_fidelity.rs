//! The loop as the seeds and OpenCode 1.18.33 run it, where users notice,
//! through the real binary:
//!
//! - a rule's deny is an error part the model reads, and the loop goes on
//!   (the second call and the answer arrive, exit 0);
//! - a question nobody approved, or a person rejected, stops the loop, and
//!   the stop says why: on stderr and with exit status 1 for `warden run`,
//!   in `run.finished`, and over HTTP as the message's error and a
//!   `session.error` event (`experimental.continue_loop_on_deny` lets the
//!   model go on instead);
//! - a retried attempt may reuse the call id of the attempt that dropped
//!   (a recorded OpenAI stream, cut, then replayed whole): its read runs.
//!
//! `opencode run --attach` against a model that answers at once is in
//! `opencode.rs`.

use serde_json::{Value, json};
use warden_protocol::{MessageError, MessageInfo, PartBody, ToolState};

use crate::common::*;
use crate::mock_provider::*;
use crate::providers::run_model;
use crate::server::{Server, client, send, subscribe};

/// Read `.env` (denied), then `a.txt`, then answer.
fn deny_then_read(env: &Env) {
    env.file(".env", "SECRET=1\n");
    env.file("a.txt", "alpha\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": ".env"}}]},
        {"tool_calls": [{"id": "c2", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "a.txt says alpha."}
    ]));
}

#[test]
fn a_rules_deny_is_an_error_the_model_reads_and_the_loop_goes_on() {
    let env = Env::new();
    deny_then_read(&env);
    env.config(json!({"permission": {"*": "allow", "read": {"*.env": "deny"}}}));
    let run = env.run_json("read .env, then a.txt");
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.tool_states(),
        [
            ("c1".to_string(), "pending".to_string()),
            ("c1".to_string(), "running".to_string()),
            ("c1".to_string(), "error".to_string()),
            ("c2".to_string(), "pending".to_string()),
            ("c2".to_string(), "running".to_string()),
            ("c2".to_string(), "completed".to_string()),
        ]
    );
    assert_eq!(run.finished()["text"], "a.txt says alpha.");
    assert_eq!(run.finished()["error"], Value::Null);
    // The model was shown the denial, then the file.
    let reqs = env.requests();
    assert_eq!(reqs.len(), 3);
    let second = tool_results(&reqs[1]);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].0, "c1");
    assert!(second[0].1, "an error result");
    assert!(
        second[0].2.contains("denied by the rule"),
        "{:?}",
        second[0]
    );
    let third = tool_results(&reqs[2]);
    assert_eq!(third[1].0, "c2");
    assert!(!third[1].1 && third[1].2.contains("alpha"), "{third:?}");
}

#[tokio::test]
async fn an_ask_nobody_approved_stops_the_loop_saying_why_with_a_nonzero_exit() {
    let env = Env::new();
    deny_then_read(&env);
    env.config(json!({"permission": {"*": "allow", "read": {"*.env": "ask"}}}));
    // JSON: the reason is the run's error.
    let run = env.run_json("read .env, then a.txt");
    assert_eq!(run.status.code(), Some(1), "{}\n{}", run.stdout, run.stderr);
    let finished = run.finished();
    let why = run.error();
    assert!(
        why.starts_with("stopped after the call `read` (c1) failed because nobody approved it"),
        "{why}"
    );
    assert!(why.contains("continue_loop_on_deny"), "{why}");
    assert_eq!(finished["errorName"], "MessageStoppedError");
    let errors: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "session.error")
        .collect();
    assert_eq!(errors.len(), 1, "{:?}", run.events);
    assert_eq!(errors[0]["error"]["name"], "MessageStoppedError");
    assert_eq!(errors[0]["error"]["data"]["message"], why);
    // The model was not asked again, and the ledger says the same.
    assert_eq!(env.requests().len(), 1);
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let last = msgs.last().unwrap();
    match &last.info {
        MessageInfo::Assistant(a) => assert!(
            matches!(&a.error, Some(MessageError::Stopped { message }) if message == why),
            "{:?}",
            a.error
        ),
        other => panic!("{other:?}"),
    }
    // Text: said on stderr, exit 1, nothing on stdout.
    let out = env
        .warden(&[
            "run",
            "--model",
            &format!(
                "scripted:{}",
                env.root.path().join("cassette.json").display()
            ),
            "read .env, then a.txt",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: stopped after the call `read` (c1) failed because nobody approved it"
        ),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("alpha"));
}

#[test]
fn continue_loop_on_deny_lets_the_model_go_on_after_an_unapproved_ask() {
    let env = Env::new();
    deny_then_read(&env);
    env.config(
        json!({"permission": {"*": "allow", "read": {"*.env": "ask"}},
                      "experimental": {"continue_loop_on_deny": true}}),
    );
    let run = env.run_json("read .env, then a.txt");
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "a.txt says alpha.");
    assert_eq!(env.requests().len(), 3);
}

#[tokio::test]
async fn a_person_rejecting_over_http_stops_with_the_reason_in_the_message_and_event() {
    let env = Env::new();
    deny_then_read(&env);
    env.config(json!({"permission": {"*": "allow", "read": {"*.env": "ask"}}}));
    let server = Server::start(&env, &[], &[]);
    let c = client();
    let (_, session) = send(&c, "POST", &server.url("/session"), Some(json!({}))).await;
    let id = session["id"].as_str().unwrap().to_string();
    let mut events = subscribe(server.url(&format!("/event?session={id}"))).await;
    let model = json!({"providerID": "scripted",
                       "modelID": env.root.path().join("cassette.json").display().to_string()});
    let prompt = {
        let c = c.clone();
        let url = server.url(&format!("/session/{id}/message"));
        tokio::spawn(async move {
            send(
                &c,
                "POST",
                &url,
                Some(json!({"parts": [{"type": "text", "text": "go"}], "model": model})),
            )
            .await
        })
    };
    let mut seen = Vec::new();
    while let Some(e) = events.recv().await {
        seen.push(e.clone());
        if e["type"] == "permission.asked" {
            let req = e["id"].as_str().unwrap();
            let (status, _) = send(
                &c,
                "POST",
                &server.url(&format!("/permission/{req}/reply")),
                Some(json!({"reply": "reject"})),
            )
            .await;
            assert_eq!(status, 200);
        }
        if e["type"] == "session.idle" {
            break;
        }
    }
    let (status, answer) = prompt.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let error = &answer["info"]["error"];
    assert_eq!(error["name"], "MessageStoppedError", "{answer}");
    let why = error["data"]["message"].as_str().unwrap();
    assert!(
        why.starts_with("stopped after the call `read` (c1) failed because a person rejected it: permission denied: `read` on"),
        "{why}"
    );
    // The event stream said the same, before the session went idle.
    let kinds: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k}: {kinds:?}"))
    };
    assert!(at("permission.asked") < at("permission.replied"));
    assert!(at("permission.replied") < at("session.error"));
    assert!(at("session.error") < at("session.idle"));
    assert_eq!(seen[at("session.error")]["error"]["data"]["message"], why);
    assert_eq!(env.requests().len(), 1, "the model was not asked again");
}

/// OpenAI's recorded `chat-tool-call` stream, its call made a `read` of
/// `notes.txt` (same ids, chunks and fields otherwise).
fn recorded_read() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/conformance/streams/openai/chat-tool-call.sse");
    std::fs::read_to_string(path)
        .unwrap()
        .replace("get_capital", "read")
        .replace("\"arguments\":\"country\"", "\"arguments\":\"filePath\"")
        .replace("\"arguments\":\"UK\"", "\"arguments\":\"notes.txt\"")
}

#[tokio::test]
async fn a_retry_may_reuse_the_call_id_of_the_attempt_that_dropped() {
    let whole = recorded_read();
    let id = "call_ZR5UUuTt3pf61kjwAJIYdVMj";
    assert!(whole.contains(id) && whole.contains("notes.txt"));
    // The first attempt drops after three chunks: the call begun, not made.
    let cut: String = whole.split_inclusive("\n\n").take(3).collect();
    let server = MockProvider::start(vec![
        Reply::Cut {
            body: cut.into_bytes(),
        },
        Reply::sse(whole),
        chat_text("Your notes say to remember the milk.", 60, 9),
    ]);
    let env = Env::new();
    env.file("notes.txt", "remember the milk\n");
    env.config(json!({
        "provider": {"openai": {"base_url": format!("{}/v1", server.url())}},
        "retry": {"max_attempts": 3, "initial_delay_ms": 10, "factor": 2.0, "max_delay_ms": 50},
    }));
    let run = run_model(&env, "openai/gpt-test", "what do my notes say?", &[]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.finished()["text"],
        "Your notes say to remember the milk."
    );
    // The last request shows the model its read, with the file's content.
    let reqs = server.received();
    assert_eq!(reqs.len(), 3);
    let last = reqs[2].body.to_string();
    assert!(
        last.contains(id) && last.contains("remember the milk"),
        "{last}"
    );
    assert!(!last.contains("already has a tool call"), "{last}");
    // Both calls are on record under the one id: the dropped attempt's
    // interrupted and set aside, as it was; the retry's completed.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let calls: Vec<(String, &str, bool)> = msgs
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.body {
            PartBody::Tool {
                call_id,
                state,
                ignored,
                ..
            } => Some((call_id.clone(), state.status(), *ignored)),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            (id.to_string(), "error", true),
            (id.to_string(), "completed", false)
        ]
    );
    let parts = tool_parts(&msgs);
    assert!(matches!(&parts[0].1, ToolState::Error { .. } if parts[0].1.is_interrupted()));
}
