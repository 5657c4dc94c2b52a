//! The scripted provider: replays a cassette, one turn per model request.
//!
//! A cassette is a JSON file:
//!
//! ```json
//! {
//!   "record": "requests.jsonl",
//!   "turns": [
//!     {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
//!     {"text": "The scripts are build and test.", "usage": {"input": 120, "output": 9}}
//!   ]
//! }
//! ```
//!
//! Each turn may have `text`, `reasoning`, `tool_calls` (with `arguments` as
//! JSON, or `arguments_raw` as the exact text the model would stream, valid
//! JSON or not), `finish_reason` (default `tool-calls` when there are tool
//! calls, else `stop`), `usage`, `delay_ms` (wait before the step starts) and
//! `error` (fail this request instead: `{"kind": "rate-limited", "message":
//! "...", "retry_after_ms": 10}`).
//!
//! When `record` names a file (relative to the cassette) or
//! `WARDEN_SCRIPTED_RECORD` is set, every request received is appended to it
//! as a JSON line, so a test can assert what the model was shown. A test in
//! this process can ask for them in memory instead
//! ([`ScriptedProvider::keeping_requests`]). Neither is the default: a kept
//! request shares the loop's conversation, which the loop then copies to
//! extend each round, so a long session would pay for every message it
//! holds at every step.
//!
//! The place in the cassette is per conversation (a session): the core asks
//! for [`Provider::conversation`] and streams through that view. A
//! conversation this process has not served yet starts at the number of
//! model turns its first request already shows (its assistant messages), so
//! a resumed session continues where the killed one stopped; after that each
//! request, a retry included, takes the next turn.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use warden_protocol::llm::ErrorKind;
use warden_protocol::{
    ChatMessage, FinishReason, LlmEvent, LlmRequest, ModelRef, ProviderError, Usage,
};

use super::{EventStream, ModelInfo, Prices, Provider, ResolvedModel};
use crate::{ModelError, Result};
use usage::{Counted, estimate_usage};

/// How many requests [`ScriptedProvider::requests`] keeps, when asked to.
const KEPT_REQUESTS: usize = 256;

/// A parsed cassette.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    pub turns: Vec<Turn>,
    /// Where to append the requests received, relative to the cassette.
    #[serde(default)]
    pub record: Option<String>,
    /// The context window to report for this model (no overflow check when absent).
    #[serde(default)]
    pub context_limit: Option<u64>,
}

/// What the model streams for one request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<ScriptedUsage>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub error: Option<ScriptedError>,
}

/// One tool call of a turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub arguments: Option<Value>,
    #[serde(default)]
    pub arguments_raw: Option<String>,
}

/// Token usage of a turn.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedUsage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub reasoning: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

/// A failure to play instead of a response.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

impl Cassette {
    /// Read and check a cassette file. Errors say which turn and field is wrong.
    pub fn load(path: &Path) -> std::result::Result<Cassette, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse and check cassette text.
    pub fn parse(text: &str) -> std::result::Result<Cassette, String> {
        let c: Cassette = serde_json::from_str(text).map_err(|e| {
            format!("not a valid cassette ({e}); expected {{\"turns\": [{{\"text\": ...}} or {{\"tool_calls\": [...]}}]}}")
        })?;
        for (i, t) in c.turns.iter().enumerate() {
            let n = i + 1;
            if let Some(r) = &t.finish_reason {
                finish_reason(r).map_err(|e| format!("turn {n}: {e}"))?;
            }
            for call in &t.tool_calls {
                if call.id.is_empty() || call.name.is_empty() {
                    return Err(format!(
                        "turn {n}: every tool call needs a non-empty \"id\" and \"name\""
                    ));
                }
                if call.arguments.is_some() && call.arguments_raw.is_some() {
                    return Err(format!(
                        "turn {n}, call {}: give \"arguments\" or \"arguments_raw\", not both",
                        call.id
                    ));
                }
            }
            if t.error.is_none()
                && t.text.is_none()
                && t.reasoning.is_none()
                && t.tool_calls.is_empty()
            {
                return Err(format!(
                    "turn {n} is empty: give it \"text\", \"tool_calls\" or \"error\""
                ));
            }
        }
        Ok(c)
    }
}

fn finish_reason(s: &str) -> std::result::Result<FinishReason, String> {
    Ok(match s {
        "stop" | "end_turn" => FinishReason::Stop,
        "tool-calls" | "tool_calls" | "tool_use" => FinishReason::ToolCalls,
        "length" | "max_tokens" => FinishReason::Length,
        "content-filter" | "content_filter" => FinishReason::ContentFilter,
        "error" => FinishReason::Error,
        "other" => FinishReason::Other,
        "unknown" => FinishReason::Unknown,
        other => {
            return Err(format!(
                "unknown finish_reason {other:?}; use stop, tool-calls, length, content-filter"
            ));
        }
    })
}

/// Replays a cassette.
pub struct ScriptedProvider {
    player: Arc<Player>,
}

/// The cassette and every conversation's place in it, shared by the
/// provider and its conversation views.
struct Player {
    path: PathBuf,
    cassette: Cassette,
    record: Option<PathBuf>,
    /// The next turn of each conversation served so far.
    next: Mutex<HashMap<String, Place>>,
    /// The requests received, when the provider keeps them.
    requests: Option<Mutex<Vec<LlmRequest>>>,
}

/// A conversation's place in the cassette, and what its last request's
/// usage estimate counted, so the next request counts only what it adds.
struct Place {
    turn: u32,
    counted: Counted,
}

impl ScriptedProvider {
    /// Load the cassette at `path`.
    pub fn load(path: &Path) -> std::result::Result<ScriptedProvider, String> {
        let cassette = Cassette::load(path)?;
        let record = match std::env::var_os("WARDEN_SCRIPTED_RECORD") {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => cassette
                .record
                .as_ref()
                .map(|r| path.parent().unwrap_or(Path::new(".")).join(r)),
        };
        let player = Player {
            path: path.to_path_buf(),
            cassette,
            record,
            next: Mutex::new(HashMap::new()),
            requests: None,
        };
        Ok(ScriptedProvider {
            player: Arc::new(player),
        })
    }

    /// Keep the requests received in memory, for [`ScriptedProvider::requests`]
    /// (a test's provider; see the module's docs for why it is not the default).
    pub fn keeping_requests(mut self) -> ScriptedProvider {
        if let Some(player) = Arc::get_mut(&mut self.player) {
            player.requests = Some(Mutex::new(Vec::new()));
        }
        self
    }

    /// The requests received so far, in order (the latest 256), when the
    /// provider keeps them ([`ScriptedProvider::keeping_requests`]); else none.
    pub fn requests(&self) -> Vec<LlmRequest> {
        match &self.player.requests {
            Some(kept) => kept.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            None => Vec::new(),
        }
    }

    /// The cassette being played.
    pub fn cassette(&self) -> &Cassette {
        &self.player.cassette
    }
}

impl Player {
    /// The cassette turn for the conversation's next request. A conversation
    /// first seen here (a new session, or one resumed by a fresh process)
    /// starts after the model turns its request already holds.
    ///
    /// Also the size of the request's conversation, in characters (for the
    /// usage estimate of a turn that gives none).
    fn take_turn(&self, conversation: &str, request: &LlmRequest) -> (u32, usize) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let place = match next.get_mut(conversation) {
            Some(place) => place,
            None => next.entry(conversation.to_string()).or_insert(Place {
                turn: shown_turns(request),
                counted: Counted::default(),
            }),
        };
        let turn = place.turn;
        place.turn += 1;
        (turn, place.counted.update(&request.messages))
    }

    /// Play the conversation's next turn.
    async fn play(
        &self,
        conversation: &str,
        request: LlmRequest,
    ) -> std::result::Result<EventStream, ProviderError> {
        self.record(&request)?;
        let (index, chars) = self.take_turn(conversation, &request);
        let Some(turn) = self.cassette.turns.get(index as usize).cloned() else {
            return Err(ProviderError::new(
                ErrorKind::Other,
                format!(
                    "the cassette {} has {} turns and this is request {} of the session; add a turn or check the conversation",
                    self.path.display(),
                    self.cassette.turns.len(),
                    index + 1
                ),
            ));
        };
        if let Some(e) = &turn.error {
            return Err(ProviderError {
                kind: e.kind,
                message: e.message.clone(),
                status: e.status,
                retry_after_ms: e.retry_after_ms,
            });
        }
        let events = turn_events(&turn, index, &request, chars);
        let delay = turn.delay_ms.unwrap_or(0);
        let stream = futures::stream::once(async move {
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            futures::stream::iter(events)
        })
        .flatten();
        Ok(Box::pin(stream))
    }

    fn record(&self, request: &LlmRequest) -> std::result::Result<(), ProviderError> {
        {
            // The latest requests only: a long session must not hold every
            // conversation it ever sent in memory.
            if let Some(kept) = &self.requests {
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                if kept.len() >= KEPT_REQUESTS {
                    kept.remove(0);
                }
                kept.push(request.clone());
            }
        }
        if let Some(path) = &self.record {
            let line = serde_json::to_string(request).map_err(|e| {
                ProviderError::new(ErrorKind::Other, format!("cannot record the request: {e}"))
            })?;
            let fail = |e: std::io::Error| {
                ProviderError::new(
                    ErrorKind::Other,
                    format!("cannot record to {}: {e}", path.display()),
                )
            };
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(path)
                .map_err(fail)?;
            // One write per line, so a killed process leaves whole lines; and if
            // one was cut anyway, the next line starts on a line of its own.
            let mut buf = Vec::with_capacity(line.len() + 2);
            if ends_mid_line(&mut f) {
                buf.push(b'\n');
            }
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
            f.write_all(&buf).map_err(fail)?;
        }
        Ok(())
    }
}

/// The model turns a request already shows: its assistant messages, except
/// a last one, which is not a turn taken but words put in the model's mouth
/// (the host's "no steps are left" on an agent's last step).
fn shown_turns(request: &LlmRequest) -> u32 {
    let taken = match request.messages.split_last() {
        Some((last, before)) if matches!(&**last, ChatMessage::Assistant { .. }) => before,
        _ => &request.messages[..],
    };
    taken
        .iter()
        .filter(|m| matches!(&***m, ChatMessage::Assistant { .. }))
        .count() as u32
}

/// A request with no conversation of its own (a provider used outside a
/// session) shares this one.
const NO_CONVERSATION: &str = "";

#[async_trait::async_trait]
impl Provider for ScriptedProvider {
    async fn stream(&self, request: LlmRequest) -> std::result::Result<EventStream, ProviderError> {
        self.player.play(NO_CONVERSATION, request).await
    }

    fn conversation(&self, id: &str) -> Option<Arc<dyn Provider>> {
        Some(Arc::new(Conversation {
            player: self.player.clone(),
            id: id.to_string(),
        }))
    }
}

/// The scripted provider as one conversation sees it: its own place in the
/// cassette.
struct Conversation {
    player: Arc<Player>,
    id: String,
}

#[async_trait::async_trait]
impl Provider for Conversation {
    async fn stream(&self, request: LlmRequest) -> std::result::Result<EventStream, ProviderError> {
        self.player.play(&self.id, request).await
    }

    fn conversation(&self, id: &str) -> Option<Arc<dyn Provider>> {
        Some(Arc::new(Conversation {
            player: self.player.clone(),
            id: id.to_string(),
        }))
    }
}

/// Whether a record file's last line lacks its newline.
fn ends_mid_line(f: &mut std::fs::File) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut last = [0u8; 1];
    f.seek(SeekFrom::End(-1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] != b'\n'
}

/// The events a turn streams, as a real provider would send them.
fn turn_events(turn: &Turn, index: u32, request: &LlmRequest, chars: usize) -> Vec<LlmEvent> {
    let mut ev = vec![LlmEvent::Start, LlmEvent::StartStep];
    if let Some(r) = &turn.reasoning {
        let id = format!("r{index}");
        ev.push(LlmEvent::ReasoningStart { id: id.clone() });
        for chunk in chunks(r) {
            ev.push(LlmEvent::ReasoningDelta {
                id: id.clone(),
                text: chunk.to_string(),
            });
        }
        ev.push(LlmEvent::ReasoningEnd { id, metadata: None });
    }
    if let Some(t) = &turn.text {
        let id = format!("t{index}");
        ev.push(LlmEvent::TextStart { id: id.clone() });
        for chunk in chunks(t) {
            ev.push(LlmEvent::TextDelta {
                id: id.clone(),
                text: chunk.to_string(),
            });
        }
        ev.push(LlmEvent::TextEnd { id });
    }
    for call in &turn.tool_calls {
        let raw = match (&call.arguments_raw, &call.arguments) {
            (Some(raw), _) => raw.clone(),
            (None, Some(v)) => v.to_string(),
            (None, None) => "{}".to_string(),
        };
        ev.push(LlmEvent::ToolInputStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
        });
        ev.push(LlmEvent::ToolInputDelta {
            call_id: call.id.clone(),
            delta: raw.clone(),
        });
        ev.push(LlmEvent::ToolInputEnd {
            call_id: call.id.clone(),
        });
        ev.push(LlmEvent::ToolCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            input: raw,
            provider_executed: false,
        });
    }
    let reason = match &turn.finish_reason {
        Some(r) => finish_reason(r).unwrap_or(FinishReason::Unknown),
        None if !turn.tool_calls.is_empty() => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    };
    let usage = match &turn.usage {
        Some(u) => Usage {
            input: u.input,
            output: u.output,
            reasoning: u.reasoning,
            cache_read: u.cache_read,
            cache_write: u.cache_write,
            raw: None,
        },
        None => estimate_usage(turn, request, chars),
    };
    ev.push(LlmEvent::FinishStep {
        reason,
        raw_reason: turn.finish_reason.clone(),
        usage: usage.clone(),
    });
    ev.push(LlmEvent::Finish { reason, usage });
    ev
}

/// Split text the way a model streams it: a few words at a time.
fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut words = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' || c == '\n' {
            words += 1;
            if words == 3 {
                out.push(&text[start..=i]);
                start = i + 1;
                words = 0;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The `scripted` provider factory: `scripted:PATH`.
pub fn resolve(model: &ModelRef) -> Result<ResolvedModel> {
    let path = PathBuf::from(&model.model);
    let provider = ScriptedProvider::load(&path).map_err(|reason| ModelError::Model {
        model: model.to_string(),
        reason,
    })?;
    let context_limit = provider.cassette().context_limit;
    Ok(ResolvedModel {
        info: ModelInfo {
            reference: model.clone(),
            context_limit,
            output_limit: None,
            prices: Prices::default(),
        },
        provider: Arc::new(provider),
    })
}

#[path = "scripted_usage.rs"]
mod usage;

#[cfg(test)]
#[path = "scripted_tests.rs"]
mod tests;
