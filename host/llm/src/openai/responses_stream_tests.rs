//! Edge cases of the Responses decoder beyond the recorded streams.

use super::*;
use crate::stream::decode_all;
use warden_protocol::llm::ErrorKind;

fn run(events: &[Value]) -> Vec<LlmEvent> {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    decode_all(ResponsesDecoder::new("openai"), body.as_bytes())
}

#[test]
fn an_incomplete_response_is_a_length_finish() {
    let ev = run(&[
        json!({"type": "response.created", "response": {}}),
        json!({"type": "response.output_text.delta", "item_id": "m1", "delta": "Hi"}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 10, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 6},
                      "output_tokens_details": {"reasoning_tokens": 1}}}}),
    ]);
    assert_eq!(
        ev[2..5],
        [
            LlmEvent::TextStart { id: "m1".into() },
            LlmEvent::TextDelta {
                id: "m1".into(),
                text: "Hi".into()
            },
            LlmEvent::TextEnd { id: "m1".into() },
        ]
    );
    match &ev[5] {
        LlmEvent::FinishStep {
            reason,
            raw_reason,
            usage,
        } => {
            assert_eq!(*reason, FinishReason::Length);
            assert_eq!(raw_reason.as_deref(), Some("incomplete"));
            assert_eq!(
                (usage.input, usage.output, usage.reasoning, usage.cache_read),
                (4, 3, 1, 6)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_response_without_an_error_event_uses_its_own_error() {
    let ev = run(&[
        json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "The server had an error"}}}),
    ]);
    match ev.last() {
        Some(LlmEvent::Error { error }) => {
            assert_eq!(error.kind, ErrorKind::Server);
            assert_eq!(
                error.message,
                "openai: The server had an error (server_error)"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cut_stream_is_truncated_and_reasoning_keeps_encrypted_content() {
    let ev = run(&[
        json!({"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1"}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "plan"}),
        json!({"type": "response.output_item.done", "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC"}}),
        json!({"type": "response.output_text.delta", "item_id": "m1", "delta": "par"}),
    ]);
    assert!(ev.contains(&LlmEvent::ReasoningEnd {
        id: "rs_1".into(),
        metadata: Some(json!({"openai": {"item_id": "rs_1", "encrypted_content": "ENC"}}))
    }));
    assert_eq!(ev[ev.len() - 2], LlmEvent::TextEnd { id: "m1".into() });
    assert!(
        matches!(ev.last(), Some(LlmEvent::Error { error }) if error.kind == ErrorKind::Truncated)
    );
}
