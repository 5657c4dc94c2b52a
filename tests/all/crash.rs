//! Crash safety: a SIGKILLed run is finished by `warden session resume`
//! from the ledger alone.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{Value, json};
use warden_protocol::{MessageInfo, MessageWithParts, SessionId, ToolState};

use crate::common::*;

/// Start `warden run --format json`, read its events until `until` says
/// stop, then SIGKILL it. Returns the session id.
async fn run_and_kill(env: &Env, prompt: &str, until: impl Fn(&Value) -> bool) -> SessionId {
    let cassette = env.root.path().join("cassette.json");
    let mut child = env
        .warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!("scripted:{}", cassette.display()),
            prompt,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut session = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let event = flat(serde_json::from_str(&line).unwrap());
        if session.is_none() && event["type"] == "session.status" {
            session = Some(SessionId(event["sessionID"].as_str().unwrap().to_string()));
        }
        if until(&event) {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL: no cleanup runs in the child.
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run was killed, not finished");
    session.expect("the run reported its session")
}

fn resume(env: &Env, session: &SessionId) -> Run {
    Run::from(
        env.warden(&["session", "resume", session.as_str(), "--format", "json"])
            .output()
            .unwrap(),
    )
}

fn is_tool(event: &Value, status: &str) -> bool {
    event["type"] == "message.part.updated"
        && event["part"]["type"] == "tool"
        && event["part"]["state"]["status"] == status
}

fn assistants(msgs: &[MessageWithParts]) -> Vec<&warden_protocol::AssistantInfo> {
    msgs.iter()
        .filter_map(|m| match &m.info {
            MessageInfo::Assistant(a) => Some(a),
            MessageInfo::User(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn killed_after_the_tool_completed_resume_finishes_without_duplicates() {
    let env = Env::new();
    env.file("package.json", r#"{"scripts": {"build": "tsc"}}"#);
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        // The second answer is slow, so the kill lands before it arrives.
        {"text": "One script: build.", "delay_ms": 20000}
    ]));
    let session = run_and_kill(&env, "which scripts?", |e| is_tool(e, "completed")).await;

    // The resumed process reads the cassette afresh; answer at once this time.
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "One script: build."}
    ]));
    let run = resume(&env, &session);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "One script: build.");

    // The answer came from the model's next turn, which saw the completed result once.
    let reqs = env.requests();
    let last = reqs.last().unwrap();
    // It followed exactly one earlier model turn (the tool call).
    let earlier_turns = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(earlier_turns, 1);
    let results = tool_results(last);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!((results[0].0.as_str(), results[0].1), ("call_1", false));
    assert!(results[0].2.contains("\"build\": \"tsc\""));

    // The ledger holds one tool call, completed once; nothing lost, nothing doubled.
    let ledger = env.ledger();
    let msgs = ledger.messages(&session).await.unwrap();
    let calls = tool_parts(&msgs);
    assert_eq!(calls.len(), 1);
    assert!(matches!(calls[0].1, ToolState::Completed { .. }));
    assert_eq!(
        timeline(&ledger, &session, "call_1").await,
        ["pending", "running", "completed"]
    );
    let users = msgs.iter().filter(|m| m.info.role() == "user").count();
    assert_eq!(users, 1);
    let texts: Vec<String> = msgs
        .iter()
        .map(|m| m.text())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(texts, ["which scripts?", "One script: build."]);
    let a = assistants(&msgs);
    assert!(
        a.iter().all(|a| a.time.completed.is_some()),
        "every assistant message is closed"
    );
    assert_eq!(
        a.last().unwrap().finish,
        Some(warden_protocol::FinishReason::Stop)
    );
}

#[tokio::test]
async fn killed_while_a_tool_runs_resume_reports_it_interrupted_to_the_model() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 60000}))]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "sleep", "arguments": {"ms": 30000}}]},
        {"text": "The sleep was cut short."}
    ]));
    let session = run_and_kill(&env, "sleep a while", |e| is_tool(e, "running")).await;

    // Before resuming, the ledger still says running: nobody cleaned up.
    let ledger = env.ledger();
    let before = tool_parts(&ledger.messages(&session).await.unwrap());
    assert!(
        matches!(before[0].1, ToolState::Running { .. }),
        "{before:?}"
    );

    let run = resume(&env, &session);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "The sleep was cut short.");

    let msgs = ledger.messages(&session).await.unwrap();
    let calls = tool_parts(&msgs);
    assert_eq!(calls.len(), 1);
    match &calls[0].1 {
        ToolState::Error {
            interrupted,
            error,
            input,
            ..
        } => {
            assert!(interrupted);
            assert!(error.contains("stopped before it finished"), "{error}");
            assert_eq!(input, &json!({"ms": 30000}));
        }
        other => panic!("expected an interrupted error, got {other:?}"),
    }
    assert_eq!(
        timeline(&ledger, &session, "call_1").await,
        ["pending", "running", "error"]
    );

    // The model was shown an error result for the call, not nothing.
    let reqs = env.requests();
    assert_eq!(reqs.len(), 2);
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 1);
    let (call, is_error, output) = &results[0];
    assert_eq!(call, "call_1");
    assert!(is_error);
    assert!(
        output.starts_with("The tool call was interrupted before it finished"),
        "{output}"
    );

    // The killed step is closed as interrupted, and the answer follows it.
    let a = assistants(&msgs);
    assert_eq!(a.len(), 2);
    assert!(matches!(
        a[0].error,
        Some(warden_protocol::MessageError::Interrupted { .. })
    ));
    assert_eq!(a[1].finish, Some(warden_protocol::FinishReason::Stop));
}
