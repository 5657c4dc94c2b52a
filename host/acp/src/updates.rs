//! warden's message parts as ACP `session/update`s: streamed text and
//! reasoning as message and thought chunks, and the tool state machine as
//! `tool_call` / `tool_call_update`:
//!
//! | warden      | ACP           |
//! |-------------|---------------|
//! | pending     | `pending`     |
//! | running     | `in_progress` |
//! | completed   | `completed`   |
//! | error       | `failed`      |
//!
//! A call is announced (`tool_call`) the first time it is seen, in
//! whatever state it is then, and updated on each change of state or
//! title. Its id is the part's id, unique in the ledger (a model's call ids
//! may repeat across steps). [`Stream`] follows the bus during a prompt;
//! [`replay`] turns a stored session into the same updates for
//! `session/load`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{
    self as acp, ContentBlock, ContentChunk, SessionUpdate, ToolCall, ToolCallContent,
    ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;
use warden_core::tool::{PatternSource, ToolDef};
use warden_protocol::{Event, MessageInfo, MessageWithParts, Part, PartBody, ToolState};

/// What the mapping needs to know of the tools: their permission (for the
/// kind) and which argument is a path (for the locations).
pub struct Tools {
    by_id: HashMap<String, ToolDef>,
}

impl Tools {
    pub fn new(defs: Vec<ToolDef>) -> Tools {
        Tools {
            by_id: defs.into_iter().map(|d| (d.id.clone(), d)).collect(),
        }
    }

    /// The protocol's kind of a tool, by the permission its rules are
    /// written against (`edit` for write and edit, ...).
    pub fn kind(&self, tool: &str) -> ToolKind {
        let permission = self.by_id.get(tool).map_or(tool, |d| d.permission.as_str());
        match permission {
            "read" | "list" => ToolKind::Read,
            "edit" | "write" | "patch" => ToolKind::Edit,
            "glob" | "grep" | "search" | "codesearch" => ToolKind::Search,
            "webfetch" | "websearch" | "fetch" => ToolKind::Fetch,
            "bash" | "exec" => ToolKind::Execute,
            _ => ToolKind::Other,
        }
    }

    /// The file a call is about, made absolute against the session's directory.
    pub fn locations(&self, tool: &str, input: &Value, directory: &Path) -> Vec<ToolCallLocation> {
        let Some(PatternSource::Path(arg)) = self.by_id.get(tool).map(|d| &d.pattern) else {
            return Vec::new();
        };
        let Some(path) = input
            .get(arg)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            return Vec::new();
        };
        let path = PathBuf::from(path);
        let path = if path.is_absolute() {
            path
        } else {
            directory.join(path)
        };
        let line = ["offset", "line"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_u64))
            .and_then(|n| u32::try_from(n).ok());
        vec![ToolCallLocation::new(path).line(line)]
    }

    /// A line for people: the tool, and the argument its rules match.
    fn title(&self, tool: &str, input: &Value) -> String {
        let arg = match self.by_id.get(tool).map(|d| &d.pattern) {
            Some(PatternSource::Path(a) | PatternSource::Url(a) | PatternSource::Arg(a)) => {
                input.get(a).and_then(Value::as_str)
            }
            _ => None,
        };
        match arg {
            Some(a) if !a.is_empty() => format!("{tool} {}", shorten(a, 120)),
            _ => tool.to_string(),
        }
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

/// A tool call's state as the protocol sees it.
struct Seen {
    status: ToolCallStatus,
    title: String,
}

fn seen(tools: &Tools, tool: &str, state: &ToolState) -> Seen {
    let (status, title) = match state {
        ToolState::Pending { .. } => (ToolCallStatus::Pending, tool.to_string()),
        ToolState::Running { input, title, .. } => (
            ToolCallStatus::InProgress,
            title.clone().unwrap_or_else(|| tools.title(tool, input)),
        ),
        ToolState::Completed { input, title, .. } => (
            ToolCallStatus::Completed,
            if title.is_empty() {
                tools.title(tool, input)
            } else {
                title.clone()
            },
        ),
        ToolState::Error { input, .. } => (ToolCallStatus::Failed, tools.title(tool, input)),
    };
    Seen { status, title }
}

/// What a call shows: its output, or what went wrong.
fn content(state: &ToolState) -> Vec<ToolCallContent> {
    let text = match state {
        ToolState::Completed { output, .. } => output.clone(),
        ToolState::Error { error, .. } => error.clone(),
        _ => return Vec::new(),
    };
    vec![ToolCallContent::from(ContentBlock::from(text))]
}

fn input_of(state: &ToolState) -> Option<&Value> {
    match state {
        ToolState::Pending { .. } => None,
        ToolState::Running { input, .. }
        | ToolState::Completed { input, .. }
        | ToolState::Error { input, .. } => Some(input),
    }
}

fn raw_output(state: &ToolState) -> Option<Value> {
    match state {
        ToolState::Completed { metadata, .. } if !metadata.is_null() => Some(metadata.clone()),
        ToolState::Error {
            metadata: Some(m), ..
        } => Some(m.clone()),
        _ => None,
    }
}

/// The whole call, as first announced.
fn announce(
    tools: &Tools,
    part: &Part,
    tool: &str,
    state: &ToolState,
    directory: &Path,
) -> ToolCall {
    let now = seen(tools, tool, state);
    let mut call = ToolCall::new(acp::ToolCallId::new(part.id.0.as_str()), now.title)
        .name(tool.to_string())
        .kind(tools.kind(tool))
        .status(now.status)
        .content(content(state))
        .raw_output(raw_output(state));
    if let Some(input) = input_of(state) {
        call = call
            .locations(tools.locations(tool, input, directory))
            .raw_input(input.clone());
    }
    call
}

/// What changed since the call was last shown.
fn update(
    tools: &Tools,
    part: &Part,
    tool: &str,
    state: &ToolState,
    directory: &Path,
) -> ToolCallUpdate {
    let now = seen(tools, tool, state);
    let mut fields = ToolCallUpdateFields::new()
        .status(now.status)
        .title(now.title);
    if let Some(input) = input_of(state) {
        fields = fields
            .locations(tools.locations(tool, input, directory))
            .raw_input(input.clone());
    }
    if matches!(state, ToolState::Completed { .. } | ToolState::Error { .. }) {
        fields = fields.content(content(state)).raw_output(raw_output(state));
    }
    ToolCallUpdate::new(acp::ToolCallId::new(part.id.0.as_str()), fields)
}

fn chunk(text: &str, message: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.to_string())).message_id(acp::MessageId::new(message))
}

/// Follows one session's events during a prompt and says what to send.
pub struct Stream<'a> {
    tools: &'a Tools,
    directory: &'a Path,
    /// The session's assistant messages seen so far (only their text is
    /// the agent's; the user's own prompt is not echoed).
    assistant: std::collections::HashSet<String>,
    /// Those of them that are compaction summaries: their text is shown as
    /// the agent's thought, not as its answer.
    summaries: std::collections::HashSet<String>,
    /// How much of each text or reasoning part was sent, in bytes.
    sent: HashMap<String, usize>,
    /// Each call's state as last shown.
    calls: HashMap<String, (ToolCallStatus, String)>,
    /// The part of each call, by its message and the model's call id (what
    /// a permission question names).
    parts: HashMap<(String, String), String>,
}

impl<'a> Stream<'a> {
    pub fn new(tools: &'a Tools, directory: &'a Path) -> Stream<'a> {
        Stream {
            tools,
            directory,
            assistant: Default::default(),
            summaries: Default::default(),
            sent: HashMap::new(),
            calls: HashMap::new(),
            parts: HashMap::new(),
        }
    }

    /// The id a call was announced under, by its message and call id.
    pub fn call_of(&self, message: &str, call: &str) -> Option<&str> {
        self.parts
            .get(&(message.to_string(), call.to_string()))
            .map(String::as_str)
    }

    /// Whether `message` is a compaction summary.
    pub fn is_summary(&self, message: &str) -> bool {
        self.summaries.contains(message)
    }

    /// The updates an event of the session calls for (often none).
    pub fn updates(&mut self, event: &Event) -> Vec<SessionUpdate> {
        match event {
            Event::MessageUpdated {
                info: MessageInfo::Assistant(a),
            } => {
                self.assistant.insert(a.id.0.clone());
                if a.summary {
                    self.summaries.insert(a.id.0.clone());
                }
                Vec::new()
            }
            Event::PartUpdated { part, .. } => self.part(part).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    fn part(&mut self, part: &Part) -> Option<SessionUpdate> {
        match &part.body {
            PartBody::Text {
                text,
                ignored: false,
                ..
            } if self.assistant.contains(&part.message_id.0) => {
                let summary = self.summaries.contains(&part.message_id.0);
                self.more(part, text).map(|t| {
                    let chunk = chunk(t, &part.message_id.0);
                    if summary {
                        SessionUpdate::AgentThoughtChunk(chunk)
                    } else {
                        SessionUpdate::AgentMessageChunk(chunk)
                    }
                })
            }
            PartBody::Reasoning {
                text,
                ignored: false,
                ..
            } => self
                .more(part, text)
                .map(|t| SessionUpdate::AgentThoughtChunk(chunk(t, &part.message_id.0))),
            PartBody::Tool {
                tool,
                state,
                call_id,
                ignored: false,
                ..
            } => {
                self.parts
                    .entry((part.message_id.0.clone(), call_id.clone()))
                    .or_insert_with(|| part.id.0.clone());
                let now = seen(self.tools, tool, state);
                match self.calls.get(&part.id.0) {
                    None => {
                        self.calls
                            .insert(part.id.0.clone(), (now.status, now.title));
                        Some(SessionUpdate::ToolCall(announce(
                            self.tools,
                            part,
                            tool,
                            state,
                            self.directory,
                        )))
                    }
                    Some((status, title)) if *status == now.status && *title == now.title => None,
                    Some(_) => {
                        self.calls
                            .insert(part.id.0.clone(), (now.status, now.title));
                        Some(SessionUpdate::ToolCallUpdate(update(
                            self.tools,
                            part,
                            tool,
                            state,
                            self.directory,
                        )))
                    }
                }
            }
            _ => None,
        }
    }

    /// The text of a part not sent yet. The part's whole text is the
    /// truth (a write may carry no delta); a text that no longer extends
    /// what was sent sends nothing.
    fn more<'t>(&mut self, part: &Part, text: &'t str) -> Option<&'t str> {
        let sent = self.sent.entry(part.id.0.clone()).or_default();
        if text.len() <= *sent || !text.is_char_boundary(*sent) {
            return None;
        }
        let rest = &text[*sent..];
        *sent = text.len();
        Some(rest)
    }
}

/// A stored session as the updates that show it: the user's messages,
/// the agent's text and reasoning, and every call in its final state.
/// Parts of failed attempts (kept in the ledger, never shown to the
/// model) and warden's own synthetic text are left out.
pub fn replay(
    messages: &[MessageWithParts],
    tools: &Tools,
    directory: &Path,
) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    for m in messages {
        let user = matches!(m.info, MessageInfo::User(_));
        let summary = matches!(&m.info, MessageInfo::Assistant(a) if a.summary);
        let id = m.info.id().0.as_str();
        for part in &m.parts {
            match &part.body {
                PartBody::Text {
                    text,
                    synthetic: false,
                    ignored: false,
                    ..
                } if !text.is_empty() => out.push(if user {
                    SessionUpdate::UserMessageChunk(chunk(text, id))
                } else if summary {
                    SessionUpdate::AgentThoughtChunk(chunk(text, id))
                } else {
                    SessionUpdate::AgentMessageChunk(chunk(text, id))
                }),
                PartBody::Reasoning {
                    text,
                    ignored: false,
                    ..
                } if !text.is_empty() => {
                    out.push(SessionUpdate::AgentThoughtChunk(chunk(text, id)))
                }
                PartBody::Tool {
                    tool,
                    state,
                    ignored: false,
                    ..
                } => out.push(SessionUpdate::ToolCall(announce(
                    tools, part, tool, state, directory,
                ))),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_core::tool::GuestRef;
    use warden_protocol::{MessageId, PartId, SessionId};

    fn read_def() -> ToolDef {
        ToolDef {
            id: "read".into(),
            description: String::new(),
            parameters: json!({}),
            permission: "read".into(),
            pattern: PatternSource::Path("filePath".into()),
            guest: GuestRef {
                plugin: "builtin".into(),
                hash: "h".into(),
            },
            mapped: true,
            server: None,
        }
    }

    fn tool_part(state: ToolState) -> Part {
        Part {
            id: PartId("prt_1".into()),
            session_id: SessionId("ses_1".into()),
            message_id: MessageId("msg_a".into()),
            body: PartBody::Tool {
                call_id: "c1".into(),
                tool: "read".into(),
                state,
                provider_executed: false,
                ignored: false,
            },
        }
    }

    fn wire(u: &SessionUpdate) -> Value {
        serde_json::to_value(u).unwrap()
    }

    #[test]
    fn a_read_call_goes_pending_in_progress_completed_with_its_location() {
        let tools = Tools::new(vec![read_def()]);
        let dir = Path::new("/work/p");
        let mut s = Stream::new(&tools, dir);
        let input = json!({"filePath": "src/a.rs"});
        let running: ToolState = serde_json::from_value(
            json!({"status": "running", "input": input, "time": {"start": 1}}),
        )
        .unwrap();
        let done: ToolState = serde_json::from_value(json!({"status": "completed", "input": input,
            "output": "fn a() {}", "title": "src/a.rs", "metadata": {}, "time": {"start": 1, "end": 2}}))
        .unwrap();
        let mut sent = Vec::new();
        for state in [ToolState::pending(), running.clone(), running, done] {
            let event = Event::PartUpdated {
                part: tool_part(state),
                delta: None,
            };
            sent.extend(s.updates(&event).iter().map(wire));
        }
        assert_eq!(sent.len(), 3, "an unchanged state sends nothing: {sent:#?}");
        assert_eq!(sent[0]["sessionUpdate"], "tool_call");
        // The protocol's default status, left out on the wire.
        assert!(matches!(
            sent[0].get("status").and_then(Value::as_str),
            None | Some("pending")
        ));
        assert_eq!(sent[0]["kind"], "read");
        assert_eq!(sent[0]["toolCallId"], "prt_1");
        assert_eq!(sent[1]["sessionUpdate"], "tool_call_update");
        assert_eq!(sent[1]["status"], "in_progress");
        assert_eq!(sent[1]["locations"], json!([{"path": "/work/p/src/a.rs"}]));
        assert_eq!(sent[1]["title"], "read src/a.rs");
        assert_eq!(sent[2]["status"], "completed");
        assert_eq!(
            sent[2]["content"],
            json!([{"type": "content", "content": {"type": "text", "text": "fn a() {}"}}])
        );
    }

    #[test]
    fn only_the_agents_text_is_streamed_and_each_byte_once() {
        let tools = Tools::new(Vec::new());
        let mut s = Stream::new(&tools, Path::new("/"));
        let text = |msg: &str, t: &str| Event::PartUpdated {
            part: Part {
                id: PartId(format!("prt_{msg}")),
                session_id: SessionId("ses_1".into()),
                message_id: MessageId(msg.into()),
                body: PartBody::Text {
                    text: t.into(),
                    synthetic: false,
                    time: None,
                    ignored: false,
                },
            },
            delta: None,
        };
        assert!(
            s.updates(&text("msg_user", "hello")).is_empty(),
            "the user's prompt is not echoed"
        );
        let info: MessageInfo = serde_json::from_value(json!({"role": "assistant", "id": "msg_b",
            "sessionID": "ses_1", "parentID": "msg_user", "agent": "build", "mode": "build",
            "providerID": "p", "modelID": "m", "path": {"cwd": "/", "root": "/"},
            "time": {"created": 1}}))
        .unwrap();
        assert!(s.updates(&Event::MessageUpdated { info }).is_empty());
        let chunks: Vec<Value> = ["Hel", "Hello, wo", "Hello, wo", "Hello, world"]
            .iter()
            .flat_map(|t| s.updates(&text("msg_b", t)))
            .map(|u| wire(&u))
            .collect();
        let said: Vec<&str> = chunks
            .iter()
            .map(|c| c["content"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(said, ["Hel", "lo, wo", "rld"]);
        assert!(
            chunks
                .iter()
                .all(|c| c["sessionUpdate"] == "agent_message_chunk" && c["messageId"] == "msg_b")
        );
    }

    #[test]
    fn a_compaction_summary_is_a_thought_live_and_in_replay() {
        let tools = Tools::new(Vec::new());
        let mut s = Stream::new(&tools, Path::new("/"));
        let info: MessageInfo = serde_json::from_value(json!({"role": "assistant", "id": "msg_s",
            "sessionID": "ses_1", "parentID": "msg_user", "agent": "compaction", "mode": "compaction",
            "providerID": "p", "modelID": "m", "path": {"cwd": "/", "root": "/"},
            "time": {"created": 1}, "summary": true}))
        .unwrap();
        let part = Part {
            id: PartId("prt_s".into()),
            session_id: SessionId("ses_1".into()),
            message_id: MessageId("msg_s".into()),
            body: PartBody::Text {
                text: "We read a.rs.".into(),
                synthetic: false,
                time: None,
                ignored: false,
            },
        };
        assert!(
            s.updates(&Event::MessageUpdated { info: info.clone() })
                .is_empty()
        );
        let live: Vec<Value> = s
            .updates(&Event::PartUpdated {
                part: part.clone(),
                delta: None,
            })
            .iter()
            .map(wire)
            .collect();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0]["sessionUpdate"], "agent_thought_chunk");
        assert_eq!(live[0]["content"]["text"], "We read a.rs.");
        let stored = MessageWithParts {
            info,
            parts: vec![part],
        };
        let replayed: Vec<Value> = replay(&[stored], &tools, Path::new("/"))
            .iter()
            .map(wire)
            .collect();
        assert_eq!(replayed, live, "a load shows it as it was shown live");
    }
}
