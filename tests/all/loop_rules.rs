//! The loop's rules through the real binary: a `stop` that still carries a
//! tool call, the step limit, and the doom loop.

use serde_json::json;
use warden_protocol::ToolState;

use crate::common::*;

#[tokio::test]
async fn a_stop_with_a_tool_call_still_runs_the_tool_and_sends_the_result_back() {
    let env = Env::new();
    env.file("notes.txt", "remember the milk\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "notes.txt"}}], "finish_reason": "stop"},
        {"text": "It says to remember the milk."}
    ]));
    let run = env.run_json("what do my notes say?");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        run.tool_states(),
        [
            ("call_1", "pending"),
            ("call_1", "running"),
            ("call_1", "completed")
        ]
        .map(|(a, b)| (a.into(), b.into()))
    );
    let reqs = env.requests();
    assert_eq!(reqs.len(), 2, "the provider's stop did not end the loop");
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].2, "     1\tremember the milk\n");
    // The first step's finish reason is recorded as the provider said it.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    match &msgs[1].info {
        warden_protocol::MessageInfo::Assistant(a) => {
            assert_eq!(a.finish, Some(warden_protocol::FinishReason::Stop))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_last_allowed_step_gets_the_max_steps_instruction_and_no_tools() {
    let env = Env::new();
    env.file("a.txt", "a\n");
    env.config(json!({"agent": {"build": {"steps": 2}}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "I read a.txt; that is all I can do."}
    ]));
    let run = env.run_json("read a.txt");
    assert!(run.status.success(), "{}", run.stderr);
    let reqs = env.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(offered(&reqs[0]), BUILTIN_TOOLS);
    assert!(offered(&reqs[1]).is_empty(), "no tools on the last step");
    let last = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(
        last["content"][0]["text"],
        warden_core::session::system::MAX_STEPS
    );
    // The first request had no such instruction.
    assert!(!reqs[0].to_string().contains("MAXIMUM STEPS REACHED"));
}

#[tokio::test]
async fn a_model_calling_a_tool_on_the_last_step_gets_an_error_not_a_run() {
    let env = Env::new();
    env.file("a.txt", "a\n");
    env.config(json!({"agent": {"build": {"steps": 1}}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "never asked: no steps are left"}
    ]));
    let run = env.run_json("read a.txt");
    // No answer: the run says why, and fails.
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let reqs = env.requests();
    assert_eq!(reqs.len(), 1, "the only step was used");
    assert!(offered(&reqs[0]).is_empty());
    let calls = tool_parts(&env.ledger().messages(&run.session()).await.unwrap());
    match &calls[0].1 {
        ToolState::Error { error, .. } => {
            assert!(
                error.contains("unknown tool `read`: no tools are available on this step"),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
    let error = run
        .events
        .iter()
        .find(|e| e["type"] == "session.error")
        .unwrap();
    let why = error["error"]["data"]["message"].as_str().unwrap();
    assert!(why.contains("used all its 1 steps"), "{error}");
    assert_eq!(error["error"]["name"], "MessageStoppedError");
    assert_eq!(run.finished()["error"], why);
}

#[tokio::test]
async fn three_identical_calls_ask_doom_loop_which_nobody_can_answer_so_the_loop_stops() {
    let env = Env::new();
    env.file("a.txt", "a\n");
    let call = |id: &str| json!({"tool_calls": [{"id": id, "name": "read", "arguments": {"filePath": "a.txt"}}]});
    env.cassette(json!([call("c1"), call("c2"), call("c3"), {"text": "never asked for"}]));
    let run = env.run_json("read a.txt until you are sure");
    // Nobody approved doom_loop (an ask): the loop stops, saying so.
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.error().contains("failed because nobody approved it"),
        "{}",
        run.stdout
    );
    assert_eq!(env.requests().len(), 3, "the loop stopped at the refusal");

    // The question, and its answer, went over the bus in order.
    let asked: Vec<&serde_json::Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "permission.asked")
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["permission"], "doom_loop");
    assert_eq!(asked[0]["patterns"], json!(["read"]));
    assert_eq!(asked[0]["tool"]["callID"], "c3");
    let replied: Vec<&serde_json::Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "permission.replied")
        .collect();
    assert_eq!(replied[0]["reply"], "reject");

    let ledger = env.ledger();
    let session = run.session();
    let calls = tool_parts(&ledger.messages(&session).await.unwrap());
    assert_eq!(calls.len(), 3);
    assert!(matches!(calls[0].1, ToolState::Completed { .. }));
    assert!(matches!(calls[1].1, ToolState::Completed { .. }));
    match &calls[2].1 {
        ToolState::Error {
            error,
            interrupted: false,
            ..
        } => assert!(
            error.contains("`doom_loop` permission was not granted"),
            "{error}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        timeline(&ledger, &session, "c3").await,
        ["pending", "running", "error"]
    );
    // The third call never reached the guest: the audit trail has no tool run for it.
    let audit = ledger.audit_trail(&session).await.unwrap();
    assert!(
        audit
            .iter()
            .filter(|a| a.call_id.as_deref() == Some("c3"))
            .all(|a| a.stage != "tool")
    );
    assert!(audit.iter().any(|a| a.call_id.as_deref() == Some("c3")
        && a.subject == "doom_loop"
        && a.decision == "asked:reject"));
}

#[tokio::test]
async fn an_allowed_doom_loop_keeps_going() {
    let env = Env::new();
    env.file("a.txt", "a\n");
    env.config(json!({"permission": {"doom_loop": "allow"}}));
    let call = |id: &str| json!({"tool_calls": [{"id": id, "name": "read", "arguments": {"filePath": "a.txt"}}]});
    env.cassette(json!([call("c1"), call("c2"), call("c3"), {"text": "done"}]));
    let run = env.run_json("read a.txt three times");
    assert!(run.status.success());
    assert_eq!(env.requests().len(), 4);
    assert_eq!(run.finished()["text"], "done");
}

#[tokio::test]
async fn a_long_session_is_compacted_and_completes_from_the_summary() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    let cassette = env.root.path().join("cassette.json");
    std::fs::write(
        &cassette,
        json!({"record": "requests.jsonl", "context_limit": 2000, "turns": [
            {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}], "usage": {"input": 1500, "output": 600}},
            {"text": "SUMMARY: read a.txt, it says alpha.", "usage": {"input": 1800, "output": 20}},
            {"text": "a.txt says alpha.", "usage": {"input": 200, "output": 10}}
        ]})
        .to_string(),
    )
    .unwrap();
    let run = env.run_json("what is in a.txt?");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.finished()["text"], "a.txt says alpha.");
    let reqs = env.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        tool_results(&reqs[1]).len() == 1,
        "the summary request saw the tool result"
    );
    let last = reqs[2]["messages"].as_array().unwrap();
    assert_eq!(last[0]["content"][0]["text"], "What did we do so far?");
    assert_eq!(
        last[1]["content"][0]["text"],
        "SUMMARY: read a.txt, it says alpha."
    );
    assert!(
        tool_results(&reqs[2]).is_empty(),
        "old tool output is not sent again"
    );
    // The ledger keeps everything: nothing was deleted to make room.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    assert_eq!(tool_parts(&msgs).len(), 1);
    assert!(msgs.iter().any(|m| m.text() == "what is in a.txt?"));
}
