//! `run_loop`: each round re-reads the ledger, decides whether the session
//! is done, and if not asks the model once more through a [`turn`](super::turn).
//!
//! The exit rule: the latest assistant message is finished, newer than the
//! latest user message, its finish reason is not `tool-calls`, and it holds
//! no tool call whose result the model has not seen. A provider that says
//! `stop` while it called a tool does not end the loop. Tool calls that
//! cleanup interrupted are reported as a warning on exit, never used as the
//! reason for another round.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use warden_protocol::llm::AssistantContent;
use warden_protocol::{
    AssistantInfo, ChatMessage, Event, FinishReason, LlmRequest, MessageError, MessageId,
    MessageInfo, MessagePath, MessageTime, MessageWithParts, PartBody, SessionId, SessionInfo,
    SessionStatus, ToolSpec, ToolState,
};

use super::history::{self, assistant};
use super::turn::{Calls, Outcome, Step, Turn};
use super::{CoreInner, compaction, system};
use crate::agent::Agent;
use crate::clock::now_ms;
use crate::error::{CoreError, Result};
use crate::ledger::id;
use crate::tool::ToolDef;

/// Said of tool calls found open when a run starts: their process died.
const STALE: &str = "the step running this call stopped before it finished (its process stopped, or the ledger could not be written)";

/// Run the session until the exit rule holds, the turn says stop, or
/// the run is cancelled. Returns the last assistant message.
pub(crate) async fn run(
    core: &CoreInner,
    session_id: &SessionId,
    cancel: &CancellationToken,
) -> Result<MessageWithParts> {
    // A run taken over (or resumed) is kept for late subscribers too.
    core.ledger.bus().record(session_id);
    recover_stale(core, session_id).await?;
    let mut rounds = history::Rounds::default();
    loop {
        if cancel.is_cancelled() {
            break;
        }
        // A runner that lost its lease starts no new step.
        core.ledger.check_fence(session_id).await?;
        core.status.set(session_id, SessionStatus::Busy);
        let session = core.ledger.session(session_id).await?;
        core.ledger
            .refresh(session_id, rounds.history_mut())
            .await?;
        rounds.update();
        let msgs = rounds.shown();
        let latest = rounds.latest();
        let Some(user) = latest.user.cloned() else {
            return Err(CoreError::NoUserMessage(session_id.clone()));
        };

        if let Some(last) = latest.assistant
            && let Some(info) = assistant(last)
            && info.finish.is_some_and(|f| f != FinishReason::ToolCalls)
            && !history::has_open_tool_calls(last)
            && user.id < info.id
        {
            warn_orphans(core, session_id, last);
            break;
        }

        if let Some(request) = compaction::pending(msgs, &user) {
            match compaction::process(core, &session, msgs, request, cancel).await? {
                Outcome::Stop => break,
                Outcome::Continue | Outcome::Compact => continue,
            }
        }

        let agent = core.agents.get(&user.agent)?;
        let model = core.models.resolve(&user.model)?;
        // A session resumed with a context already too full compacts first.
        if let Some(finished) = latest.finished
            && !finished.summary
            && compaction::is_overflow(&finished.tokens, &model.info)
        {
            compaction::queue(core, session_id, &user, false).await?;
            continue;
        }
        let step = rounds.steps_since_user() as u32 + 1;
        let last_step = agent.steps.is_some_and(|max| step >= max);
        // The last step offers no tools; a model that calls one anyway gets an
        // error result, and here the loop stops rather than go on forever.
        if let Some(max) = agent.steps
            && step > max
        {
            // The last step's message says why there is no answer.
            if let Some(last) = latest.assistant
                && let Some(info) = assistant(last)
                && info.error.is_none()
            {
                let mut info = info.clone();
                let error = MessageError::Stopped {
                    message: format!(
                        "the agent {} used all its {max} steps for this prompt and called a tool on the last one instead of answering; send another prompt to go on, or raise agent.{}.steps",
                        agent.name, agent.name
                    ),
                };
                info.error = Some(error.clone());
                core.ledger
                    .put_message(&MessageInfo::Assistant(info.clone()))
                    .await?;
                core.ledger.bus().publish(Event::SessionError {
                    session_id: session_id.clone(),
                    message_id: Some(info.id.clone()),
                    error,
                });
            }
            break;
        }

        let info = AssistantInfo {
            id: MessageId(id::ascending(MessageId::PREFIX)),
            session_id: session_id.clone(),
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
            summary: false,
        };
        core.ledger
            .put_message(&MessageInfo::Assistant(info.clone()))
            .await?;

        let tools = if last_step {
            Vec::new()
        } else {
            resolve_tools(core, agent, &session)
        };
        let mut messages = rounds.conversation();
        if last_step {
            // A copy of the list for this request only.
            messages.make_mut().push(Arc::new(ChatMessage::Assistant {
                content: vec![AssistantContent::Text {
                    text: system::MAX_STEPS.to_string(),
                }],
            }));
        }
        let request = LlmRequest {
            model: model.info.reference.model.clone(),
            system: system::prompt(agent, &session.directory),
            messages,
            tools: tools
                .iter()
                .map(|t| ToolSpec {
                    name: t.id.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                })
                .collect(),
            max_output_tokens: model.info.output_limit,
        };

        let step = Step {
            session: &session,
            agent,
            model: &model,
            info,
            history: msgs,
            tools,
        };
        let outcome = Turn::new(core, step, cancel.clone())
            .process(request)
            .await?;
        match outcome {
            Outcome::Continue => continue,
            Outcome::Stop => break,
            Outcome::Compact => {
                // Compacting again right after a compaction would loop forever.
                let compacted = msgs.first().is_some_and(|m| {
                    m.parts
                        .iter()
                        .any(|p| matches!(p.body, PartBody::Compaction { .. }))
                });
                let steps_since = msgs
                    .iter()
                    .filter_map(|m| assistant(m))
                    .filter(|a| !a.summary)
                    .count();
                if compacted && steps_since == 0 {
                    core.ledger.bus().publish(Event::SessionWarning {
                        session_id: session_id.clone(),
                        message: "the conversation does not fit the model's context window even after compaction; start a new session or use a larger model".into(),
                    });
                    break;
                }
                compaction::queue(core, session_id, &user, true).await?;
                continue;
            }
        }
    }
    let msgs = core.ledger.messages(session_id).await?;
    let last = msgs
        .iter()
        .filter(|m| matches!(m.info, MessageInfo::Assistant(_)))
        .max_by(|a, b| a.info.id().cmp(b.info.id()))
        .or_else(|| msgs.iter().max_by(|a, b| a.info.id().cmp(b.info.id())))
        .cloned();
    last.ok_or_else(|| CoreError::NoUserMessage(session_id.clone()))
}

/// The tools this agent and session may use this round: every tool the host
/// has, minus those a rule switches off entirely.
fn resolve_tools(core: &CoreInner, agent: &Agent, session: &SessionInfo) -> Vec<ToolDef> {
    core.tools
        .tools()
        .into_iter()
        .filter(|t| !agent.policy.disabled(&t.permission, &session.permission))
        .collect()
}

/// Assistant messages left unfinished by a process that died, or by a step
/// that stopped when the ledger failed: their open tool calls become
/// interrupted errors and the message is closed with an error, so the next
/// round shows the model an error result for each call. A message closed
/// with a call still open (which no warden writes, but a ledger is what it
/// is) has the call ended the same way. Said on the bus (and so by `warden
/// session resume`), naming each call.
async fn recover_stale(core: &CoreInner, session_id: &SessionId) -> Result<()> {
    let now = now_ms();
    let mut ended = Vec::new();
    for m in core.ledger.messages(session_id).await? {
        let MessageInfo::Assistant(mut info) = m.info else {
            continue;
        };
        let open: Vec<_> = m
            .parts
            .into_iter()
            .filter(|p| {
                matches!(
                    p.tool_state(),
                    Some(ToolState::Pending { .. } | ToolState::Running { .. })
                )
            })
            .collect();
        if info.time.completed.is_some() && open.is_empty() {
            continue;
        }
        ended.extend(open.iter().filter_map(|p| match &p.body {
            PartBody::Tool { tool, call_id, .. } => Some(format!("{tool} ({call_id})")),
            _ => None,
        }));
        Calls::recover(&core.ledger, open, STALE).await?;
        info.time.completed.get_or_insert(now);
        info.error.get_or_insert(MessageError::Interrupted {
            message: "the step stopped before it ended (its process stopped, or the ledger could not be written); the session was resumed from the ledger"
                .into(),
        });
        core.ledger
            .put_message(&MessageInfo::Assistant(info))
            .await?;
    }
    if !ended.is_empty() {
        let message = format!(
            "resumed from the ledger: {} tool call{} left unfinished by the last run marked interrupted: {}",
            ended.len(),
            if ended.len() == 1 { "" } else { "s" },
            ended.join(", ")
        );
        tracing::warn!(%session_id, "{message}");
        core.ledger.bus().publish(Event::SessionWarning {
            session_id: session_id.clone(),
            message,
        });
    }
    Ok(())
}

fn warn_orphans(core: &CoreInner, session_id: &SessionId, last: &MessageWithParts) {
    let orphans: Vec<String> = last
        .parts
        .iter()
        .filter(|p| history::is_interrupted_orphan(p))
        .filter_map(|p| match &p.body {
            PartBody::Tool { tool, call_id, .. } => Some(format!("{tool} ({call_id})")),
            _ => None,
        })
        .collect();
    if !orphans.is_empty() {
        let message = format!(
            "the session ended with interrupted tool calls that never ran to the end: {}",
            orphans.join(", ")
        );
        tracing::warn!(%session_id, "{message}");
        core.ledger.bus().publish(Event::SessionWarning {
            session_id: session_id.clone(),
            message,
        });
    }
}
