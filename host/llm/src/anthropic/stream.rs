//! Anthropic Messages stream → [`LlmEvent`]s.
//!
//! `message_start` opens the step and carries the input usage; content
//! blocks are keyed by `index`: `text`, `thinking` (its `signature_delta`
//! is kept in the reasoning's metadata, so it can be sent back),
//! `redacted_thinking`, `tool_use` (arguments as `input_json_delta`), and the
//! provider-executed `server_tool_use` with its `*_tool_result` block.
//! `message_delta` carries the stop reason and cumulative usage;
//! `message_stop` ends the step. `ping` is ignored; `error` ends the stream.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use warden_protocol::{FinishReason, LlmEvent, ProviderError, Usage};

use crate::failure;
use crate::openai::chat_stream::arguments_or_empty_object;
use crate::sse::SseEvent;
use crate::stream::{Decoder, Flow, cut_short, json};

#[derive(Debug)]
enum Block {
    Text {
        id: String,
    },
    Thinking {
        id: String,
        signature: String,
    },
    Redacted {
        id: String,
        data: Value,
    },
    ToolUse {
        call_id: String,
        name: String,
        json: String,
        /// What `content_block_start` gave as input, used when no deltas follow.
        initial: Value,
        provider_executed: bool,
    },
}

/// The decoder for one Messages stream.
#[derive(Debug)]
pub struct AnthropicDecoder {
    provider: String,
    started: bool,
    blocks: BTreeMap<u64, Block>,
    usage: Map<String, Value>,
    stop_reason: Option<String>,
}

impl AnthropicDecoder {
    pub fn new(provider: &str) -> Self {
        AnthropicDecoder {
            provider: provider.to_string(),
            started: false,
            blocks: BTreeMap::new(),
            usage: Map::new(),
            stop_reason: None,
        }
    }

    fn start(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.started {
            self.started = true;
            out.push(LlmEvent::Start);
            out.push(LlmEvent::StartStep);
        }
    }

    /// Later usage objects override earlier fields: `message_delta` counts are cumulative.
    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(Value::Object(u)) = usage {
            for (k, v) in u {
                self.usage.insert(k.clone(), v.clone());
            }
        }
    }

    fn block_start(&mut self, index: u64, block: &Value, out: &mut Vec<LlmEvent>) {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let text_of = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {
                let id = format!("text-{index}");
                out.push(LlmEvent::TextStart { id: id.clone() });
                if !text_of("text").is_empty() {
                    out.push(LlmEvent::TextDelta {
                        id: id.clone(),
                        text: text_of("text").to_string(),
                    });
                }
                self.blocks.insert(index, Block::Text { id });
            }
            "thinking" => {
                let id = format!("reasoning-{index}");
                out.push(LlmEvent::ReasoningStart { id: id.clone() });
                if !text_of("thinking").is_empty() {
                    out.push(LlmEvent::ReasoningDelta {
                        id: id.clone(),
                        text: text_of("thinking").to_string(),
                    });
                }
                let signature = text_of("signature").to_string();
                self.blocks.insert(index, Block::Thinking { id, signature });
            }
            "redacted_thinking" => {
                let id = format!("reasoning-{index}");
                out.push(LlmEvent::ReasoningStart { id: id.clone() });
                let data = block.get("data").cloned().unwrap_or(Value::Null);
                self.blocks.insert(index, Block::Redacted { id, data });
            }
            "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                let call_id = text_of("id").to_string();
                let name = text_of("name").to_string();
                out.push(LlmEvent::ToolInputStart {
                    call_id: call_id.clone(),
                    name: name.clone(),
                });
                self.blocks.insert(
                    index,
                    Block::ToolUse {
                        call_id,
                        name,
                        json: String::new(),
                        initial: block.get("input").cloned().unwrap_or(Value::Null),
                        provider_executed: kind != "tool_use",
                    },
                );
            }
            // A provider-executed tool's result arrives whole in its start block.
            k if k.ends_with("_tool_result") => {
                let call_id = text_of("tool_use_id").to_string();
                let content = block.get("content").cloned().unwrap_or(Value::Null);
                // Failures come as `{"type": "..._tool_result_error", "error_code": "..."}`.
                if let Some(code) = content.get("error_code").and_then(Value::as_str) {
                    out.push(LlmEvent::ToolError {
                        call_id,
                        error: format!("{k}: {code}"),
                    });
                } else {
                    out.push(LlmEvent::ToolResult {
                        call_id,
                        output: match &content {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        },
                        title: String::new(),
                        metadata: json!({"anthropic": {"type": k}}),
                    });
                }
            }
            _ => {}
        }
    }

    fn block_delta(&mut self, index: u64, delta: &Value, out: &mut Vec<LlmEvent>) {
        let text_of = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        match (block, text_of("type")) {
            (Block::Text { id }, "text_delta") if !text_of("text").is_empty() => {
                out.push(LlmEvent::TextDelta {
                    id: id.clone(),
                    text: text_of("text").to_string(),
                });
            }
            (Block::Thinking { id, .. }, "thinking_delta") if !text_of("thinking").is_empty() => {
                out.push(LlmEvent::ReasoningDelta {
                    id: id.clone(),
                    text: text_of("thinking").to_string(),
                });
            }
            (Block::Thinking { signature, .. }, "signature_delta") => {
                signature.push_str(text_of("signature"));
            }
            (Block::ToolUse { call_id, json, .. }, "input_json_delta") => {
                let part = text_of("partial_json");
                if !part.is_empty() {
                    json.push_str(part);
                    out.push(LlmEvent::ToolInputDelta {
                        call_id: call_id.clone(),
                        delta: part.to_string(),
                    });
                }
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<LlmEvent>) {
        let Some(block) = self.blocks.remove(&index) else {
            return;
        };
        match block {
            Block::Text { id } => out.push(LlmEvent::TextEnd { id }),
            Block::Thinking { id, signature } => out.push(LlmEvent::ReasoningEnd {
                id,
                metadata: (!signature.is_empty())
                    .then(|| json!({"anthropic": {"signature": signature}})),
            }),
            Block::Redacted { id, data } => out.push(LlmEvent::ReasoningEnd {
                id,
                metadata: Some(json!({"anthropic": {"redacted_data": data}})),
            }),
            Block::ToolUse {
                call_id,
                name,
                json,
                initial,
                provider_executed,
            } => {
                let input = match (&initial, json.trim().is_empty()) {
                    (Value::Object(o), true) if !o.is_empty() => initial.to_string(),
                    _ => arguments_or_empty_object(&json),
                };
                out.push(LlmEvent::ToolInputEnd {
                    call_id: call_id.clone(),
                });
                out.push(LlmEvent::ToolCall {
                    call_id,
                    name,
                    input,
                    provider_executed,
                });
            }
        }
    }

    /// Close open text and reasoning (tool calls left open are not handed over).
    fn close_open(&mut self, out: &mut Vec<LlmEvent>) {
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        for index in open {
            match self.blocks.get(&index) {
                Some(Block::Text { .. } | Block::Thinking { .. } | Block::Redacted { .. }) => {
                    self.block_stop(index, out)
                }
                _ => {
                    self.blocks.remove(&index);
                }
            }
        }
    }

    fn message_stop(&mut self, out: &mut Vec<LlmEvent>) {
        self.start(out);
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        for index in open {
            self.block_stop(index, out);
        }
        let reason = finish_reason(self.stop_reason.as_deref());
        let usage = usage(&self.usage);
        out.push(LlmEvent::FinishStep {
            reason,
            raw_reason: self.stop_reason.clone(),
            usage: usage.clone(),
        });
        out.push(LlmEvent::Finish { reason, usage });
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, event: SseEvent, out: &mut Vec<LlmEvent>) -> Flow {
        let ev = match json(&self.provider, &event) {
            Ok(v) => v,
            Err(e) => {
                self.fail(e, out);
                return Flow::Done;
            }
        };
        let kind = ev
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = ev.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                self.start(out);
                self.merge_usage(ev.pointer("/message/usage"));
            }
            "content_block_start" => {
                self.start(out);
                if let Some(b) = ev.get("content_block") {
                    self.block_start(index, b, out);
                }
            }
            "content_block_delta" => {
                if let Some(d) = ev.get("delta") {
                    self.block_delta(index, d, out);
                }
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(r) = ev.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(ev.get("usage"));
            }
            "message_stop" => {
                self.message_stop(out);
                return Flow::Done;
            }
            "error" => {
                let e = failure::in_band(&self.provider, &ev);
                self.fail(e, out);
                return Flow::Done;
            }
            _ => {} // ping, and events this version does not know
        }
        Flow::More
    }

    fn end(&mut self, out: &mut Vec<LlmEvent>) {
        let e = cut_short(&self.provider, "no message_stop");
        self.fail(e, out);
    }

    fn fail(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>) {
        self.close_open(out);
        out.push(LlmEvent::Error { error });
    }
}

fn finish_reason(raw: Option<&str>) -> FinishReason {
    match raw {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        // `pause_turn` (a long server tool) and anything newer.
        Some(_) => FinishReason::Other,
        None => FinishReason::Unknown,
    }
}

/// Anthropic usage: `input_tokens` already leaves out the cached tokens, and
/// thinking is counted in `output_tokens`.
pub fn usage(raw: &Map<String, Value>) -> Usage {
    let n = |k: &str| raw.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        reasoning: 0,
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        raw: (!raw.is_empty()).then(|| Value::Object(raw.clone())),
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
