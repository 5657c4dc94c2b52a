//! Provider faults through the real binary and a loopback server: rate
//! limits with retry-after, server errors, a connection cut mid-stream, a
//! malformed event, a stream that never finishes, a silent server, an
//! unreachable one, and retries running out. Asserted on the `--format json`
//! events (session.status `retry` with attempt, message, next) and on the
//! ledger: what was written before a fault is kept, once.

use serde_json::{Value, json};
use warden_protocol::{MessageError, MessageInfo, MessageWithParts, PartBody, ToolState};

use crate::common::*;
use crate::mock_provider::*;
use crate::providers::run_model;

const NOTES: &str = "remember the milk\n";
const ANSWER: &str = "Your notes say to remember the milk.";

/// A project with notes.txt and a config pointing `openai` at `server`,
/// with a fast retry policy (3 attempts).
fn setup(server: &MockProvider, extra: Value) -> Env {
    let env = Env::new();
    env.file("notes.txt", NOTES);
    let mut provider = json!({"base_url": format!("{}/v1", server.url())});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            provider[k] = v;
        }
    }
    env.config(json!({
        "provider": {"openai": provider},
        "retry": {"max_attempts": 3, "initial_delay_ms": 10, "factor": 2.0, "max_delay_ms": 50},
    }));
    env
}

fn run(env: &Env) -> Run {
    run_model(env, "openai/gpt-test", "what do my notes say?", &[])
}

/// (attempt, message, next) of each retry status, in order.
fn retries(run: &Run) -> Vec<(u64, String, i64)> {
    run.events
        .iter()
        .filter(|e| e["type"] == "session.status" && e["status"]["type"] == "retry")
        .map(|e| {
            (
                e["status"]["attempt"].as_u64().unwrap(),
                e["status"]["message"].as_str().unwrap().to_string(),
                e["status"]["next"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn read_call() -> Reply {
    chat_tool_call("call_1", "read", &json!({"filePath": "notes.txt"}))
}

fn assistants(msgs: &[MessageWithParts]) -> Vec<&MessageWithParts> {
    msgs.iter()
        .filter(|m| matches!(m.info, MessageInfo::Assistant(_)))
        .collect()
}

fn error_of(m: &MessageWithParts) -> Option<MessageError> {
    match &m.info {
        MessageInfo::Assistant(a) => a.error.clone(),
        MessageInfo::User(_) => None,
    }
}

fn texts(m: &MessageWithParts) -> Vec<String> {
    m.parts
        .iter()
        .filter_map(|p| match &p.body {
            PartBody::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The tool step is in the ledger exactly once, completed.
async fn assert_tool_step_once(env: &Env, run: &Run) {
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let calls = tool_parts(&msgs);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, "call_1");
    assert!(
        matches!(calls[0].1, ToolState::Completed { .. }),
        "{calls:?}"
    );
    assert_eq!(
        timeline(&env.ledger(), &run.session(), "call_1").await,
        ["pending", "running", "completed"]
    );
}

#[tokio::test]
async fn a_429_waits_as_long_as_retry_after_says_then_succeeds() {
    let server = MockProvider::start(vec![
        Reply::json(
            429,
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
            &[("retry-after", "1")],
        ),
        chat_text(ANSWER, 10, 5),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], ANSWER);
    let r = retries(&run);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].0, 1);
    assert_eq!(
        r[0].1,
        "openai: Rate limit reached for requests (rate_limit_exceeded) (HTTP 429)"
    );
    // The wait came from retry-after (1 s), not the 10 ms backoff: the next
    // attempt was scheduled at least a second after the step began.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let created = match &assistants(&msgs)[0].info {
        MessageInfo::Assistant(a) => a.time.created,
        MessageInfo::User(_) => unreachable!(),
    };
    assert!(
        r[0].2 - created >= 1000,
        "next {} vs created {created}",
        r[0].2
    );
    assert_eq!(run.statuses(), ["busy", "retry", "busy", "idle"]);
    let reqs = server.received();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body, "the retry asks the same thing");
}

#[tokio::test]
async fn a_retry_after_longer_than_the_policy_allows_is_not_waited_for() {
    let server = MockProvider::start(vec![Reply::json(
        429,
        json!({"error": {"message": "slow down"}}),
        &[("retry-after", "5")],
    )]);
    let env = Env::new();
    env.config(json!({
        "provider": {"openai": {"base_url": format!("{}/v1", server.url())}},
        "retry": {"max_attempts": 3, "initial_delay_ms": 10, "max_retry_after_ms": 1000},
    }));
    let run = run(&env);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(retries(&run).is_empty());
    assert_eq!(server.received().len(), 1);
    assert_eq!(run.finished()["error"], "openai: slow down");
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    assert_eq!(
        error_of(assistants(&msgs)[0]),
        Some(MessageError::Provider {
            message: "openai: slow down".into(),
            status: Some(429)
        })
    );
}

#[tokio::test]
async fn two_503s_then_success_after_a_tool_step_keeps_the_tool_step_once() {
    let server = MockProvider::start(vec![
        read_call(),
        Reply::json(
            503,
            json!({"error": {"message": "upstream unavailable"}}),
            &[],
        ),
        Reply::Http {
            status: 503,
            headers: vec![("content-type".into(), "text/html".into())],
            body: b"<html>503 Service Unavailable</html>".to_vec(),
        },
        chat_text(ANSWER, 60, 9),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], ANSWER);
    let r: Vec<(u64, String)> = retries(&run).into_iter().map(|(a, m, _)| (a, m)).collect();
    assert_eq!(
        r,
        [
            (1, "openai: upstream unavailable (HTTP 503)".to_string()),
            (
                2,
                "openai: <html>503 Service Unavailable</html> (HTTP 503)".to_string()
            ),
        ]
    );
    let reqs = server.received();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[1].body, reqs[2].body);
    assert_eq!(reqs[2].body, reqs[3].body);
    assert_tool_step_once(&env, &run).await;
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m.info.role()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    let last = assistants(&msgs)[1];
    assert_eq!(error_of(last), None);
    assert_eq!(texts(last), [ANSWER]);
    let kinds: Vec<&str> = last.parts.iter().map(|p| p.body.kind()).collect();
    assert_eq!(kinds, ["step-start", "text", "step-finish"]);
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_retried_and_what_was_written_stays_once() {
    let partial = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Your notes \"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"sa"
    );
    let server = MockProvider::start(vec![
        read_call(),
        Reply::Cut {
            body: partial.as_bytes().to_vec(),
        },
        chat_text(ANSWER, 60, 9),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let r = retries(&run);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].1
            .starts_with("openai: the connection broke before the model finished"),
        "{}",
        r[0].1
    );
    let reqs = server.received();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1].body, reqs[2].body,
        "the retry resends the same history"
    );
    assert_tool_step_once(&env, &run).await;
    // The cut attempt's text was streamed into the ledger and stays there,
    // closed and marked ignored; the retry's answer follows it, once, and is
    // the only text the user is answered with or the model is shown again.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let last = assistants(&msgs)[1];
    assert_eq!(texts(last), ["Your notes ", ANSWER]);
    let ignored: Vec<bool> = last
        .parts
        .iter()
        .filter_map(|p| match &p.body {
            warden_protocol::PartBody::Text { ignored, .. } => Some(*ignored),
            _ => None,
        })
        .collect();
    assert_eq!(ignored, [true, false]);
    assert_eq!(last.text(), ANSWER);
    assert_eq!(run.finished()["text"], ANSWER);
    let kinds: Vec<&str> = last.parts.iter().map(|p| p.body.kind()).collect();
    assert_eq!(
        kinds,
        ["step-start", "text", "step-start", "text", "step-finish"]
    );
    assert_eq!(error_of(last), None);
}

#[tokio::test]
async fn a_malformed_event_fails_the_step_without_retrying() {
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":oops}}]}\n\n",
        "data: [DONE]\n\n",
    );
    let server = MockProvider::start(vec![Reply::sse(body), chat_text("never", 1, 1)]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(retries(&run).is_empty());
    assert_eq!(server.received().len(), 1);
    let error = run.finished()["error"].as_str().unwrap().to_string();
    assert!(
        error.starts_with("openai: the stream carried an event whose data is not valid JSON")
            && error.ends_with("{\"choices\":[{\"index\":0,\"delta\":{\"content\":oops}}]}"),
        "{error}"
    );
    let session_errors: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "session.error")
        .collect();
    assert_eq!(session_errors.len(), 1);
    assert_eq!(session_errors[0]["error"]["name"], "APIError");
    assert_eq!(
        session_errors[0]["error"]["data"]["message"],
        error.as_str()
    );
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let a = assistants(&msgs)[0];
    assert_eq!(texts(a), ["Hi"], "the text before the bad event is kept");
    assert!(matches!(
        error_of(a),
        Some(MessageError::Provider { status: None, .. })
    ));
}

#[test]
fn a_stream_that_ends_without_finishing_is_retried() {
    let unfinished = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Your\"},\"finish_reason\":null}]}\n\n";
    let server = MockProvider::start(vec![Reply::sse(unfinished), chat_text(ANSWER, 10, 5)]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let r = retries(&run);
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0].1,
        "openai: the stream ended before the model finished (no finish_reason and no [DONE])"
    );
    assert_eq!(server.received().len(), 2);
}

#[test]
fn a_silent_stream_times_out_and_is_retried() {
    let server = MockProvider::start(vec![
        Reply::Stall {
            body: b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Your\"},\"finish_reason\":null}]}\n\n".to_vec(),
        },
        chat_text(ANSWER, 10, 5),
    ]);
    let env = setup(&server, json!({"idle_timeout_ms": 300}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let r = retries(&run);
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0].1,
        "openai: the stream went silent for 300ms before the model finished"
    );
    // The stalled attempt's "Your" is kept in the ledger but not in the answer.
    assert_eq!(run.finished()["text"], ANSWER);
}

#[tokio::test]
async fn when_attempts_run_out_the_error_is_recorded_and_nothing_else_changes() {
    let unavailable = || Reply::json(503, json!({"error": {"message": "down"}}), &[]);
    let server = MockProvider::start(vec![
        unavailable(),
        unavailable(),
        unavailable(),
        chat_text("never", 1, 1),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let attempts: Vec<u64> = retries(&run).iter().map(|r| r.0).collect();
    assert_eq!(attempts, [1, 2]);
    assert_eq!(
        server.received().len(),
        3,
        "max_attempts is 3, the first included"
    );
    assert_eq!(run.finished()["error"], "openai: down");
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m.info.role()).collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(
        error_of(assistants(&msgs)[0]),
        Some(MessageError::Provider {
            message: "openai: down".into(),
            status: Some(503)
        })
    );
    assert!(assistants(&msgs)[0].parts.is_empty());
}

#[test]
fn an_unreachable_server_is_a_clear_network_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let env = Env::new();
    env.config(json!({
        "provider": {"openai": {"base_url": format!("http://127.0.0.1:{port}/v1")}},
        "retry": {"max_attempts": 2, "initial_delay_ms": 10},
    }));
    let run = run(&env);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let r = retries(&run);
    assert_eq!(r.len(), 1);
    let error = run.finished()["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "openai: cannot connect to http://127.0.0.1:{port}/v1/chat/completions:"
        )) && error.ends_with("is the server running, and is base_url right?"),
        "{error}"
    );
}

#[test]
fn an_anthropic_overloaded_event_mid_stream_is_retried() {
    let overloaded = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Rem\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"details\":null,\"type\":\"overloaded_error\",\"message\":\"Overloaded\"} }\n\n",
    );
    let server = MockProvider::start(vec![
        Reply::sse(overloaded),
        anthropic_turn(None, "Remember the milk.", None),
    ]);
    let env = Env::new();
    env.config(json!({
        "provider": {"anthropic": {"base_url": server.url()}},
        "retry": {"max_attempts": 3, "initial_delay_ms": 10},
    }));
    let run = run_model(&env, "anthropic/claude-test", "notes?", &[]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let r = retries(&run);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, "anthropic: Overloaded (overloaded_error)");
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn a_stream_that_fails_after_a_tool_started_is_not_asked_again() {
    // The tool call is complete (its block closed) before the error arrives:
    // asking again could run it twice, so the step ends with it instead.
    let failed = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"filePath\\\": \\\"notes.txt\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let server = MockProvider::start(vec![
        Reply::sse(failed),
        anthropic_turn(None, "Remember the milk.", None),
    ]);
    let env = Env::new();
    env.file("notes.txt", NOTES);
    env.config(json!({
        "provider": {"anthropic": {"base_url": server.url()}},
        "retry": {"max_attempts": 3, "initial_delay_ms": 10},
    }));
    let run = run_model(&env, "anthropic/claude-test", "notes?", &[]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(retries(&run).is_empty(), "not asked again");
    let warning = run
        .events
        .iter()
        .find(|e| e["type"] == "session.warning")
        .unwrap();
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("after it had called tools"),
        "{warning}"
    );
    let received = server.received();
    assert_eq!(received.len(), 2, "the next request carries the result");
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let calls: Vec<_> = msgs
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| p.tool_state().map(|s| s.status()))
        .collect();
    assert_eq!(calls, ["completed"], "the tool ran once");
    assert!(received[1].body.to_string().contains("toolu_1"));
}

#[tokio::test]
async fn a_context_overflow_is_not_retried_but_compacted_and_the_session_completes() {
    let server = MockProvider::start(vec![
        Reply::json(
            400,
            json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                             "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            &[],
        ),
        chat_text("SUMMARY: the user asked about their notes.", 50, 10),
        chat_text(ANSWER, 20, 5),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        retries(&run).is_empty(),
        "an overflow is never retried as is"
    );
    let received = server.received();
    assert_eq!(received.len(), 3);
    // The second request asks for the summary, with no tools.
    assert_eq!(
        received[1].body["messages"][0]["content"],
        warden_core::session::compaction::SUMMARY_SYSTEM
    );
    assert!(
        received[1]
            .body
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty()))
    );
    // The third starts from the summary.
    let third = received[2].body["messages"].as_array().unwrap();
    assert_eq!(third[1]["content"], "What did we do so far?");
    assert_eq!(
        third[2]["content"],
        "SUMMARY: the user asked about their notes."
    );
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    assert!(
        matches!(
            error_of(assistants(&msgs)[0]),
            Some(MessageError::ContextOverflow { ref message })
                if message.contains("maximum context length is 128000 tokens")
                    && message.ends_with("the conversation is longer than the model's context window")
        ),
        "{:?}",
        error_of(assistants(&msgs)[0])
    );
    assert_eq!(run.finished()["text"], ANSWER);
}

#[test]
fn a_refused_key_says_which_variable_to_check() {
    let server = MockProvider::start(vec![Reply::json(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-wrong.", "type": "invalid_request_error", "code": "invalid_api_key"}}),
        &[],
    )]);
    let env = setup(&server, json!({"api_key_env": "WARDEN_TEST_KEY"}));
    let run = run_model(
        &env,
        "openai/gpt-test",
        "hi",
        &[("WARDEN_TEST_KEY", "sk-wrong")],
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(retries(&run).is_empty(), "a refused key is not retried");
    assert_eq!(
        run.finished()["error"],
        "openai: Incorrect API key provided: sk-wrong. (invalid_api_key); check the key in $WARDEN_TEST_KEY and the account's access"
    );
}

#[tokio::test]
async fn a_step_whose_call_never_started_is_retried_and_the_cut_call_is_never_shown() {
    // The stream breaks while the model is still writing a call's
    // arguments; the retry then gets a 503. The cut call never ran, so the
    // 503 is retried like any other, and the cut call is set aside: no
    // later request shows the model a call it never finished making.
    let cut = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_cut\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"filePa\"}}]},\"finish_reason\":null}]}\n\n",
    );
    let server = MockProvider::start(vec![
        Reply::Cut {
            body: cut.as_bytes().to_vec(),
        },
        Reply::json(
            503,
            json!({"error": {"message": "upstream unavailable"}}),
            &[],
        ),
        read_call(),
        chat_text(ANSWER, 60, 9),
    ]);
    let env = setup(&server, json!({}));
    let run = run(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], ANSWER);
    let r: Vec<(u64, String)> = retries(&run).into_iter().map(|(a, m, _)| (a, m)).collect();
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(
        r[0].1
            .starts_with("openai: the connection broke before the model finished"),
        "{r:?}"
    );
    assert_eq!(
        r[1],
        (2, "openai: upstream unavailable (HTTP 503)".to_string())
    );
    assert!(
        !run.events.iter().any(|e| e["type"] == "session.warning"),
        "no step ended early: {:?}",
        run.events
    );
    let reqs = server.received();
    assert_eq!(reqs.len(), 4);
    assert_eq!(
        reqs[0].body, reqs[1].body,
        "the retry resends the same history"
    );
    assert_eq!(reqs[1].body, reqs[2].body);
    assert!(reqs[3].body.to_string().contains("call_1"));
    assert!(
        !reqs[3].body.to_string().contains("call_cut"),
        "the cut call is not shown: {}",
        reqs[3].body
    );
    // Both calls are on record; the cut one ended interrupted and set aside.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let calls: Vec<(String, &str, bool, bool)> = msgs
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.body {
            PartBody::Tool {
                call_id,
                state,
                ignored,
                ..
            } => Some((
                call_id.clone(),
                state.status(),
                state.is_interrupted(),
                *ignored,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("call_cut".to_string(), "error", true, true),
            ("call_1".to_string(), "completed", false, false),
        ]
    );
    assert_eq!(
        timeline(&env.ledger(), &run.session(), "call_cut").await,
        ["pending", "error"]
    );
    let last = assistants(&msgs)[1];
    assert_eq!(error_of(last), None);
    assert_eq!(texts(last), [ANSWER]);
}
