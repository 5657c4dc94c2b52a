//! The Responses request: `POST {base_url}/responses`.
//!
//! The system prompt goes in `instructions`; the conversation is a list of
//! input items: messages, `function_call` items and their
//! `function_call_output`s, paired by `call_id`. `store` is off, so nothing
//! is kept at the provider between requests: every request carries the
//! whole conversation, as the ledger says it.

use serde_json::{Map, Value, json};
use warden_protocol::LlmRequest;
use warden_protocol::llm::{AssistantContent, ChatMessage, UserContent};

use super::chat::merge_options;

/// The request body.
pub fn body(req: &LlmRequest, options: Option<&Map<String, Value>>) -> Value {
    let mut input = Vec::new();
    for m in &req.messages {
        match &**m {
            ChatMessage::User { content } => {
                let text: Vec<&str> = content
                    .iter()
                    .map(|c| match c {
                        UserContent::Text { text } => text.as_str(),
                    })
                    .collect();
                input.push(json!({"role": "user", "content": text.join("\n\n")}));
            }
            ChatMessage::Assistant { content } => {
                for c in content {
                    match c {
                        AssistantContent::Text { text } if !text.is_empty() => {
                            input.push(json!({"role": "assistant", "content": text}));
                        }
                        AssistantContent::ToolCall {
                            call_id,
                            name,
                            input: args,
                        } => input.push(json!({
                            "type": "function_call",
                            "call_id": call_id,
                            "name": name,
                            "arguments": args.to_string(),
                        })),
                        AssistantContent::Reasoning { metadata, .. } => {
                            // Only encrypted reasoning from OpenAI itself can go back.
                            if let Some(enc) = metadata
                                .as_ref()
                                .and_then(|m| m.pointer("/openai/encrypted_content"))
                            {
                                input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": enc}));
                            }
                        }
                        AssistantContent::Text { .. } => {}
                    }
                }
            }
            ChatMessage::Tool { content } => {
                for r in content {
                    input.push(json!({
                        "type": "function_call_output",
                        "call_id": r.call_id,
                        "output": r.output,
                    }));
                }
            }
        }
    }
    let mut body = json!({
        "model": req.model,
        "input": input,
        "stream": true,
        "store": false,
    });
    let system = req.system_parts();
    if !system.is_empty() {
        body["instructions"] = json!(system.join("\n\n"));
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": false,
                })
            })
            .collect();
    }
    if let Some(max) = req.max_output_tokens {
        body["max_output_tokens"] = json!(max);
    }
    merge_options(&mut body, options);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::ToolSpec;
    use warden_protocol::llm::ToolResultContent;

    #[test]
    fn the_whole_body() {
        let req = LlmRequest {
            model: "gpt-5".into(),
            system: vec!["sys".into()],
            messages: vec![
                ChatMessage::User {
                    content: vec![UserContent::Text { text: "hi".into() }],
                },
                ChatMessage::Assistant {
                    content: vec![
                        AssistantContent::Reasoning {
                            text: "plain reasoning is not sent".into(),
                            metadata: None,
                        },
                        AssistantContent::Reasoning {
                            text: String::new(),
                            metadata: Some(
                                json!({"openai": {"item_id": "rs_1", "encrypted_content": "ENC"}}),
                            ),
                        },
                        AssistantContent::Text { text: "ok".into() },
                        AssistantContent::ToolCall {
                            call_id: "call_1".into(),
                            name: "read".into(),
                            input: json!({"filePath": "a"}),
                        },
                    ],
                },
                ChatMessage::Tool {
                    content: vec![ToolResultContent {
                        call_id: "call_1".into(),
                        name: "read".into(),
                        output: "A".into(),
                        is_error: false,
                    }],
                },
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: Some(100),
        };
        assert_eq!(
            body(&req, None),
            json!({
                "model": "gpt-5",
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "reasoning", "summary": [], "encrypted_content": "ENC"},
                    {"role": "assistant", "content": "ok"},
                    {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"filePath\":\"a\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "A"},
                ],
                "stream": true,
                "store": false,
                "instructions": "sys",
                "tools": [{"type": "function", "name": "read", "description": "d", "parameters": {"type": "object"}, "strict": false}],
                "max_output_tokens": 100,
            })
        );
    }
}
