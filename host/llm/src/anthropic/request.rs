//! The Messages request: `POST {base_url}/v1/messages`.
//!
//! Anthropic wants `max_tokens` on every request, the system prompt apart
//! from the messages, tool results as `tool_result` blocks in a user
//! message, and thinking blocks sent back with their signature (a thinking
//! block without one is refused, so reasoning from other providers is left
//! out). Consecutive messages of one role are merged into one.

use serde_json::{Map, Value, json};
use warden_protocol::LlmRequest;
use warden_protocol::llm::{AssistantContent, ChatMessage, UserContent};

use crate::openai::chat::merge_options;

/// Used when neither the request nor the model's defaults give an output
/// limit: every Claude model accepts it.
pub const FALLBACK_MAX_TOKENS: u32 = 4096;

/// The request body. `default_max_tokens` applies when the request names no limit.
pub fn body(
    req: &LlmRequest,
    default_max_tokens: Option<u32>,
    options: Option<&Map<String, Value>>,
) -> Value {
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match &**m {
            ChatMessage::User { content } => (
                "user",
                content
                    .iter()
                    .filter_map(|c| match c {
                        UserContent::Text { text } if !text.is_empty() => {
                            Some(json!({"type": "text", "text": text}))
                        }
                        UserContent::Text { .. } => None,
                    })
                    .collect(),
            ),
            ChatMessage::Assistant { content } => ("assistant", assistant(content)),
            ChatMessage::Tool { content } => (
                "user",
                content
                    .iter()
                    .map(|r| {
                        let mut b = json!({"type": "tool_result", "tool_use_id": r.call_id});
                        // An empty text block is refused; a result without content is not.
                        if !r.output.is_empty() {
                            b["content"] = json!(r.output);
                        }
                        if r.is_error {
                            b["is_error"] = json!(true);
                        }
                        b
                    })
                    .collect(),
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, existing)) if last == role => existing.extend(blocks),
            _ => messages.push((role.to_string(), blocks)),
        }
    }
    // A last assistant message is a prefill, which may not end in whitespace.
    if let Some((role, blocks)) = messages.last_mut()
        && role == "assistant"
        && let Some(text) = blocks
            .last_mut()
            .and_then(|b| b.get_mut("text"))
            .filter(|t| t.is_string())
    {
        let trimmed = text.as_str().unwrap_or("").trim_end().to_string();
        *text = Value::String(trimmed);
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let max_tokens = req
        .max_output_tokens
        .or(default_max_tokens)
        .unwrap_or(FALLBACK_MAX_TOKENS);
    let mut body = json!({
        "model": req.model,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": true,
    });
    let system = req.system_parts();
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    merge_options(&mut body, options);
    body
}

fn assistant(content: &[AssistantContent]) -> Vec<Value> {
    let mut blocks = Vec::new();
    for c in content {
        match c {
            AssistantContent::Reasoning { text, metadata } => {
                let meta = metadata.as_ref().and_then(|m| m.get("anthropic"));
                if let Some(sig) = meta.and_then(|m| m.get("signature")) {
                    blocks.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
                } else if let Some(data) = meta.and_then(|m| m.get("redacted_data")) {
                    blocks.push(json!({"type": "redacted_thinking", "data": data}));
                }
            }
            AssistantContent::Text { text } if !text.is_empty() => {
                blocks.push(json!({"type": "text", "text": text}));
            }
            AssistantContent::Text { .. } => {}
            AssistantContent::ToolCall {
                call_id,
                name,
                input,
            } => blocks
                .push(json!({"type": "tool_use", "id": call_id, "name": name, "input": input})),
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::ToolSpec;
    use warden_protocol::llm::ToolResultContent;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::User {
            content: vec![UserContent::Text { text: text.into() }],
        }
    }

    #[test]
    fn the_whole_body_with_thinking_sent_back_and_results_merged() {
        let req = LlmRequest {
            model: "claude-sonnet-4-5".into(),
            system: vec!["sys".into(), "env".into()],
            messages: vec![
                user("read a"),
                ChatMessage::Assistant {
                    content: vec![
                        AssistantContent::Reasoning {
                            text: "think".into(),
                            metadata: Some(json!({"anthropic": {"signature": "SIG"}})),
                        },
                        AssistantContent::Reasoning {
                            text: "from another provider".into(),
                            metadata: None,
                        },
                        AssistantContent::Text { text: "ok".into() },
                        AssistantContent::ToolCall {
                            call_id: "toolu_1".into(),
                            name: "read".into(),
                            input: json!({"filePath": "a"}),
                        },
                    ],
                },
                ChatMessage::Tool {
                    content: vec![ToolResultContent {
                        call_id: "toolu_1".into(),
                        name: "read".into(),
                        output: "Error: no such file".into(),
                        is_error: true,
                    }],
                },
                user("try b"),
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: None,
        };
        assert_eq!(
            body(&req, Some(32000), None),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 32000,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "read a"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "think", "signature": "SIG"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"filePath": "a"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Error: no such file", "is_error": true},
                        {"type": "text", "text": "try b"},
                    ]},
                ],
                "stream": true,
                "system": "sys\n\nenv",
                "tools": [{"name": "read", "description": "d", "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn a_trailing_assistant_prefill_loses_trailing_whitespace_and_max_tokens_falls_back() {
        let req = LlmRequest {
            model: "m".into(),
            system: vec![],
            messages: vec![
                user("hi"),
                ChatMessage::Assistant {
                    content: vec![AssistantContent::Text {
                        text: "Answer now.\n".into(),
                    }],
                },
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            tools: vec![],
            max_output_tokens: None,
        };
        let b = body(&req, None, None);
        assert_eq!(b["messages"][1]["content"][0]["text"], "Answer now.");
        assert_eq!(b["max_tokens"], FALLBACK_MAX_TOKENS);
        assert!(b.get("system").is_none() && b.get("tools").is_none());
    }
}
