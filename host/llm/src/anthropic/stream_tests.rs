//! Edge cases of the Messages decoder beyond the recorded streams.

use serde_json::json;
use warden_protocol::llm::ErrorKind;

use super::*;
use crate::stream::decode_all;

fn sse(events: &[Value]) -> Vec<u8> {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect::<String>()
        .into_bytes()
}

fn run(events: &[Value]) -> Vec<LlmEvent> {
    decode_all(AnthropicDecoder::new("anthropic"), &sse(events))
}

fn start() -> Value {
    json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}})
}

fn stop(reason: &str) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ]
}

#[test]
fn redacted_thinking_keeps_its_data_for_sending_back() {
    let mut evs = vec![
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "OPAQUE"}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    evs.extend(stop("end_turn"));
    let ev = run(&evs);
    assert!(ev.contains(&LlmEvent::ReasoningEnd {
        id: "reasoning-0".into(),
        metadata: Some(json!({"anthropic": {"redacted_data": "OPAQUE"}}))
    }));
}

#[test]
fn a_server_tool_failure_is_a_tool_error_and_whole_start_input_is_used() {
    let mut evs = vec![
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "rust"}}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "web_search_tool_result", "tool_use_id": "srv_1",
             "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    evs.extend(stop("end_turn"));
    let ev = run(&evs);
    assert!(ev.contains(&LlmEvent::ToolCall {
        call_id: "srv_1".into(),
        name: "web_search".into(),
        input: r#"{"query":"rust"}"#.into(),
        provider_executed: true
    }));
    assert!(ev.contains(&LlmEvent::ToolError {
        call_id: "srv_1".into(),
        error: "web_search_tool_result: max_uses_exceeded".into()
    }));
}

#[test]
fn an_error_mid_text_closes_the_text_and_is_retryable_when_overloaded() {
    let ev = run(&[
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]);
    assert_eq!(
        ev[ev.len() - 2],
        LlmEvent::TextEnd {
            id: "text-0".into()
        }
    );
    match ev.last() {
        Some(LlmEvent::Error { error }) => {
            assert_eq!(error.kind, ErrorKind::Overloaded);
            assert!(error.retryable());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stream_without_message_stop_is_truncated_and_its_tool_call_not_handed_over() {
    let ev = run(&[
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "read", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"file"}}),
    ]);
    assert!(!ev.iter().any(|e| matches!(e, LlmEvent::ToolCall { .. })));
    match ev.last() {
        Some(LlmEvent::Error { error }) => {
            assert_eq!(error.kind, ErrorKind::Truncated);
            assert!(
                error.message.contains("no message_stop"),
                "{}",
                error.message
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn stop_reasons_and_usage() {
    let mut evs = vec![start()];
    evs.extend(stop("max_tokens"));
    let ev = run(&evs);
    match &ev[ev.len() - 2] {
        LlmEvent::FinishStep {
            reason,
            raw_reason,
            usage,
        } => {
            assert_eq!(*reason, FinishReason::Length);
            assert_eq!(raw_reason.as_deref(), Some("max_tokens"));
            assert_eq!((usage.input, usage.output), (5, 7));
            assert_eq!(
                usage.raw,
                Some(json!({"input_tokens": 5, "output_tokens": 7}))
            );
        }
        other => panic!("{other:?}"),
    }
    let cached = super::usage(
        json!({"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 9})
            .as_object()
            .unwrap(),
    );
    assert_eq!(
        (
            cached.input,
            cached.cache_read,
            cached.cache_write,
            cached.output
        ),
        (3, 100, 20, 9)
    );
}

#[test]
fn untrusted_shapes_never_panic() {
    for body in [
        "data: 1\n\n",
        "data: {\"type\": \"content_block_delta\", \"index\": 99, \"delta\": {}}\n\n",
        "data: {\"type\": \"content_block_start\", \"index\": -1, \"content_block\": 5}\n\n",
        "data: {\"type\": \"message_delta\", \"usage\": [1]}\n\n",
        "data: {\"type\": \"content_block_stop\", \"index\": \"x\"}\n\n",
        "event: error\ndata: {\"type\": \"error\"}\n\n",
    ] {
        let ev = decode_all(AnthropicDecoder::new("a"), body.as_bytes());
        assert!(
            matches!(ev.last(), Some(LlmEvent::Error { .. })),
            "{body}: {ev:?}"
        );
    }
}
