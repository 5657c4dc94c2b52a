//! The Chat Completions request: `POST {base_url}/chat/completions`.
//!
//! The system prompt is one `system` message (several confuse some local
//! chat templates); each assistant message carries its text and its
//! `tool_calls`; each result is a `tool` message naming its call's id.
//! Reasoning is not sent back: OpenAI keeps none, and DeepSeek refuses
//! `reasoning_content` in input messages.

use serde_json::{Map, Value, json};
use warden_protocol::llm::{AssistantContent, ChatMessage, UserContent};
use warden_protocol::{LlmRequest, ToolSpec};

/// How this endpoint wants the output limit named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_completion_tokens`: OpenAI's own API (its reasoning models refuse `max_tokens`).
    MaxCompletionTokens,
    /// `max_tokens`: what compatible servers understand.
    MaxTokens,
}

/// The request body.
pub fn body(
    req: &LlmRequest,
    field: MaxTokensField,
    options: Option<&Map<String, Value>>,
) -> Value {
    let mut messages = Vec::new();
    let system: Vec<&str> = req
        .system
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system.join("\n\n")}));
    }
    for m in &req.messages {
        match m {
            ChatMessage::User { content } => {
                let text: Vec<&str> = content
                    .iter()
                    .map(|c| match c {
                        UserContent::Text { text } => text.as_str(),
                    })
                    .collect();
                messages.push(json!({"role": "user", "content": text.join("\n\n")}));
            }
            ChatMessage::Assistant { content } => {
                if let Some(m) = assistant(content) {
                    messages.push(m);
                }
            }
            ChatMessage::Tool { content } => {
                for r in content {
                    messages.push(json!({
                        "role": "tool",
                        "tool_call_id": r.call_id,
                        "content": r.output,
                    }));
                }
            }
        }
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(req.tools.iter().map(tool).collect());
    }
    if let Some(max) = req.max_output_tokens {
        let key = match field {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        };
        body[key] = json!(max);
    }
    merge_options(&mut body, options);
    body
}

fn assistant(content: &[AssistantContent]) -> Option<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for c in content {
        match c {
            AssistantContent::Text { text: t } => text.push_str(t),
            AssistantContent::Reasoning { .. } => {}
            AssistantContent::ToolCall {
                call_id,
                name,
                input,
            } => calls.push(json!({
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
        }
    }
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    Some(m)
}

fn tool(t: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
        },
    })
}

/// The model's configured `options` go into the body as given (temperature,
/// `reasoning_effort`, a local server's own knobs), over the defaults.
pub fn merge_options(body: &mut Value, options: Option<&Map<String, Value>>) {
    if let (Some(obj), Some(options)) = (body.as_object_mut(), options) {
        for (k, v) in options {
            obj.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::llm::ToolResultContent;

    fn request() -> LlmRequest {
        LlmRequest {
            session_id: "s".into(),
            prior_turns: 0,
            model: "gpt-4o".into(),
            system: vec!["be brief".into(), "<env>x</env>".into()],
            messages: vec![
                ChatMessage::User {
                    content: vec![UserContent::Text {
                        text: "read a.txt".into(),
                    }],
                },
                ChatMessage::Assistant {
                    content: vec![
                        AssistantContent::Reasoning {
                            text: "hmm".into(),
                            metadata: None,
                        },
                        AssistantContent::ToolCall {
                            call_id: "call_1".into(),
                            name: "read".into(),
                            input: json!({"filePath": "a.txt"}),
                        },
                    ],
                },
                ChatMessage::Tool {
                    content: vec![ToolResultContent {
                        call_id: "call_1".into(),
                        name: "read".into(),
                        output: "1\ta".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: Some(1000),
        }
    }

    #[test]
    fn the_whole_body() {
        let mut options = Map::new();
        options.insert("temperature".into(), json!(0));
        let body = body(
            &request(),
            MaxTokensField::MaxCompletionTokens,
            Some(&options),
        );
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief\n\n<env>x</env>"},
                    {"role": "user", "content": "read a.txt"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"filePath\":\"a.txt\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "1\ta"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {"type": "object"}}}],
                "max_completion_tokens": 1000,
                "temperature": 0,
            })
        );
    }

    #[test]
    fn no_tools_no_limit_and_reasoning_only_messages_are_left_out() {
        let mut req = request();
        req.tools.clear();
        req.max_output_tokens = None;
        req.messages = vec![ChatMessage::Assistant {
            content: vec![AssistantContent::Reasoning {
                text: "only thinking".into(),
                metadata: None,
            }],
        }];
        let body = body(&req, MaxTokensField::MaxTokens, None);
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
        assert!(body.get("tools").is_none());
        assert!(body.get("max_tokens").is_none());
    }
}
