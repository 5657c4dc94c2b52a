//! The doom loop: the same tool with the same arguments, called
//! [`THRESHOLD`] times in a row in one prompt's run, is put to the gate as
//! the `doom_loop` permission before anything else of the call.

use std::sync::Arc;

use serde_json::{Value, json};
use warden_protocol::{MessageWithParts, Part, PartBody, ToolState};

use super::Call;
use super::audit::{Outcome, Stage};
use super::failure::CallFailure;
use super::gate::{self, Metadata, Question, Verdict};
use crate::session::history::assistant;

/// The last this many tool calls identical → ask `doom_loop`.
pub const THRESHOLD: usize = 3;
/// A model refused `doom_loop` by a rule that still repeats the call this
/// many times in a row is stuck: the loop stops.
pub const GIVE_UP: usize = 2 * THRESHOLD;

/// How many calls in a row, ending with this one, in this run (across
/// this prompt's assistant messages) are the same tool with the same
/// arguments. Read from the end back, and only as far as the calls match:
/// its cost is the run of repeats, not the session's length. (`history` is
/// in id order, as the ledger keeps it, so this prompt's messages are its
/// end.)
pub(crate) fn repeats(
    history: &[Arc<MessageWithParts>],
    user_id: &warden_protocol::MessageId,
    this_step: &[Part],
    name: &str,
    input: &Value,
) -> usize {
    let earlier = history
        .iter()
        .rev()
        .take_while(|m| m.info.id() > user_id)
        .filter(|m| assistant(m.as_ref()).is_some())
        .flat_map(|m| m.parts.iter().rev());
    this_step
        .iter()
        .rev()
        .chain(earlier)
        .filter(|p| matches!(p.body, PartBody::Tool { ignored: false, .. }))
        .take_while(|p| match &p.body {
            PartBody::Tool { tool, state, .. } => {
                tool == name
                    && !matches!(state, ToolState::Pending { .. })
                    && state.input() == input
            }
            _ => false,
        })
        .count()
}

/// The doom-loop stage, first of a repeated call's stages: the `doom_loop`
/// question is settled by the call's own gate, so its audit rows are the
/// call's (written with its terminal state, one transaction) and a question
/// waits in the call's task, never in the turn's stream loop.
pub(super) async fn check(call: &Call<'_>, input: &Value) -> Result<(), CallFailure> {
    let name = &call.req.tool.id;
    let refused = || CallFailure::DoomLoop {
        tool: name.clone(),
        times: THRESHOLD,
    };
    let eval = match call
        .req
        .rules
        .evaluate(&call.env.ledger, "doom_loop", std::slice::from_ref(name))
        .await
    {
        Ok(eval) => eval,
        Err(e) => {
            tracing::warn!("the session's rules could not be read for the doom-loop guard: {e}");
            return Err(refused());
        }
    };
    let question = Question {
        permission: "doom_loop".into(),
        patterns: vec![name.clone()],
        metadata: Metadata::new(|| json!({"tool": name, "input": input})),
        stage: Stage::Permission,
        subject: "doom_loop".into(),
        plugin_hash: None,
        asked_as: "doom_loop".into(),
        on_deny: Outcome::Refused,
        // A rule's answer is the config's: only a question is audited.
        quiet: true,
    };
    match gate::decide(&call.gate(), question, eval).await {
        Verdict::Allowed => Ok(()),
        Verdict::Denied { .. } | Verdict::Rejected { .. } => Err(refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::{
        AssistantInfo, MessageId, MessageInfo, MessagePath, MessageTime, ModelRef, SessionId,
        UserInfo,
    };

    fn message(id: &str, user: bool, parts: Vec<Part>) -> Arc<MessageWithParts> {
        let model = ModelRef {
            provider: "scripted".into(),
            model: "x".into(),
        };
        let info = if user {
            MessageInfo::User(UserInfo {
                id: MessageId(id.into()),
                session_id: SessionId("s".into()),
                time: MessageTime::at(0),
                agent: "build".into(),
                model,
            })
        } else {
            MessageInfo::Assistant(AssistantInfo {
                id: MessageId(id.into()),
                session_id: SessionId("s".into()),
                parent_id: MessageId("msg_0".into()),
                agent: "build".into(),
                mode: "build".into(),
                model,
                path: MessagePath::of("/w"),
                time: MessageTime {
                    created: 0,
                    completed: Some(1),
                },
                finish: None,
                tokens: Default::default(),
                cost: 0.0,
                error: None,
                summary: false,
            })
        };
        Arc::new(MessageWithParts { info, parts })
    }

    fn call(msg: &str, n: usize, path: &str, ignored: bool) -> Part {
        Part {
            id: format!("prt_{msg}_{n}").into(),
            session_id: "s".into(),
            message_id: msg.into(),
            body: PartBody::Tool {
                call_id: format!("c{n}"),
                tool: "read".into(),
                state: ToolState::Running {
                    input: json!({"path": path}),
                    title: None,
                    metadata: None,
                    time: warden_protocol::tool_state::StartTime { start: 0 },
                },
                provider_executed: false,
                ignored,
            },
        }
    }

    #[test]
    fn repeats_count_back_through_this_prompt_s_messages_only() {
        let same = json!({"path": "a"});
        // An earlier prompt's run, long, all the same call: none of it counts.
        let mut history: Vec<Arc<MessageWithParts>> = (0..10_000)
            .map(|i| {
                message(
                    &format!("msg_{i:06}"),
                    false,
                    vec![call("old", i, "a", false)],
                )
            })
            .collect();
        history.push(message("msg_100000", true, vec![]));
        history.push(message(
            "msg_100001",
            false,
            vec![call("m1", 1, "b", false)],
        ));
        history.push(message(
            "msg_100002",
            false,
            vec![call("m2", 2, "a", false), call("m2", 3, "a", true)],
        ));
        let user = MessageId("msg_100000".into());
        let this_step = [call("m3", 4, "a", false)];
        // m3's call and m2's first (the ignored retry is skipped); m1's differs.
        assert_eq!(repeats(&history, &user, &this_step, "read", &same), 2);
        assert_eq!(repeats(&history, &user, &this_step, "write", &same), 0);
        // The prompt's own run is all that is read: with no earlier message
        // of this run, only this step counts.
        let user = MessageId("msg_100003".into());
        assert_eq!(repeats(&history, &user, &this_step, "read", &same), 1);
    }
}
