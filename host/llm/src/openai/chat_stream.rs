//! OpenAI Chat Completions stream → [`LlmEvent`]s, with the quirks of the
//! servers that speak it: OpenAI itself, Groq, OpenRouter, Ollama,
//! llama.cpp, vLLM and LM Studio.
//!
//! - text in `delta.content`; reasoning in `delta.reasoning_content`
//!   (DeepSeek, llama.cpp, vLLM) or `delta.reasoning` (OpenRouter, Groq, Ollama);
//! - tool calls as argument deltas keyed by `index`; some servers send a
//!   whole call in one delta, omit the index, or send an empty id (a stable
//!   id is made up then);
//! - the finish reason in one chunk and usage in a later one (or on the
//!   same one, or under `x_groq.usage`), then `data: [DONE]`;
//! - errors as an `event: error` (Groq) or an `error` object in a chunk
//!   (OpenRouter), possibly after the finish reason.

use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::Value;
use warden_protocol::{FinishReason, LlmEvent, ProviderError, Usage};

use crate::failure;
use crate::sse::SseEvent;
use crate::stream::{Decoder, Flow, cut_short, json};

/// One tool call being assembled.
#[derive(Debug)]
struct Call {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
    /// `ToolInputStart` was sent (it needs the name).
    started: bool,
}

/// The decoder for one Chat Completions stream.
#[derive(Debug)]
pub struct ChatDecoder {
    provider: String,
    started: bool,
    /// The open text or reasoning part, and how many have been opened.
    text: Option<String>,
    reasoning: Option<String>,
    parts: u32,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Option<Value>,
}

impl ChatDecoder {
    pub fn new(provider: &str) -> Self {
        ChatDecoder {
            provider: provider.to_string(),
            started: false,
            text: None,
            reasoning: None,
            parts: 0,
            calls: Vec::new(),
            finish: None,
            usage: None,
        }
    }

    fn start(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.started {
            self.started = true;
            out.push(LlmEvent::Start);
            out.push(LlmEvent::StartStep);
        }
    }

    fn close_text(&mut self, out: &mut Vec<LlmEvent>) {
        if let Some(id) = self.text.take() {
            out.push(LlmEvent::TextEnd { id });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<LlmEvent>) {
        if let Some(id) = self.reasoning.take() {
            out.push(LlmEvent::ReasoningEnd { id, metadata: None });
        }
    }

    fn text_delta(&mut self, text: &str, out: &mut Vec<LlmEvent>) {
        self.close_reasoning(out);
        let id = match &self.text {
            Some(id) => id.clone(),
            None => {
                self.parts += 1;
                let id = format!("text-{}", self.parts);
                out.push(LlmEvent::TextStart { id: id.clone() });
                self.text = Some(id.clone());
                id
            }
        };
        out.push(LlmEvent::TextDelta {
            id,
            text: text.to_string(),
        });
    }

    fn reasoning_delta(&mut self, text: &str, out: &mut Vec<LlmEvent>) {
        self.close_text(out);
        let id = match &self.reasoning {
            Some(id) => id.clone(),
            None => {
                self.parts += 1;
                let id = format!("reasoning-{}", self.parts);
                out.push(LlmEvent::ReasoningStart { id: id.clone() });
                self.reasoning = Some(id.clone());
                id
            }
        };
        out.push(LlmEvent::ReasoningDelta {
            id,
            text: text.to_string(),
        });
    }

    fn tool_delta(&mut self, tc: &Value, out: &mut Vec<LlmEvent>) {
        let index = tc.get("index").and_then(Value::as_u64);
        let id = tc.get("id").and_then(Value::as_str).unwrap_or("");
        let function = tc.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let args = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        // Which call this delta belongs to: by index; without one, a new id
        // starts a new call and anything else continues the last one.
        let pos = match index {
            Some(i) => self.calls.iter().position(|c| c.index == Some(i)),
            None => match self.calls.last() {
                Some(last) if id.is_empty() || last.id == id => Some(self.calls.len() - 1),
                _ => None,
            },
        };
        let pos = pos.unwrap_or_else(|| {
            self.calls.push(Call {
                index,
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
                started: false,
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[pos];
        if call.id.is_empty() && !id.is_empty() {
            call.id = id.to_string();
        }
        if call.name.is_empty() && !name.is_empty() {
            call.name = name.to_string();
        }
        call.arguments.push_str(args);
        if call.started {
            if !args.is_empty() {
                out.push(LlmEvent::ToolInputDelta {
                    call_id: call.id.clone(),
                    delta: args.to_string(),
                });
            }
            return;
        }
        if call.name.is_empty() {
            return; // wait for the name before announcing the call
        }
        if call.id.is_empty() {
            call.id = synthetic_id();
        }
        call.started = true;
        let (call_id, name, sofar) = (call.id.clone(), call.name.clone(), call.arguments.clone());
        self.close_text(out);
        self.close_reasoning(out);
        out.push(LlmEvent::ToolInputStart {
            call_id: call_id.clone(),
            name,
        });
        if !sofar.is_empty() {
            out.push(LlmEvent::ToolInputDelta {
                call_id,
                delta: sofar,
            });
        }
    }

    /// The normal end: close parts, hand over the tool calls, finish the step.
    fn finish(&mut self, out: &mut Vec<LlmEvent>) {
        self.start(out);
        self.close_text(out);
        self.close_reasoning(out);
        // Handed over in index order, whatever order their deltas came in.
        self.calls.sort_by_key(|c| c.index.unwrap_or(u64::MAX));
        for call in &mut self.calls {
            if call.id.is_empty() {
                call.id = synthetic_id();
            }
            if !call.started {
                out.push(LlmEvent::ToolInputStart {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                });
            }
            out.push(LlmEvent::ToolInputEnd {
                call_id: call.id.clone(),
            });
            out.push(LlmEvent::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                input: arguments_or_empty_object(&call.arguments),
                provider_executed: false,
            });
        }
        let (reason, usage) = self.step_end();
        out.push(LlmEvent::FinishStep {
            reason,
            raw_reason: self.finish.clone(),
            usage: usage.clone(),
        });
        out.push(LlmEvent::Finish { reason, usage });
    }

    fn step_end(&self) -> (FinishReason, Usage) {
        let reason = finish_reason(self.finish.as_deref(), !self.calls.is_empty());
        (reason, usage(self.usage.as_ref()))
    }

    /// An error from the provider inside the stream. A step that already
    /// finished keeps its finish and usage (the tokens were spent); the
    /// unfinished tool calls are not handed over.
    fn error(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>) {
        self.close_text(out);
        self.close_reasoning(out);
        if self.finish.is_some() {
            let (reason, usage) = self.step_end();
            out.push(LlmEvent::FinishStep {
                reason,
                raw_reason: self.finish.clone(),
                usage,
            });
        }
        out.push(LlmEvent::Error { error });
    }
}

impl Decoder for ChatDecoder {
    fn event(&mut self, event: SseEvent, out: &mut Vec<LlmEvent>) -> Flow {
        if event.data.trim() == "[DONE]" {
            self.finish(out);
            return Flow::Done;
        }
        let chunk = match json(&self.provider, &event) {
            Ok(v) => v,
            Err(e) => {
                self.error(e, out);
                return Flow::Done;
            }
        };
        if let Some(u) = chunk
            .get("usage")
            .or_else(|| chunk.get("x_groq").and_then(|x| x.get("usage")))
            .filter(|u| u.is_object())
        {
            self.usage = Some(u.clone());
        }
        let has_error = chunk.get("error").is_some_and(|e| !e.is_null());
        if event.event == "error" || has_error {
            let e = failure::in_band(&self.provider, &chunk);
            self.error(e, out);
            return Flow::Done;
        }
        self.start(out);
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Flow::More;
        };
        // One answer was asked for (no `n`); its choice is index 0.
        let choice = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0);
        let Some(choice) = choice else {
            return Flow::More;
        };
        if let Some(delta) = choice.get("delta") {
            let reasoning = ["reasoning_content", "reasoning"].iter().find_map(|k| {
                delta
                    .get(*k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            });
            if let Some(r) = reasoning {
                self.reasoning_delta(r, out);
            }
            for key in ["content", "refusal"] {
                if let Some(t) = delta
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    self.text_delta(t, out);
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for tc in calls {
                    self.tool_delta(tc, out);
                }
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(r.to_string());
        }
        Flow::More
    }

    fn end(&mut self, out: &mut Vec<LlmEvent>) {
        // Some servers close without `[DONE]`; a finish reason is enough.
        if self.finish.is_some() {
            self.finish(out);
        } else {
            let e = cut_short(&self.provider, "no finish_reason and no [DONE]");
            self.error(e, out);
        }
    }

    fn fail(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>) {
        self.error(error, out);
    }
}

/// A made-up call id for servers that send none; it stays the call's id
/// for the rest of the stream and in the ledger.
fn synthetic_id() -> String {
    let tail: String = rand::rng()
        .sample_iter(Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    format!("call_{tail}")
}

/// Tools without parameters often stream no arguments at all: that means `{}`.
pub fn arguments_or_empty_object(raw: &str) -> String {
    if raw.trim().is_empty() {
        "{}".to_string()
    } else {
        raw.to_string()
    }
}

fn finish_reason(raw: Option<&str>, has_calls: bool) -> FinishReason {
    match raw {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("error") => FinishReason::Error,
        Some(_) => FinishReason::Other,
        None if has_calls => FinishReason::ToolCalls,
        None => FinishReason::Unknown,
    }
}

fn count(v: Option<&Value>, path: &[&str]) -> u64 {
    let mut cur = v;
    for k in path {
        cur = cur.and_then(|c| c.get(*k));
    }
    cur.and_then(Value::as_u64).unwrap_or(0)
}

/// Chat usage: `prompt_tokens` includes the cached ones and
/// `completion_tokens` the reasoning ones; [`Usage`] counts each once.
pub fn usage(raw: Option<&Value>) -> Usage {
    let prompt = count(raw, &["prompt_tokens"]);
    let completion = count(raw, &["completion_tokens"]);
    let cached = match count(raw, &["prompt_tokens_details", "cached_tokens"]) {
        0 => count(raw, &["prompt_cache_hit_tokens"]), // DeepSeek
        n => n,
    };
    let reasoning = count(raw, &["completion_tokens_details", "reasoning_tokens"]);
    Usage {
        input: prompt.saturating_sub(cached),
        output: completion.saturating_sub(reasoning),
        reasoning,
        cache_read: cached,
        cache_write: 0,
        raw: raw.cloned(),
    }
}

#[cfg(test)]
#[path = "chat_stream_tests.rs"]
mod tests;
