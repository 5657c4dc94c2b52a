//! Reading the ledger the way the loop needs it: the history after the last
//! compaction, the latest messages by id, and the conversation a model is
//! shown, with every tool call paired with a result.

use std::sync::Arc;

use warden_protocol::llm::{AssistantContent, ToolResultContent, UserContent};
use warden_protocol::{
    AssistantInfo, ChatMessage, MessageInfo, MessageWithParts, Part, PartBody, ToolState, UserInfo,
};

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
    // A compaction is complete when a finished summary answers its user message.
    let mut start = 0;
    for (i, m) in msgs.iter().map(AsRef::as_ref).enumerate() {
        let is_compaction = matches!(&m.info, MessageInfo::User(_))
            && m.parts
                .iter()
                .any(|p| matches!(p.body, PartBody::Compaction { .. }));
        if !is_compaction {
            continue;
        }
        let summarised = msgs[i + 1..].iter().any(|a| match &m.info {
            MessageInfo::User(u) => assistant(a.as_ref()).is_some_and(|a| {
                a.parent_id == u.id && a.summary && a.finish.is_some() && a.error.is_none()
            }),
            MessageInfo::Assistant(_) => false,
        });
        if summarised {
            start = i;
        }
    }
    let mut msgs = msgs;
    msgs.drain(..start);
    msgs
}

/// Convert the ledger to the conversation a provider is sent. Every tool call
/// is followed by its result: completed parts by their output, errors and
/// interrupted calls by an error result, so no call is left unpaired.
pub fn to_chat<M: AsRef<MessageWithParts>>(msgs: &[M]) -> Vec<Arc<ChatMessage>> {
    msgs.iter()
        .flat_map(|m| message_to_chat(m.as_ref()))
        .collect()
}

/// [`to_chat`] for the rounds of one loop: each message is converted once
/// per version. The ledger hands out a changed message as a new `Arc` and
/// an unchanged one as the same, so a round of a long session converts only
/// what its last step wrote.
#[derive(Default)]
pub struct ChatCache {
    /// The last round's messages, in id order, with their conversion. Holding
    /// each `Arc` keeps its address from being reused by another message.
    last: Vec<(Arc<MessageWithParts>, Vec<Arc<ChatMessage>>)>,
}

impl ChatCache {
    pub fn to_chat(&mut self, msgs: &[Arc<MessageWithParts>]) -> Vec<Arc<ChatMessage>> {
        let mut old = std::mem::take(&mut self.last).into_iter().peekable();
        let mut out = Vec::with_capacity(msgs.len() * 2);
        for m in msgs {
            let same = |(o, _): &(Arc<MessageWithParts>, _)| Arc::ptr_eq(o, m);
            let chat = match old.next_if(same) {
                Some((_, chat)) => chat,
                None => {
                    // Messages come in id order; skip the ones no longer shown.
                    while old.next_if(|(o, _)| o.info.id() < m.info.id()).is_some() {}
                    match old.next_if(same) {
                        Some((_, chat)) => chat,
                        None => message_to_chat(m),
                    }
                }
            };
            out.extend(chat.iter().cloned());
            self.last.push((m.clone(), chat));
        }
        out
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

    #[test]
    fn the_cache_converts_only_new_and_changed_messages() {
        let mut cache = ChatCache::default();
        let first: Vec<Arc<MessageWithParts>> = vec![
            Arc::new(user("msg_1")),
            Arc::new(assistant_msg("msg_2", "msg_1", vec![text("msg_2", "one")])),
            Arc::new(user("msg_3")),
        ];
        let round1 = cache.to_chat(&first);
        assert_eq!(round1, to_chat(&first));

        // msg_2 changed (a new Arc, as the ledger hands out), msg_4 is new,
        // msg_1 is no longer shown (a compaction).
        let second: Vec<Arc<MessageWithParts>> = vec![
            Arc::new(assistant_msg(
                "msg_2",
                "msg_1",
                vec![text("msg_2", "one"), text("msg_2", "two")],
            )),
            first[2].clone(),
            Arc::new(assistant_msg("msg_4", "msg_3", vec![text("msg_4", "four")])),
        ];
        let round2 = cache.to_chat(&second);
        assert_eq!(round2, to_chat(&second));
        // The unchanged message's conversion is the very same, not a copy.
        assert!(Arc::ptr_eq(&round2[1], &round1[2]));
        assert!(!Arc::ptr_eq(&round2[0], &round1[1]));

        // Shown again from the start (another process wrote meanwhile): all new.
        let third: Vec<Arc<MessageWithParts>> =
            second.iter().map(|m| Arc::new((**m).clone())).collect();
        let round3 = cache.to_chat(&third);
        assert_eq!(round3, round2);
        assert!(round3.iter().zip(&round2).all(|(a, b)| !Arc::ptr_eq(a, b)));
    }
}
