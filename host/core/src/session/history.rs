//! Reading the ledger the way the loop needs it: the history after the last
//! compaction, the latest messages by id, and the conversation a model is
//! shown, with every tool call paired with a result.

use std::sync::Arc;

use warden_protocol::llm::{AssistantContent, Conversation, ToolResultContent, UserContent};
use warden_protocol::{
    AssistantInfo, ChatMessage, MessageId, MessageInfo, MessageWithParts, Part, PartBody,
    ToolState, UserInfo,
};

use crate::ledger::History;

/// The latest user, assistant and finished assistant messages, by id.
#[derive(Debug, Default)]
pub struct Latest<'a> {
    pub user: Option<&'a UserInfo>,
    pub assistant: Option<&'a MessageWithParts>,
    pub finished: Option<&'a AssistantInfo>,
}

/// Find the latest messages by id, never by position: compaction reorders
/// what the model sees, so the array order is not the time order.
pub fn latest<M: AsRef<MessageWithParts>>(msgs: &[M]) -> Latest<'_> {
    let mut l = Latest::default();
    for m in msgs.iter().map(AsRef::as_ref) {
        match &m.info {
            MessageInfo::User(u) => {
                if l.user.is_none_or(|x| x.id < u.id) {
                    l.user = Some(u);
                }
            }
            MessageInfo::Assistant(a) => {
                if l.assistant.is_none_or(|x| x.info.id() < &a.id) {
                    l.assistant = Some(m);
                }
                if a.finish.is_some() && l.finished.is_none_or(|x| x.id < a.id) {
                    l.finished = Some(a);
                }
            }
        }
    }
    l
}

/// The assistant header of a message, if it is one.
pub fn assistant(m: &MessageWithParts) -> Option<&AssistantInfo> {
    match &m.info {
        MessageInfo::Assistant(a) => Some(a),
        MessageInfo::User(_) => None,
    }
}

/// A tool part that cleanup ended (stream cut, abort, crash).
pub fn is_interrupted_orphan(p: &Part) -> bool {
    matches!(&p.body, PartBody::Tool { state, .. } if state.is_interrupted())
}

/// Tool calls whose results the model has not seen yet: tool parts run by
/// warden (not the provider), leaving out interrupted orphans.
pub fn has_open_tool_calls(m: &MessageWithParts) -> bool {
    m.parts.iter().any(|p| {
        matches!(
            &p.body,
            PartBody::Tool {
                provider_executed: false,
                ignored: false,
                ..
            }
        ) && !is_interrupted_orphan(p)
    })
}

/// The history the model may see: everything from the last completed
/// compaction on (the compaction's user message and its summary included).
pub fn since_compaction<M: AsRef<MessageWithParts>>(msgs: Vec<M>) -> Vec<M> {
    let start = compaction_start(&msgs).map_or(0, |(start, _)| start);
    let mut msgs = msgs;
    msgs.drain(..start);
    msgs
}

/// Whether `m` is a user message asking for a compaction.
fn is_compaction(m: &MessageWithParts) -> bool {
    matches!(&m.info, MessageInfo::User(_))
        && m.parts
            .iter()
            .any(|p| matches!(p.body, PartBody::Compaction { .. }))
}

/// Whether `m` is a finished summary, and of which message.
fn summary_of(m: &MessageWithParts) -> Option<&MessageId> {
    assistant(m)
        .filter(|a| a.summary && a.finish.is_some() && a.error.is_none())
        .map(|a| &a.parent_id)
}

/// The last completed compaction: the index of its user message and of the
/// summary that answers it.
fn compaction_start<M: AsRef<MessageWithParts>>(msgs: &[M]) -> Option<(usize, usize)> {
    // A compaction is complete when a finished summary answers its user message.
    let mut found = None;
    for (i, m) in msgs.iter().map(AsRef::as_ref).enumerate() {
        if !is_compaction(m) {
            continue;
        }
        let summary = msgs[i + 1..]
            .iter()
            .position(|a| summary_of(a.as_ref()) == Some(m.info.id()));
        if let Some(s) = summary {
            found = Some((i, i + 1 + s));
        }
    }
    found
}

/// Convert the ledger to the conversation a provider is sent. Every tool call
/// is followed by its result: completed parts by their output, errors and
/// interrupted calls by an error result, so no call is left unpaired.
pub fn to_chat<M: AsRef<MessageWithParts>>(msgs: &[M]) -> Vec<Arc<ChatMessage>> {
    msgs.iter()
        .flat_map(|m| message_to_chat(m.as_ref()))
        .collect()
}

/// What the rounds of one loop read of their session, kept from round to
/// round and brought up to date from what changed: the history, where the
/// model's view of it starts (the last completed compaction), the latest
/// messages, and the conversation a provider is sent. While this process
/// holds the session's lease a round touches only the messages its last
/// step wrote, so its cost does not grow with the session's length; a
/// compaction, or a history read whole, starts the view again.
#[derive(Default)]
pub struct Rounds {
    history: History,
    /// The index of the first message shown, and of the summary that made
    /// it so (none: the history has no completed compaction).
    start: usize,
    start_by: Option<usize>,
    /// The latest user, assistant and finished assistant messages at or
    /// after `start` (indexes into the history).
    user: Option<usize>,
    assistant: Option<usize>,
    finished: Option<usize>,
    /// `assistants[i]`: how many of the first `i` messages are the
    /// assistant's; one more entry than there are messages.
    assistants: Vec<usize>,
    /// The conversation of the shown messages, and for each shown message
    /// the conversation's length up to and including it.
    conversation: Conversation,
    ends: Vec<usize>,
}

impl Rounds {
    /// The history to bring up to date (see [`Ledger::refresh`]); then
    /// call [`Rounds::update`].
    ///
    /// [`Ledger::refresh`]: crate::ledger::Ledger::refresh
    pub fn history_mut(&mut self) -> &mut History {
        &mut self.history
    }

    /// Catch up with the history's changes since the last update.
    pub fn update(&mut self) {
        let msgs = &self.history.messages;
        // What this update knew of stays only as far as it knew it.
        let changed = self
            .history
            .changed_from
            .min(msgs.len())
            .min(self.assistants.len().saturating_sub(1));
        let whole =
            changed == 0 || self.start >= changed || self.start_by.is_some_and(|s| s >= changed);
        let (start, start_by) = if whole {
            compaction_start(msgs).map_or((0, None), |(c, s)| (c, Some(s)))
        } else {
            let mut found = (self.start, self.start_by);
            for (i, m) in msgs.iter().enumerate().skip(changed) {
                let Some(parent) = summary_of(m) else {
                    continue;
                };
                if let Ok(c) = msgs[..i].binary_search_by(|m| m.info.id().cmp(parent))
                    && c > found.0
                    && is_compaction(&msgs[c])
                {
                    found = (c, Some(i));
                }
            }
            found
        };
        let restart = whole || start != self.start;
        self.start = start;
        self.start_by = start_by;
        // What is kept from the last update: the messages before `keep`.
        let keep = if restart { start } else { changed };

        let is_user = |m: &MessageWithParts| matches!(m.info, MessageInfo::User(_));
        let is_assistant = |m: &MessageWithParts| assistant(m).is_some();
        let is_finished = |m: &MessageWithParts| assistant(m).is_some_and(|a| a.finish.is_some());
        let last = |previous: Option<usize>, which: &dyn Fn(&MessageWithParts) -> bool| {
            let found = (keep..msgs.len()).rev().find(|&i| which(&msgs[i]));
            found.or(match previous {
                // Unchanged, and still the last before what changed.
                Some(p) if !restart && p < keep => Some(p),
                None if !restart => None,
                _ => (start..keep).rev().find(|&i| which(&msgs[i])),
            })
        };
        self.user = last(self.user, &is_user);
        self.assistant = last(self.assistant, &is_assistant);
        self.finished = last(self.finished, &is_finished);

        self.assistants.truncate(changed + 1);
        if self.assistants.is_empty() {
            self.assistants.push(0);
        }
        for m in &msgs[changed..] {
            let before = self.assistants.last().copied().unwrap_or(0);
            self.assistants.push(before + usize::from(is_assistant(m)));
        }

        if restart {
            // Not a copy of what an earlier request still holds.
            self.conversation = Conversation::default();
        }
        self.ends.truncate(keep - start);
        let chat = self.conversation.make_mut();
        chat.truncate(self.ends.last().copied().unwrap_or(0));
        for m in &msgs[keep..] {
            chat.extend(message_to_chat(m));
            self.ends.push(chat.len());
        }
    }

    /// The messages the model may see: from the last completed compaction on.
    pub fn shown(&self) -> &[Arc<MessageWithParts>] {
        &self.history.messages[self.start..]
    }

    /// The latest messages of [`Rounds::shown`] (as [`latest`] finds them).
    pub fn latest(&self) -> Latest<'_> {
        let msgs = &self.history.messages;
        Latest {
            user: self.user.and_then(|i| match &msgs[i].info {
                MessageInfo::User(u) => Some(u),
                MessageInfo::Assistant(_) => None,
            }),
            assistant: self.assistant.map(|i| &*msgs[i]),
            finished: self.finished.and_then(|i| assistant(&msgs[i])),
        }
    }

    /// How many assistant messages came after the latest user message.
    pub fn steps_since_user(&self) -> usize {
        let after = self.user.map_or(self.start, |u| u + 1);
        self.assistants[self.history.messages.len()] - self.assistants[after]
    }

    /// The conversation of the shown messages, shared (see [`to_chat`]).
    pub fn conversation(&self) -> Conversation {
        self.conversation.clone()
    }
}

/// One message's part of the conversation: a user message, or an assistant
/// message followed by the results of its tool calls.
fn message_to_chat(m: &MessageWithParts) -> Vec<Arc<ChatMessage>> {
    let mut out = Vec::new();
    match &m.info {
        MessageInfo::User(_) => {
            let content: Vec<UserContent> = m
                .parts
                .iter()
                .filter_map(|p| match &p.body {
                    PartBody::Text { text, .. } if !text.is_empty() => {
                        Some(UserContent::Text { text: text.clone() })
                    }
                    PartBody::Compaction { .. } => Some(UserContent::Text {
                        text: "What did we do so far?".into(),
                    }),
                    _ => None,
                })
                .collect();
            if !content.is_empty() {
                out.push(Arc::new(ChatMessage::User { content }));
            }
        }
        MessageInfo::Assistant(_) => {
            let mut content = Vec::new();
            let mut results = Vec::new();
            for p in &m.parts {
                match &p.body {
                    PartBody::Text {
                        text,
                        ignored: false,
                        ..
                    } if !text.is_empty() => {
                        content.push(AssistantContent::Text { text: text.clone() })
                    }
                    PartBody::Reasoning {
                        text,
                        metadata,
                        ignored: false,
                        ..
                    } if !text.is_empty() || metadata.is_some() => {
                        content.push(AssistantContent::Reasoning {
                            text: text.clone(),
                            metadata: metadata.clone(),
                        })
                    }
                    PartBody::Tool {
                        call_id,
                        tool,
                        state,
                        provider_executed: false,
                        ignored: false,
                    } => {
                        content.push(AssistantContent::ToolCall {
                            call_id: call_id.clone(),
                            name: tool.clone(),
                            input: state.input().clone(),
                        });
                        results.push(result_of(call_id, tool, state));
                    }
                    _ => {}
                }
            }
            if !content.is_empty() {
                out.push(Arc::new(ChatMessage::Assistant { content }));
            }
            if !results.is_empty() {
                out.push(Arc::new(ChatMessage::Tool { content: results }));
            }
        }
    }
    out
}

fn result_of(call_id: &str, tool: &str, state: &ToolState) -> ToolResultContent {
    let (output, is_error) = match state {
        ToolState::Completed { output, .. } => (output.clone(), false),
        ToolState::Error {
            error,
            interrupted: true,
            ..
        } => (
            format!("The tool call was interrupted before it finished: {error}"),
            true,
        ),
        ToolState::Error { error, .. } => (format!("Error: {error}"), true),
        ToolState::Pending { .. } | ToolState::Running { .. } => (
            "The tool call was interrupted before it finished.".to_string(),
            true,
        ),
    };
    ToolResultContent {
        call_id: call_id.to_string(),
        name: tool.to_string(),
        output,
        is_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_protocol::{MessageId, MessagePath, MessageTime, ModelRef, SessionId};

    fn user(id: &str) -> MessageWithParts {
        MessageWithParts {
            info: MessageInfo::User(UserInfo {
                id: MessageId(id.into()),
                session_id: SessionId("s".into()),
                time: MessageTime::at(0),
                agent: "build".into(),
                model: ModelRef {
                    provider: "scripted".into(),
                    model: "x".into(),
                },
            }),
            parts: vec![text(id, "hello")],
        }
    }

    fn text(msg: &str, t: &str) -> Part {
        Part {
            id: format!("prt_{msg}_{t}").into(),
            session_id: "s".into(),
            message_id: msg.into(),
            body: PartBody::Text {
                text: t.into(),
                synthetic: false,
                time: None,
                ignored: false,
            },
        }
    }

    fn assistant_msg(id: &str, parent: &str, parts: Vec<Part>) -> MessageWithParts {
        MessageWithParts {
            info: MessageInfo::Assistant(AssistantInfo {
                id: MessageId(id.into()),
                session_id: SessionId("s".into()),
                parent_id: MessageId(parent.into()),
                agent: "build".into(),
                mode: "build".into(),
                model: ModelRef {
                    provider: "scripted".into(),
                    model: "x".into(),
                },
                path: MessagePath::of("/w"),
                time: MessageTime {
                    created: 0,
                    completed: Some(1),
                },
                finish: Some(warden_protocol::FinishReason::Stop),
                tokens: Default::default(),
                cost: 0.0,
                error: None,
                summary: false,
            }),
            parts,
        }
    }

    fn tool(msg: &str, call: &str, state: ToolState) -> Part {
        Part {
            id: format!("prt_{msg}_{call}").into(),
            session_id: "s".into(),
            message_id: msg.into(),
            body: PartBody::Tool {
                call_id: call.into(),
                tool: "read".into(),
                state,
                provider_executed: false,
                ignored: false,
            },
        }
    }

    #[test]
    fn latest_is_by_id_not_position() {
        let msgs = vec![
            user("msg_3"),
            assistant_msg("msg_2", "msg_1", vec![]),
            user("msg_1"),
        ];
        let l = latest(&msgs);
        assert_eq!(l.user.unwrap().id.as_str(), "msg_3");
        assert_eq!(l.assistant.unwrap().info.id().as_str(), "msg_2");
        assert_eq!(l.finished.unwrap().id.as_str(), "msg_2");
    }

    #[test]
    fn every_call_is_paired_with_a_result() {
        let running = ToolState::pending()
            .start(json!({"filePath": "a"}), 1)
            .unwrap();
        let done = running
            .complete(
                json!({"filePath": "a"}),
                "1\tx".into(),
                "a".into(),
                json!({}),
                2,
            )
            .unwrap();
        let failed = running.fail("no such file".into(), None, 2).unwrap();
        let cut = running.interrupt("the process stopped", 3).unwrap();
        let msgs = vec![
            user("msg_1"),
            assistant_msg(
                "msg_2",
                "msg_1",
                vec![
                    tool("msg_2", "c1", done),
                    tool("msg_2", "c2", failed),
                    tool("msg_2", "c3", cut),
                    tool("msg_2", "c4", running),
                ],
            ),
        ];
        let chat = to_chat(&msgs);
        assert_eq!(chat.len(), 3);
        let ChatMessage::Tool { content } = &*chat[2] else {
            panic!("{chat:?}")
        };
        let summary: Vec<(&str, bool, &str)> = content
            .iter()
            .map(|r| (r.call_id.as_str(), r.is_error, r.output.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("c1", false, "1\tx"),
                ("c2", true, "Error: no such file"),
                (
                    "c3",
                    true,
                    "The tool call was interrupted before it finished: the process stopped"
                ),
                (
                    "c4",
                    true,
                    "The tool call was interrupted before it finished."
                ),
            ]
        );
    }

    #[test]
    fn open_calls_ignore_interrupted_orphans() {
        let cut = ToolState::pending().interrupt("stream ended", 1).unwrap();
        let m = assistant_msg("msg_2", "msg_1", vec![tool("msg_2", "c1", cut)]);
        assert!(!has_open_tool_calls(&m));
        let done = ToolState::pending()
            .start(json!({}), 1)
            .unwrap()
            .complete(json!({}), "x".into(), String::new(), json!({}), 2)
            .unwrap();
        let m = assistant_msg("msg_2", "msg_1", vec![tool("msg_2", "c1", done)]);
        assert!(has_open_tool_calls(&m));
    }

    #[test]
    fn empty_assistant_messages_are_not_sent() {
        let msgs = vec![user("msg_1"), assistant_msg("msg_2", "msg_1", vec![])];
        assert_eq!(to_chat(&msgs).len(), 1);
    }

    /// A step's assistant message: `finished` or still streaming.
    fn step(id: &str, parent: &str, finished: bool, summary: bool) -> MessageWithParts {
        let mut m = assistant_msg(id, parent, vec![text(id, id)]);
        if let MessageInfo::Assistant(a) = &mut m.info {
            a.summary = summary;
            if !finished {
                a.finish = None;
                a.time.completed = None;
            }
        }
        m
    }

    fn compaction(id: &str) -> MessageWithParts {
        let mut m = user(id);
        m.parts = vec![Part {
            id: format!("prt_{id}_c").into(),
            session_id: "s".into(),
            message_id: id.into(),
            body: PartBody::Compaction {
                auto: true,
                overflow: false,
            },
        }];
        m
    }

    /// What a round computed from scratch shows, against what `rounds`
    /// brought up to date shows.
    fn same_as_from_scratch(rounds: &Rounds, all: &[Arc<MessageWithParts>]) {
        let shown = since_compaction(all.to_vec());
        assert_eq!(rounds.shown().len(), shown.len());
        assert!(
            rounds
                .shown()
                .iter()
                .zip(&shown)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );
        let (want, got) = (latest(&shown), rounds.latest());
        assert_eq!(want.user.map(|u| &u.id), got.user.map(|u| &u.id));
        assert_eq!(
            want.assistant.map(|m| m.info.id()),
            got.assistant.map(|m| m.info.id())
        );
        assert_eq!(want.finished.map(|a| &a.id), got.finished.map(|a| &a.id));
        let steps = want.user.map_or(0, |u| {
            shown
                .iter()
                .filter_map(|m| assistant(m))
                .filter(|a| a.id > u.id)
                .count()
        });
        assert_eq!(rounds.steps_since_user(), steps);
        assert_eq!(*rounds.conversation(), to_chat(&shown));
    }

    /// Each change as the ledger reports it: the new history and the index
    /// of the first message it replaced.
    fn apply(rounds: &mut Rounds, all: &[Arc<MessageWithParts>], changed_from: usize) {
        let h = rounds.history_mut();
        h.messages = all.to_vec();
        h.changed_from = changed_from;
        rounds.update();
        same_as_from_scratch(rounds, all);
    }

    #[test]
    fn rounds_brought_up_to_date_show_what_a_round_from_scratch_shows() {
        let mut r = Rounds::default();
        let mut all: Vec<Arc<MessageWithParts>> = vec![Arc::new(user("msg_01"))];
        apply(&mut r, &all, 0);
        // Steps: each first streaming, then finished.
        for n in 2..6 {
            let id = format!("msg_{n:02}");
            all.push(Arc::new(step(&id, "msg_01", false, false)));
            apply(&mut r, &all, all.len() - 1);
            *all.last_mut().unwrap() = Arc::new(step(&id, "msg_01", true, false));
            apply(&mut r, &all, all.len() - 1);
        }
        // A second prompt, then a compaction and its summary, written as
        // it streams and then finished.
        all.push(Arc::new(user("msg_06")));
        apply(&mut r, &all, 6 - 1);
        all.push(Arc::new(compaction("msg_07")));
        apply(&mut r, &all, 6);
        all.push(Arc::new(step("msg_08", "msg_07", false, true)));
        apply(&mut r, &all, 7);
        assert_eq!(r.shown().len(), 8, "not complete yet: everything shown");
        *all.last_mut().unwrap() = Arc::new(step("msg_08", "msg_07", true, true));
        apply(&mut r, &all, 7);
        assert_eq!(r.shown().len(), 2, "shown from the compaction on");
        for n in 9..12 {
            let id = format!("msg_{n:02}");
            all.push(Arc::new(step(&id, "msg_07", true, false)));
            apply(&mut r, &all, all.len() - 1);
        }
        // An old message changed (before the compaction), one after it,
        // and a message inserted between two others.
        all[2] = Arc::new(step("msg_03", "msg_01", true, false));
        apply(&mut r, &all, 2);
        all[9] = Arc::new(step("msg_10", "msg_07", false, false));
        apply(&mut r, &all, 9);
        all.insert(10, Arc::new(user("msg_10a")));
        apply(&mut r, &all, 10);
        // A second compaction, then the history read whole.
        all.push(Arc::new(compaction("msg_12")));
        all.push(Arc::new(step("msg_13", "msg_12", true, true)));
        apply(&mut r, &all, all.len() - 2);
        assert_eq!(r.shown().len(), 2);
        let copy: Vec<_> = all.iter().map(|m| Arc::new((**m).clone())).collect();
        apply(&mut r, &copy, 0);
    }

    /// The conversation grows in place while no request holds it, and a
    /// request's copy stays as it was sent.
    #[test]
    fn the_conversation_is_extended_not_rebuilt() {
        let mut r = Rounds::default();
        let mut all: Vec<Arc<MessageWithParts>> = vec![Arc::new(user("msg_01"))];
        apply(&mut r, &all, 0);
        let at = |r: &Rounds| std::ptr::from_ref::<Vec<_>>(&r.conversation);
        let first = at(&r);
        let kept = r.conversation()[0].clone();
        all.push(Arc::new(step("msg_02", "msg_01", true, false)));
        apply(&mut r, &all, 1);
        assert_eq!(at(&r), first, "extended in place");
        assert!(
            Arc::ptr_eq(&r.conversation()[0], &kept),
            "not converted again"
        );

        let sent = r.conversation();
        all.push(Arc::new(step("msg_03", "msg_01", true, false)));
        apply(&mut r, &all, 2);
        assert_eq!(
            sent.len(),
            2,
            "the request's conversation is as it was sent"
        );
        assert_eq!(r.conversation().len(), 3);
    }
}
