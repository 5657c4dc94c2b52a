//! Compaction: when the conversation no longer fits the model's context
//! window, the loop queues a compaction (a user message holding a
//! `compaction` part), asks the model for a summary of everything before it,
//! and writes the answer as a summary assistant message. Later rounds
//! rebuild history from the last completed compaction on
//! ([`history::since_compaction`]), so the tool outputs of summarised turns
//! are never sent again.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use warden_protocol::llm::UserContent;
use warden_protocol::{
    AssistantInfo, ChatMessage, Event, LlmRequest, MessageError, MessageId, MessageInfo,
    MessagePath, MessageTime, MessageWithParts, Part, PartBody, SessionId, SessionInfo, Tokens,
    UserInfo,
};

use super::CoreInner;
use super::history;
use super::turn::{Outcome, Step, Turn};
use crate::clock::now_ms;
use crate::error::Result;
use crate::ledger::{PartWrite, id};
use warden_llm::ModelInfo;

/// The system prompt of a summary request.
pub const SUMMARY_SYSTEM: &str = "You summarise a conversation between a user and a coding agent so that \
the agent can continue the work with only your summary. Keep what matters for going on: the user's goal and \
constraints, what was done (files read or changed, commands and their results), decisions and why, open \
problems, and the next steps. Be specific (paths, names, values); leave out pleasantries.";

/// The request that closes a summary request.
pub const SUMMARY_PROMPT: &str =
    "Summarise our conversation so far as described, for continuing it.";

/// Written after an automatic compaction, so the loop goes on with the task.
pub const CONTINUE: &str =
    "Continue with the task from where the summary leaves off. If it is already done, say so.";

/// Whether `tokens` no longer leave room for an answer in the model's window.
pub fn is_overflow(tokens: &Tokens, model: &ModelInfo) -> bool {
    match model.context_limit {
        Some(limit) => {
            tokens.total() > limit.saturating_sub(model.output_limit.unwrap_or(0) as u64)
        }
        None => false,
    }
}

/// The compaction request the latest user message carries, if it has not
/// been answered by a summary yet.
pub fn pending<'a, M: AsRef<MessageWithParts>>(
    msgs: &'a [M],
    user: &UserInfo,
) -> Option<&'a MessageWithParts> {
    // Messages are in id order, and what answers `user` comes after it: a
    // long session's round looks at the user message, not at every message.
    let at = msgs
        .binary_search_by(|m| m.as_ref().info.id().cmp(&user.id))
        .ok()?;
    let m = msgs[at].as_ref();
    let is_request = m
        .parts
        .iter()
        .any(|p| matches!(p.body, PartBody::Compaction { .. }));
    if !is_request {
        return None;
    }
    let answered = msgs[at + 1..]
        .iter()
        .filter_map(|m| history::assistant(m.as_ref()))
        .any(|a| a.parent_id == user.id && a.summary && a.time.completed.is_some());
    (!answered).then_some(m)
}

/// Queue a compaction: a user message (same agent and model as `user`)
/// holding a compaction part.
pub(crate) async fn queue(
    core: &CoreInner,
    session_id: &SessionId,
    user: &UserInfo,
    overflow: bool,
) -> Result<()> {
    let info = MessageInfo::User(UserInfo {
        id: MessageId(id::ascending(MessageId::PREFIX)),
        session_id: session_id.clone(),
        time: MessageTime::at(now_ms()),
        agent: user.agent.clone(),
        model: user.model.clone(),
    });
    core.ledger.put_message(&info).await?;
    let part = Part {
        id: id::ascending("prt").into(),
        session_id: session_id.clone(),
        message_id: info.id().clone(),
        body: PartBody::Compaction {
            auto: true,
            overflow,
        },
    };
    core.ledger.put_part(&part, PartWrite::Changed).await?;
    Ok(())
}

/// Ask the model for the summary that answers `request` (a queued
/// compaction), then, for an automatic one, ask it to go on.
pub(crate) async fn process(
    core: &CoreInner,
    session: &SessionInfo,
    msgs: &[Arc<MessageWithParts>],
    request: &MessageWithParts,
    cancel: &CancellationToken,
) -> Result<Outcome> {
    let MessageInfo::User(user) = &request.info else {
        return Ok(Outcome::Stop);
    };
    let auto = request
        .parts
        .iter()
        .any(|p| matches!(p.body, PartBody::Compaction { auto: true, .. }));
    let agent = core.agents.get(&user.agent)?;
    let model = core.models.resolve(&user.model)?;
    let before: Vec<Arc<MessageWithParts>> = msgs
        .iter()
        .filter(|m| m.info.id() < &user.id)
        .cloned()
        .collect();
    let mut messages = history::to_chat(&before);
    messages.push(Arc::new(ChatMessage::User {
        content: vec![UserContent::Text {
            text: SUMMARY_PROMPT.into(),
        }],
    }));
    let info = AssistantInfo {
        id: MessageId(id::ascending(MessageId::PREFIX)),
        session_id: session.id.clone(),
        parent_id: user.id.clone(),
        agent: agent.name.clone(),
        mode: agent.name.clone(),
        model: user.model.clone(),
        path: MessagePath::of(&session.directory),
        time: MessageTime {
            created: now_ms(),
            completed: None,
        },
        finish: None,
        tokens: Default::default(),
        cost: 0.0,
        error: None,
        summary: true,
    };
    core.ledger
        .put_message(&MessageInfo::Assistant(info.clone()))
        .await?;
    let llm_request = LlmRequest {
        model: model.info.reference.model.clone(),
        system: vec![SUMMARY_SYSTEM.to_string()],
        messages: messages.into(),
        tools: Vec::new(),
        max_output_tokens: model.info.output_limit,
    };
    let step = Step {
        session,
        agent,
        model: &model,
        info: info.clone(),
        history: &before,
        tools: Vec::new(),
    };
    let outcome = Turn::new(core, step, cancel.clone())
        .process(llm_request)
        .await?;

    let summary = core
        .ledger
        .message(&session.id, &info.id)
        .await?
        .and_then(|m| history::assistant(&m).cloned());
    let ok = outcome != Outcome::Stop && summary.as_ref().is_some_and(|a| a.error.is_none());
    if !ok {
        if let Some(mut a) = summary
            && a.error.is_none()
        {
            a.error = Some(MessageError::ContextOverflow {
                message: "the summary itself did not fit the model's context window".into(),
            });
            core.ledger.put_message(&MessageInfo::Assistant(a)).await?;
        }
        core.ledger.bus().publish(Event::SessionWarning {
            session_id: session.id.clone(),
            message: "compaction failed: the conversation could not be summarised; start a new session or use a model with a larger context".into(),
        });
        return Ok(Outcome::Stop);
    }
    if auto {
        let next = MessageInfo::User(UserInfo {
            id: MessageId(id::ascending(MessageId::PREFIX)),
            session_id: session.id.clone(),
            time: MessageTime::at(now_ms()),
            agent: user.agent.clone(),
            model: user.model.clone(),
        });
        core.ledger.put_message(&next).await?;
        let part = Part {
            id: id::ascending("prt").into(),
            session_id: session.id.clone(),
            message_id: next.id().clone(),
            body: PartBody::Text {
                text: CONTINUE.into(),
                synthetic: true,
                time: None,
                ignored: false,
            },
        };
        core.ledger.put_part(&part, PartWrite::Changed).await?;
    }
    Ok(Outcome::Continue)
}
