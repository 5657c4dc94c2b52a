//! Conformance: every recorded provider stream in
//! `tests/conformance/streams/` is replayed by a loopback HTTP server and
//! read through the real adapter (chosen by the `protocol` of its
//! `.expect.json`); what the adapter's events assemble to must match the
//! expect file. Each stream is replayed twice: in 64-byte pieces and in
//! 5-byte pieces (which split CRLFs, UTF-8 characters and JSON tokens).
//!
//! The expect files describe the provider's stream, not warden's types, so
//! a few of our own decisions are stated here: which error kind each
//! in-band error is (`ERRORS`), and the provider fields our event stream
//! does not carry (Responses `item_id`, Anthropic's `caller`; see `strip`).

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde_json::{Map, Value, json};
use warden_core::Config;
use warden_llm::sse::SseParser;
use warden_llm::{ModelResolver, Models};
use warden_protocol::llm::ErrorKind;
use warden_protocol::{LlmEvent, LlmRequest, ProviderError};

use crate::mock_provider::{MockProvider, Reply};

/// The error each erroring stream must end in: (file, kind, status, message).
const ERRORS: &[(&str, ErrorKind, Option<u16>, &str)] = &[
    (
        "anthropic/error-overloaded-event-only",
        ErrorKind::Overloaded,
        None,
        "conf: Overloaded (overloaded_error)",
    ),
    (
        "groq/midstream-error-event",
        ErrorKind::BadRequest,
        Some(400),
        "conf: Tool call validation failed: tool call validation failed: parameters for tool get_something_by_name did not match schema: errors: [missing properties: 'name', additionalProperties 'invalid_param' not allowed] (tool_use_failed)",
    ),
    (
        "openrouter/midstream-error-with-comments",
        ErrorKind::BadRequest,
        Some(400),
        "conf: Token limit reached",
    ),
    (
        "openai-responses/error-insufficient-quota",
        ErrorKind::Auth,
        None,
        "conf: You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors. (insufficient_quota); check the provider's API key and the account's access",
    ),
    (
        "openrouter/http-429-upstream-rate-limited",
        ErrorKind::RateLimited,
        Some(429),
        "conf: Provider returned error (Google): google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations",
    ),
];

fn streams_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/streams")
}

fn cases() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(streams_dir()).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".expect.json") {
                let group = dir.file_name().unwrap().to_string_lossy();
                out.push((format!("{group}/{stem}"), f));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_recorded_stream_assembles_to_its_expected_result() {
    let cases = cases();
    assert_eq!(cases.len(), 19, "the 19 recorded streams are all here");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut failures = Vec::new();
    for (name, expect_path) in &cases {
        let expect: Value =
            serde_json::from_str(&std::fs::read_to_string(expect_path).unwrap()).unwrap();
        let body_path = expect_path
            .parent()
            .unwrap()
            .join(expect["stream"].as_str().unwrap());
        let body = std::fs::read(&body_path).unwrap();
        if let Err(e) = check_framing(&expect, &body) {
            failures.push(format!("{name}: {e}"));
        }
        for piece in [64, 5] {
            let got = runtime.block_on(replay(&expect, &body, piece));
            if let Err(e) = compare(name, &expect, &got) {
                failures.push(format!("{name} (in {piece}-byte pieces): {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// What the recorded body holds at the SSE level: its event count, comment
/// lines and (Anthropic) event names in order.
fn check_framing(expect: &Value, body: &[u8]) -> Result<(), String> {
    if expect["protocol"] == "http-error" {
        return Ok(());
    }
    let mut p = SseParser::new();
    let events = p.push(body).map_err(|e| e.to_string())?;
    let want = expect["sse_events"].as_u64().unwrap() as usize;
    if events.len() != want {
        return Err(format!("{} SSE events, expected {want}", events.len()));
    }
    if let Some(n) = expect.get("sse_comment_lines").and_then(Value::as_u64)
        && p.comments() as u64 != n
    {
        return Err(format!("{} comment lines, expected {n}", p.comments()));
    }
    if let Some(seq) = expect.get("event_sequence") {
        let names: Vec<Value> = events.iter().map(|e| json!(e.event)).collect();
        if &Value::Array(names.clone()) != seq {
            return Err(format!("event names {names:?}, expected {seq}"));
        }
    }
    Ok(())
}

/// The events of one request to a loopback server replaying `body`, or the
/// error returned before any stream.
async fn replay(
    expect: &Value,
    body: &[u8],
    piece: usize,
) -> (Vec<LlmEvent>, Option<ProviderError>, MockProvider) {
    let (api, reply) = match expect["protocol"].as_str().unwrap() {
        "openai-chat-completions" => ("openai-chat", sse(body, piece)),
        "openai-responses" => ("openai-responses", sse(body, piece)),
        "anthropic-messages" => ("anthropic", sse(body, piece)),
        "http-error" => ("openai-chat", http_message(body)),
        other => panic!("unknown protocol {other}"),
    };
    let server = MockProvider::start(vec![reply]);
    let base = match api {
        "anthropic" => server.url(),
        _ => format!("{}/v1", server.url()),
    };
    let config = Config::parse(
        &json!({"provider": {"conf": {"api": api, "base_url": base, "api_key_env": "CONF_KEY"}}})
            .to_string(),
    )
    .unwrap();
    let models = Models::from_providers_with_env(
        &config.provider,
        std::sync::Arc::new(|k| (k == "CONF_KEY").then(|| "test-key".to_string())),
    );
    let model = models
        .resolve(&Models::parse("conf/recorded").unwrap())
        .unwrap();
    let request = LlmRequest {
        model: "recorded".into(),
        system: vec!["You are a test.".into()],
        messages: vec![std::sync::Arc::new(warden_protocol::ChatMessage::User {
            content: vec![warden_protocol::llm::UserContent::Text { text: "hi".into() }],
        })]
        .into(),
        tools: vec![],
        max_output_tokens: None,
    };
    match model.provider.stream(request).await {
        Ok(stream) => (stream.collect().await, None, server),
        Err(e) => (Vec::new(), Some(e), server),
    }
}

fn sse(body: &[u8], piece: usize) -> Reply {
    Reply::Sse {
        body: body.to_vec(),
        piece,
    }
}

/// A recorded HTTP/1.1 message: status line, headers, blank line, body. The
/// framing headers are the server's business (the body is given de-chunked).
fn http_message(raw: &[u8]) -> Reply {
    let text = String::from_utf8(raw.to_vec()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| {
            !matches!(
                k.to_ascii_lowercase().as_str(),
                "transfer-encoding" | "content-length" | "connection"
            )
        })
        .collect();
    Reply::Http {
        status,
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// What the events assemble to, in the expect file's terms.
#[derive(Debug, Default)]
struct Assembled {
    text: String,
    reasoning: Option<String>,
    tool_calls: Vec<Value>,
    server_tool_calls: Vec<Value>,
    content: Vec<Value>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    error: Option<ProviderError>,
    finishes: usize,
}

fn assemble(events: &[LlmEvent], error: Option<ProviderError>) -> Assembled {
    let mut a = Assembled {
        error,
        ..Assembled::default()
    };
    // Content blocks in the order they began, found again by id.
    let mut block_of: Vec<(String, usize)> = Vec::new();
    let find = |block_of: &Vec<(String, usize)>, id: &str| {
        block_of.iter().find(|(b, _)| b == id).map(|(_, i)| *i)
    };
    for e in events {
        match e {
            LlmEvent::TextStart { id } => {
                block_of.push((id.clone(), a.content.len()));
                a.content.push(json!({"type": "text", "text": ""}));
            }
            LlmEvent::TextDelta { id, text } => {
                a.text.push_str(text);
                if let Some(i) = find(&block_of, id) {
                    let t = a.content[i]["text"].as_str().unwrap().to_string() + text;
                    a.content[i]["text"] = json!(t);
                }
            }
            LlmEvent::ReasoningStart { id } => {
                a.reasoning.get_or_insert_with(String::new);
                block_of.push((id.clone(), a.content.len()));
                a.content.push(json!({"type": "thinking", "thinking": ""}));
            }
            LlmEvent::ReasoningDelta { id, text } => {
                a.reasoning.get_or_insert_with(String::new).push_str(text);
                if let Some(i) = find(&block_of, id) {
                    let t = a.content[i]["thinking"].as_str().unwrap().to_string() + text;
                    a.content[i]["thinking"] = json!(t);
                }
            }
            LlmEvent::ReasoningEnd { id, metadata } => {
                if let (Some(i), Some(sig)) = (
                    find(&block_of, id),
                    metadata
                        .as_ref()
                        .and_then(|m| m.pointer("/anthropic/signature")),
                ) {
                    a.content[i]["signature"] = sig.clone();
                }
            }
            LlmEvent::ToolInputStart { call_id, .. } => {
                block_of.push((call_id.clone(), a.content.len()));
                a.content.push(Value::Null);
            }
            LlmEvent::ToolCall {
                call_id,
                name,
                input,
                provider_executed,
            } => {
                let arguments: Value = serde_json::from_str(input)
                    .unwrap_or_else(|e| json!(format!("unparsable ({e}): {input}")));
                let block = json!({
                    "type": if *provider_executed { "server_tool_use" } else { "tool_use" },
                    "id": call_id, "name": name, "input": arguments,
                });
                match find(&block_of, call_id) {
                    Some(i) => a.content[i] = block,
                    None => a.content.push(block),
                }
                let call = json!({"id": call_id, "name": name, "arguments": arguments, "arguments_raw": input});
                if *provider_executed {
                    a.server_tool_calls.push(call);
                } else {
                    a.tool_calls.push(call);
                }
            }
            LlmEvent::ToolResult {
                call_id,
                output,
                metadata,
                ..
            } => a.content.push(json!({
                "type": metadata.pointer("/anthropic/type").cloned().unwrap_or(Value::Null),
                "tool_use_id": call_id,
                "content": serde_json::from_str::<Value>(output).unwrap_or(json!(output)),
            })),
            LlmEvent::FinishStep {
                raw_reason, usage, ..
            } => {
                a.finish_reason = raw_reason.clone();
                a.usage = usage.raw.clone();
            }
            LlmEvent::Finish { .. } => a.finishes += 1,
            LlmEvent::Error { error } => a.error = Some(error.clone()),
            _ => {}
        }
    }
    a
}

/// Remove the keys our events do not carry from an expected object.
fn strip(v: &Value, keys: &[&str]) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(|i| strip(i, keys)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

fn same(field: &str, want: &Value, got: &Value) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("{field}:\n  expected {}\n  got      {}", want, got))
    }
}

fn compare(
    name: &str,
    expect: &Value,
    (events, error, server): &(Vec<LlmEvent>, Option<ProviderError>, MockProvider),
) -> Result<(), String> {
    let a = assemble(events, error.clone());
    let protocol = expect["protocol"].as_str().unwrap();

    // The request went where this protocol goes, with the key.
    let received = server.received();
    let path = match protocol {
        "anthropic-messages" => "/v1/messages",
        "openai-responses" => "/v1/responses",
        _ => "/v1/chat/completions",
    };
    same("request path", &json!(path), &json!(received[0].path))?;
    let auth = match protocol {
        "anthropic-messages" => received[0].header("x-api-key"),
        _ => received[0].header("authorization"),
    };
    same(
        "key header",
        &json!(if protocol == "anthropic-messages" {
            "test-key"
        } else {
            "Bearer test-key"
        }),
        &json!(auth),
    )?;

    // The error, as our own decision table says, and in the provider's words.
    let want_error = ERRORS.iter().find(|(f, ..)| *f == name);
    match (want_error, &a.error) {
        (None, None) => {}
        (Some((_, kind, status, message)), Some(e)) => {
            same(
                "error",
                &json!({"kind": kind, "status": status, "message": message, "retry_after_ms": null}),
                &json!({"kind": e.kind, "status": e.status, "message": e.message, "retry_after_ms": e.retry_after_ms}),
            )?;
            let theirs = [
                "/error/message",
                "/error/raw",
                "/error/error_event/error/message",
            ]
            .iter()
            .find_map(|p| expect.pointer(p).and_then(Value::as_str))
            .unwrap();
            if !e.message.contains(theirs) {
                return Err(format!("error message {:?} lacks {theirs:?}", e.message));
            }
        }
        (want, got) => return Err(format!("error: expected {want:?}, got {got:?}")),
    }
    if expect["error"].is_null() != a.error.is_none() {
        return Err("the expect file and the error table disagree".into());
    }
    if protocol == "http-error" {
        return same(
            "retry_after",
            &expect["retry_after"],
            &json!(a.error.as_ref().and_then(|e| e.retry_after_ms)),
        );
    }

    same("text", &expect["text"], &json!(a.text))?;
    same("reasoning", &expect["reasoning"], &json!(a.reasoning))?;
    same(
        "finish_reason",
        &expect["finish_reason"],
        &json!(a.finish_reason),
    )?;
    same("usage", &expect["usage"], &json!(a.usage))?;

    // Tool calls: the Responses item id is the provider's, not the one to answer with.
    let mut want_calls = strip(&expect["tool_calls"], &["item_id"]);
    let mut got_calls = json!(a.tool_calls);
    if protocol == "anthropic-messages" {
        // Anthropic streams no raw argument text worth comparing: only the parsed input is recorded.
        got_calls = strip(&got_calls, &["arguments_raw"]);
    } else if protocol == "openai-chat-completions" {
        // The decoder hands calls over sorted by index, so the index is their position.
        for (i, c) in got_calls.as_array_mut().unwrap().iter_mut().enumerate() {
            c["index"] = json!(i);
        }
    }
    if want_calls.is_null() {
        want_calls = json!([]);
    }
    same("tool_calls", &want_calls, &got_calls)?;
    if let Some(want) = expect.get("server_tool_calls") {
        same(
            "server_tool_calls",
            want,
            &strip(&json!(a.server_tool_calls), &["arguments_raw"]),
        )?;
    }
    if protocol == "anthropic-messages" {
        // `caller` (who invoked a tool) is not part of the event stream.
        same(
            "content",
            &strip(&expect["content"], &["caller"]),
            &json!(a.content),
        )?;
    }
    // A stream that ended normally ended once; one that failed did not "finish".
    let finished = if a.error.is_none() { 1 } else { 0 };
    same("finish events", &json!(finished), &json!(a.finishes))?;
    Ok(())
}
