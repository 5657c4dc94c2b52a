//! Edge cases of the Chat Completions decoder that the recorded streams in
//! `tests/conformance/streams/` do not cover.

use serde_json::json;
use warden_protocol::llm::ErrorKind;

use super::*;
use crate::stream::decode_all;

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

fn run(parts: &[String]) -> Vec<LlmEvent> {
    decode_all(ChatDecoder::new("local"), parts.concat().as_bytes())
}

fn done() -> String {
    "data: [DONE]\n\n".into()
}

fn calls(events: &[LlmEvent]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCall {
                call_id,
                name,
                input,
                ..
            } => Some((call_id.clone(), name.clone(), input.clone())),
            _ => None,
        })
        .collect()
}

fn error_kind(events: &[LlmEvent]) -> Option<ErrorKind> {
    match events.last() {
        Some(LlmEvent::Error { error }) => Some(error.kind),
        _ => None,
    }
}

#[test]
fn reasoning_then_text_then_a_call_in_exact_order() {
    let ev = run(&[
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning_content": "think"}), None),
        chunk(json!({"content": "Hi"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]);
    let usage = usage(None);
    assert_eq!(
        ev,
        vec![
            LlmEvent::Start,
            LlmEvent::StartStep,
            LlmEvent::ReasoningStart {
                id: "reasoning-1".into()
            },
            LlmEvent::ReasoningDelta {
                id: "reasoning-1".into(),
                text: "think".into()
            },
            LlmEvent::ReasoningEnd {
                id: "reasoning-1".into(),
                metadata: None
            },
            LlmEvent::TextStart {
                id: "text-2".into()
            },
            LlmEvent::TextDelta {
                id: "text-2".into(),
                text: "Hi".into()
            },
            LlmEvent::TextEnd {
                id: "text-2".into()
            },
            LlmEvent::ToolInputStart {
                call_id: "c1".into(),
                name: "read".into()
            },
            LlmEvent::ToolInputDelta {
                call_id: "c1".into(),
                delta: "{}".into()
            },
            LlmEvent::ToolInputEnd {
                call_id: "c1".into()
            },
            LlmEvent::ToolCall {
                call_id: "c1".into(),
                name: "read".into(),
                input: "{}".into(),
                provider_executed: false
            },
            LlmEvent::FinishStep {
                reason: FinishReason::ToolCalls,
                raw_reason: Some("tool_calls".into()),
                usage: usage.clone()
            },
            LlmEvent::Finish {
                reason: FinishReason::ToolCalls,
                usage
            },
        ]
    );
}

#[test]
fn a_call_without_index_or_id_gets_one_made_up_id() {
    let ev = run(&[
        chunk(
            json!({"tool_calls": [{"id": "", "type": "function", "function": {"name": "read", "arguments": "{\"filePath\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"function": {"arguments": "\"a\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]);
    let c = calls(&ev);
    assert_eq!(c.len(), 1);
    assert!(c[0].0.starts_with("call_") && c[0].0.len() > 10, "{c:?}");
    assert_eq!(c[0].2, r#"{"filePath":"a"}"#);
    let started: Vec<&LlmEvent> = ev
        .iter()
        .filter(|e| matches!(e, LlmEvent::ToolInputStart { call_id, .. } if *call_id == c[0].0))
        .collect();
    assert_eq!(started.len(), 1, "the made-up id is stable: {ev:?}");
}

#[test]
fn arguments_before_the_name_wait_for_it_and_parallel_calls_stay_apart() {
    let ev = run(&[
        chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"b\""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "f", "arguments": "{\"a\""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "g", "arguments": ":2}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]);
    assert_eq!(
        calls(&ev),
        [
            ("c0".into(), "f".into(), r#"{"a":1}"#.into()),
            ("c1".into(), "g".into(), r#"{"b":2}"#.into()),
        ]
    );
    assert!(ev.contains(&LlmEvent::ToolInputDelta {
        call_id: "c1".into(),
        delta: r#"{"b":2}"#.into()
    }));
}

#[test]
fn a_stream_closed_after_its_finish_reason_is_complete_without_done() {
    let ev = run(&[
        chunk(json!({"content": "ok"}), None),
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 3}})
        ),
    ]);
    match &ev[ev.len() - 2] {
        LlmEvent::FinishStep { reason, usage, .. } => {
            assert_eq!(*reason, FinishReason::Stop);
            assert_eq!((usage.input, usage.output), (10, 3));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stream_cut_before_its_finish_closes_the_text_then_reports_truncated() {
    let ev = run(&[chunk(json!({"content": "The cap"}), None)]);
    assert_eq!(error_kind(&ev), Some(ErrorKind::Truncated));
    assert_eq!(
        ev[ev.len() - 2],
        LlmEvent::TextEnd {
            id: "text-1".into()
        }
    );
    assert!(!ev.iter().any(|e| matches!(e, LlmEvent::FinishStep { .. })));
}

#[test]
fn a_data_line_that_is_not_json_is_malformed() {
    let ev = run(&[
        chunk(json!({"content": "a"}), None),
        "data: {\"choices\": [oops\n\n".into(),
        done(),
    ]);
    assert_eq!(error_kind(&ev), Some(ErrorKind::Malformed));
    match ev.last() {
        Some(LlmEvent::Error { error }) => {
            assert!(
                error.message.contains("not valid JSON"),
                "{}",
                error.message
            );
            assert!(error.message.contains("[oops"), "{}", error.message);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn done_without_a_finish_reason_still_ends_the_step() {
    let ev = run(&[chunk(json!({"content": "a"}), None), done()]);
    assert!(ev.contains(&LlmEvent::Finish {
        reason: FinishReason::Unknown,
        usage: usage(None)
    }));
}

#[test]
fn usage_counts_cached_and_reasoning_tokens_once() {
    let u = usage(Some(&json!({
        "prompt_tokens": 100, "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 25}
    })));
    assert_eq!(
        (u.input, u.output, u.reasoning, u.cache_read, u.cache_write),
        (70, 15, 25, 30, 0)
    );
    let deepseek = usage(Some(&json!({
        "prompt_tokens": 100, "completion_tokens": 5,
        "prompt_cache_hit_tokens": 60, "prompt_cache_miss_tokens": 40
    })));
    assert_eq!((deepseek.input, deepseek.cache_read), (40, 60));
    // Nonsense never underflows.
    let odd = usage(Some(
        &json!({"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 9}}),
    ));
    assert_eq!(odd.input, 0);
}

#[test]
fn untrusted_shapes_never_panic() {
    for body in [
        "data: null\n\n",
        "data: []\n\n",
        "data: {\"choices\": 5}\n\n",
        "data: {\"choices\": [{\"delta\": {\"tool_calls\": [null, 1, {\"index\": -1}]}}]}\n\n",
        "data: {\"choices\": [{\"delta\": {\"content\": 7}, \"finish_reason\": 3}]}\n\n",
        "data: {\"error\": null, \"usage\": \"many\"}\n\n",
        "event: error\ndata: {}\n\n",
    ] {
        let ev = decode_all(ChatDecoder::new("x"), body.as_bytes());
        assert!(
            matches!(ev.last(), Some(LlmEvent::Error { .. })),
            "{body}: {ev:?}"
        );
    }
}
