//! OpenAI Responses stream → [`LlmEvent`]s. Events are typed by their JSON
//! `type` (OpenAI also sends `event:` lines; LM Studio may not), and output
//! items are keyed by item id:
//!
//! - `message` items stream `response.output_text.delta`;
//! - `reasoning` items stream `response.reasoning_text.delta` (open-weight
//!   models, LM Studio) or `response.reasoning_summary_text.delta` (OpenAI);
//! - `function_call` items stream `response.function_call_arguments.delta`,
//!   or (LM Studio) only `.done` with the whole arguments. The id to answer
//!   with is the item's `call_id`, not its `id`;
//! - the step ends with `response.completed`, `response.incomplete` or
//!   `response.failed` (after an `error` event), which carry the usage.

use std::collections::HashMap;

use serde_json::{Value, json};
use warden_protocol::{FinishReason, LlmEvent, ProviderError, Usage};

use super::chat_stream::arguments_or_empty_object;
use crate::failure;
use crate::sse::SseEvent;
use crate::stream::{Decoder, Flow, cut_short, json};

#[derive(Debug)]
enum Item {
    Message {
        open: bool,
    },
    Reasoning {
        open: bool,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// The decoder for one Responses stream.
#[derive(Debug)]
pub struct ResponsesDecoder {
    provider: String,
    started: bool,
    items: HashMap<String, Item>,
    has_calls: bool,
    /// An `error` event: reported when the response ends (it is followed by `response.failed`).
    error: Option<ProviderError>,
}

impl ResponsesDecoder {
    pub fn new(provider: &str) -> Self {
        ResponsesDecoder {
            provider: provider.to_string(),
            started: false,
            items: HashMap::new(),
            has_calls: false,
            error: None,
        }
    }

    fn start(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.started {
            self.started = true;
            out.push(LlmEvent::Start);
            out.push(LlmEvent::StartStep);
        }
    }

    /// Close every open text and reasoning part.
    fn close_all(&mut self, out: &mut Vec<LlmEvent>) {
        let mut ids: Vec<&String> = self.items.keys().collect();
        ids.sort();
        let ids: Vec<String> = ids.into_iter().cloned().collect();
        for id in ids {
            self.close(&id, None, out);
        }
    }

    fn close(&mut self, id: &str, metadata: Option<Value>, out: &mut Vec<LlmEvent>) {
        match self.items.get_mut(id) {
            Some(Item::Message { open }) if *open => {
                *open = false;
                out.push(LlmEvent::TextEnd { id: id.to_string() });
            }
            Some(Item::Reasoning { open }) if *open => {
                *open = false;
                out.push(LlmEvent::ReasoningEnd {
                    id: id.to_string(),
                    metadata,
                });
            }
            _ => {}
        }
    }

    fn text_delta(&mut self, id: &str, delta: &str, out: &mut Vec<LlmEvent>) {
        let item = self
            .items
            .entry(id.to_string())
            .or_insert(Item::Message { open: false });
        if let Item::Message { open } = item
            && !*open
        {
            *open = true;
            out.push(LlmEvent::TextStart { id: id.to_string() });
        }
        out.push(LlmEvent::TextDelta {
            id: id.to_string(),
            text: delta.to_string(),
        });
    }

    fn reasoning_delta(&mut self, id: &str, delta: &str, out: &mut Vec<LlmEvent>) {
        let item = self
            .items
            .entry(id.to_string())
            .or_insert(Item::Reasoning { open: false });
        if let Item::Reasoning { open } = item
            && !*open
        {
            *open = true;
            out.push(LlmEvent::ReasoningStart { id: id.to_string() });
        }
        out.push(LlmEvent::ReasoningDelta {
            id: id.to_string(),
            text: delta.to_string(),
        });
    }

    fn item_added(&mut self, item: &Value, out: &mut Vec<LlmEvent>) {
        let id = str_of(item, "id");
        match str_of(item, "type") {
            "function_call" => {
                let call_id = str_of(item, "call_id").to_string();
                let name = str_of(item, "name").to_string();
                out.push(LlmEvent::ToolInputStart {
                    call_id: call_id.clone(),
                    name: name.clone(),
                });
                self.has_calls = true;
                self.items.insert(
                    id.to_string(),
                    Item::Call {
                        call_id,
                        name,
                        arguments: str_of(item, "arguments").to_string(),
                    },
                );
            }
            "reasoning" => {
                self.items
                    .insert(id.to_string(), Item::Reasoning { open: true });
                out.push(LlmEvent::ReasoningStart { id: id.to_string() });
            }
            "message" => {
                self.items
                    .insert(id.to_string(), Item::Message { open: false });
            }
            _ => {}
        }
    }

    fn item_done(&mut self, item: &Value, out: &mut Vec<LlmEvent>) {
        let id = str_of(item, "id").to_string();
        match str_of(item, "type") {
            "function_call" => {
                let done_args = item.get("arguments").and_then(Value::as_str);
                let (call_id, name, arguments) = match self.items.remove(&id) {
                    Some(Item::Call {
                        call_id,
                        name,
                        arguments,
                    }) => (
                        call_id,
                        name,
                        done_args.map(str::to_string).unwrap_or(arguments),
                    ),
                    _ => {
                        // Never announced: announce it now.
                        let call_id = str_of(item, "call_id").to_string();
                        let name = str_of(item, "name").to_string();
                        out.push(LlmEvent::ToolInputStart {
                            call_id: call_id.clone(),
                            name: name.clone(),
                        });
                        self.has_calls = true;
                        (call_id, name, done_args.unwrap_or("").to_string())
                    }
                };
                out.push(LlmEvent::ToolInputEnd {
                    call_id: call_id.clone(),
                });
                out.push(LlmEvent::ToolCall {
                    call_id,
                    name,
                    input: arguments_or_empty_object(&arguments),
                    provider_executed: false,
                });
            }
            "reasoning" => {
                // With `store: false`, encrypted reasoning is what lets it be sent back.
                let metadata = item
                    .get("encrypted_content")
                    .filter(|v| v.is_string())
                    .map(|enc| json!({"openai": {"item_id": id, "encrypted_content": enc}}));
                self.close(&id, metadata, out);
            }
            _ => self.close(&id, None, out),
        }
    }

    fn response_end(&mut self, response: Option<&Value>, out: &mut Vec<LlmEvent>) {
        self.start(out);
        self.close_all(out);
        let status = response
            .and_then(|r| r.get("status"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let reason = match status.as_deref() {
            Some("completed") if self.has_calls => FinishReason::ToolCalls,
            Some("completed") => FinishReason::Stop,
            Some("incomplete") => match response
                .and_then(|r| r.pointer("/incomplete_details/reason"))
                .and_then(Value::as_str)
            {
                Some("max_output_tokens") => FinishReason::Length,
                Some("content_filter") => FinishReason::ContentFilter,
                _ => FinishReason::Other,
            },
            Some("failed" | "cancelled") => FinishReason::Error,
            _ => FinishReason::Unknown,
        };
        let usage = usage(
            response
                .and_then(|r| r.get("usage"))
                .filter(|u| u.is_object()),
        );
        out.push(LlmEvent::FinishStep {
            reason,
            raw_reason: status,
            usage: usage.clone(),
        });
        if reason == FinishReason::Error {
            let error = self.error.take().unwrap_or_else(|| {
                match response
                    .and_then(|r| r.get("error"))
                    .filter(|e| !e.is_null())
                {
                    Some(e) => failure::in_band(&self.provider, &json!({"error": e})),
                    None => failure::in_band(
                        &self.provider,
                        &json!({"error": {"message": "the response failed without saying why"}}),
                    ),
                }
            });
            out.push(LlmEvent::Error { error });
        } else {
            out.push(LlmEvent::Finish { reason, usage });
        }
    }
}

impl Decoder for ResponsesDecoder {
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
        let item_id = str_of(&ev, "item_id").to_string();
        let delta = str_of(&ev, "delta");
        match kind {
            "response.created" | "response.in_progress" => self.start(out),
            "response.output_item.added" => {
                self.start(out);
                if let Some(item) = ev.get("item") {
                    self.item_added(item, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" if !delta.is_empty() => {
                self.start(out);
                self.text_delta(&item_id, delta, out);
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta"
                if !delta.is_empty() =>
            {
                self.start(out);
                self.reasoning_delta(&item_id, delta, out);
            }
            "response.function_call_arguments.delta" if !delta.is_empty() => {
                if let Some(Item::Call {
                    call_id, arguments, ..
                }) = self.items.get_mut(&item_id)
                {
                    arguments.push_str(delta);
                    out.push(LlmEvent::ToolInputDelta {
                        call_id: call_id.clone(),
                        delta: delta.to_string(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(Item::Call { arguments, .. }) = self.items.get_mut(&item_id)
                    && let Some(done) = ev.get("arguments").and_then(Value::as_str)
                {
                    *arguments = done.to_string();
                }
            }
            "response.output_item.done" => {
                if let Some(item) = ev.get("item") {
                    self.item_done(item, out);
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.response_end(ev.get("response"), out);
                return Flow::Done;
            }
            "error" => self.error = Some(failure::in_band(&self.provider, &ev)),
            _ => {}
        }
        Flow::More
    }

    fn end(&mut self, out: &mut Vec<LlmEvent>) {
        let e = self
            .error
            .take()
            .unwrap_or_else(|| cut_short(&self.provider, "no response.completed"));
        self.fail(e, out);
    }

    fn fail(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>) {
        self.close_all(out);
        out.push(LlmEvent::Error { error });
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn count(v: Option<&Value>, pointer: &str) -> u64 {
    v.and_then(|v| v.pointer(pointer))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Responses usage: `input_tokens` includes the cached ones and
/// `output_tokens` the reasoning ones; [`Usage`] counts each once.
pub fn usage(raw: Option<&Value>) -> Usage {
    let cached = count(raw, "/input_tokens_details/cached_tokens");
    let reasoning = count(raw, "/output_tokens_details/reasoning_tokens");
    Usage {
        input: count(raw, "/input_tokens").saturating_sub(cached),
        output: count(raw, "/output_tokens").saturating_sub(reasoning),
        reasoning,
        cache_read: cached,
        cache_write: 0,
        raw: raw.cloned(),
    }
}

#[cfg(test)]
#[path = "responses_stream_tests.rs"]
mod tests;
