//! The prompt queue: every prompt is first recorded in the ledger's queue
//! ([`Core::accept`]), numbered, and then answered in number order by
//! whichever process holds the session's runner lease ([`drain`]). So
//! prompts accepted by any process sharing the ledger (several `warden
//! serve` on one PostgreSQL database, or a `warden run` next to a server on
//! one SQLite file) are answered one at a time, in the order the ledger
//! took them, and a prompt survives the process that accepted it.
//!
//! A queued prompt goes queued → taken → answered | failed:
//! - **taken**: the runner records the id its user message will have (a
//!   fenced write), then writes that message. A runner taking the session
//!   over after a crash finds the prompt taken and writes the message again
//!   under the same ids, so it appears once whatever happened in between.
//! - **answered**: the loop answered it; the answer is the last assistant
//!   message of that run (the user message itself for `no_reply`).
//! - **failed**: the run ended in an error, kept as text for waiters in
//!   other processes.
//!
//! A caller waits for its own prompt ([`Core::answer`]): through this
//! process's session actor when the lease is free or ours; otherwise until
//! the runner settles it or the lease may be this process's to take (see
//! `hosts/wait.rs`), and then through the actor again.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;
use warden_protocol::{
    Action, MessageId, MessageInfo, MessageTime, MessageWithParts, ModelRef, Part, PartBody, Rule,
    SessionId, UserInfo,
};

use super::actor::{self, Op};
use super::{Core, PromptInput, run_loop};
use crate::clock::now_ms;
use crate::error::{CoreError, Result};
use crate::hosts::wait::{self, settled};
use crate::ledger::{LedgerError, PartWrite, PromptState, QueuedPrompt, id};

/// A prompt as the queue keeps it: everything resolved when it was
/// accepted (agent, model), so a bad one is refused then, not in its turn.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Queued {
    text: String,
    agent: String,
    model: ModelRef,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tools: BTreeMap<String, bool>,
    #[serde(default)]
    no_reply: bool,
}

impl Core {
    /// Record a user message and, unless `no_reply`, run the session until
    /// the model has answered it. Returns the last assistant message (or the
    /// user message with `no_reply`).
    ///
    /// Prompts to one session are answered in the order they were accepted,
    /// whichever process accepted them; each gets its own answer.
    pub async fn prompt(&self, input: PromptInput) -> Result<MessageWithParts> {
        let number = self.accept(&input).await?;
        self.answer(&input.session_id, number).await
    }

    /// Check a prompt and queue it; its number in the queue. Once this
    /// returns, the prompt will be answered even if this process stops: the
    /// session's next runner answers it. A bad prompt (empty, an unknown
    /// agent, model or tool) is refused and nothing is queued.
    pub async fn accept(&self, input: &PromptInput) -> Result<i64> {
        let session = self.inner.ledger.session(&input.session_id).await?;
        let agent = self.inner.agents.get(
            input
                .agent
                .as_deref()
                .unwrap_or(self.inner.agents.default_name()),
        )?;
        self.admits_session(&session)?;
        let model = self
            .choose_model(input.model.as_ref(), Some(&agent.name), Some(&session.id))
            .await?;
        self.admits_model(&model)?;
        if input.text.trim().is_empty() {
            return Err(CoreError::Config("the prompt is empty".into()));
        }
        self.tool_switches(&input.tools)?;
        let queued = Queued {
            text: input.text.clone(),
            agent: agent.name.clone(),
            model,
            tools: input.tools.clone(),
            no_reply: input.no_reply,
        };
        let body = serde_json::to_string(&queued)
            .map_err(|e| CoreError::Internal(format!("cannot encode a prompt: {e}")))?;
        // From here on, a client that subscribes late still sees it all.
        self.inner.ledger.bus().record(&session.id);
        self.inner.ledger.enqueue_prompt(&session.id, &body).await
    }

    /// Wait for queued prompt `number` of `session` to be answered, running
    /// the session here when no other process is.
    pub async fn answer(&self, session: &SessionId, number: i64) -> Result<MessageWithParts> {
        loop {
            let (reply, rx) = tokio::sync::oneshot::channel();
            self.inner
                .actors
                .send(self, session, Op::Prompt { number, reply });
            match actor::reply(rx).await {
                // Another process runs the session (or took it over from
                // this one): it answers the prompt in its turn.
                Err(CoreError::SessionBusy { .. })
                | Err(CoreError::Ledger(LedgerError::Fenced { .. })) => {}
                done => return done,
            }
            match wait::prompt(self, session, number).await? {
                wait::Found::Settled(done) => return *done,
                wait::Found::Free => {}
            }
        }
    }

    /// Write a taken prompt's user message under `message` (and its tool
    /// switches). The text part's id follows from the message's, so writing
    /// it again after a crash changes nothing.
    async fn write_prompt(
        &self,
        session: &SessionId,
        queued: &Queued,
        message: &MessageId,
    ) -> Result<MessageWithParts> {
        let info = MessageInfo::User(UserInfo {
            id: message.clone(),
            session_id: session.clone(),
            time: MessageTime::at(now_ms()),
            agent: queued.agent.clone(),
            model: queued.model.clone(),
        });
        self.inner.ledger.put_message(&info).await?;
        let part = Part {
            id: text_part_id(message).into(),
            session_id: session.clone(),
            message_id: message.clone(),
            body: PartBody::Text {
                text: queued.text.clone(),
                synthetic: false,
                time: None,
                ignored: false,
            },
        };
        self.inner
            .ledger
            .put_part(&part, PartWrite::Changed)
            .await?;
        self.inner.ledger.touch_session(session).await?;

        let switches = self.tool_switches(&queued.tools)?;
        if !switches.is_empty() {
            self.inner
                .ledger
                .update_session_permission(session, move |rules| {
                    for (permission, on) in &switches {
                        rules.retain(|r| {
                            !(&r.permission == permission
                                && r.pattern == "*"
                                && r.action == Action::Deny)
                        });
                        if !on {
                            rules.push(Rule {
                                permission: permission.clone(),
                                pattern: "*".into(),
                                action: Action::Deny,
                            });
                        }
                    }
                })
                .await?;
        }
        Ok(MessageWithParts {
            info,
            parts: vec![part],
        })
    }
}

/// The id of a prompt's text part: the message's, under the part prefix.
fn text_part_id(message: &MessageId) -> String {
    let tail = message
        .as_str()
        .split_once('_')
        .map_or(message.as_str(), |(_, t)| t);
    format!("prt_{tail}")
}

/// Answer the session's open prompts in order, up to `up_to` (all of them
/// with `None`), under the lease the caller's actor holds. Returns the
/// answer to `up_to` (whoever gave it), or with `None` the last answer
/// given here, if any. Stops early when cancelled: what is left stays
/// queued for the next run, except `up_to` itself, which its cancelled
/// caller withdraws.
pub(crate) async fn drain(
    core: &Core,
    session: &SessionId,
    up_to: Option<i64>,
    cancel: &CancellationToken,
) -> Result<Option<MessageWithParts>> {
    let ledger = &core.inner.ledger;
    let mut last = None;
    for entry in ledger.open_prompts(session).await? {
        if up_to.is_some_and(|n| entry.number > n) || cancel.is_cancelled() {
            break;
        }
        let result = answer_one(core, session, &entry, cancel).await;
        let state = match &result {
            Ok(m) => PromptState::Answered {
                message: m.info.id().clone(),
            },
            // The ledger failed or the lease moved on: the prompt stays
            // open for the next runner.
            Err(e @ CoreError::Ledger(_)) => return Err(e.share()),
            Err(e) => PromptState::Failed {
                error: e.to_string(),
            },
        };
        ledger.settle_prompt(session, entry.number, &state).await?;
        if up_to == Some(entry.number) {
            return result.map(Some);
        }
        if let Ok(m) = result {
            last = Some(m);
        }
    }
    match up_to {
        None => Ok(last),
        // Answered before this runner got to it (by another process), or
        // left open by a cancel.
        Some(n) => match ledger.queued_prompt(n).await? {
            Some(entry) => match settled(core, &entry).await {
                Some(done) => done.map(Some),
                None => {
                    // Cancelled before its turn came: withdrawn, so that no
                    // later run answers a prompt its caller gave up on.
                    let error = CoreError::Cancelled.to_string();
                    ledger
                        .settle_prompt(session, n, &PromptState::Failed { error })
                        .await?;
                    Err(CoreError::Cancelled)
                }
            },
            None => Err(CoreError::SessionNotFound(session.clone())),
        },
    }
}

/// Take one open prompt (if it is not taken yet), write its user message
/// and run the loop until it is answered.
async fn answer_one(
    core: &Core,
    session: &SessionId,
    entry: &QueuedPrompt,
    cancel: &CancellationToken,
) -> Result<MessageWithParts> {
    let ledger = &core.inner.ledger;
    let queued: Queued = serde_json::from_str(&entry.body).map_err(|e| {
        CoreError::Config(format!(
            "queued prompt {} cannot be read ({e}); send it again",
            entry.number
        ))
    })?;
    // Judged by this host's policy, whichever host accepted it: an agent it
    // has, a model it runs (a prompt it would refuse from its own client).
    core.inner.agents.get(&queued.agent)?;
    core.admits_model(&queued.model)?;
    let message = match &entry.state {
        PromptState::Taken { message } => message.clone(),
        _ => {
            let message = MessageId(id::ascending(MessageId::PREFIX));
            if !ledger.take_prompt(session, entry.number, &message).await? {
                // Settled meanwhile (it cannot be: this runner holds the
                // lease; but a row is what it is).
                let fresh = ledger.queued_prompt(entry.number).await?;
                return match fresh {
                    Some(fresh) => settled(core, &fresh).await.unwrap_or_else(|| {
                        Err(CoreError::Internal(format!(
                            "queued prompt {} could not be taken",
                            entry.number
                        )))
                    }),
                    None => Err(CoreError::SessionNotFound(session.clone())),
                };
            }
            message
        }
    };
    let written = match ledger.message(session, &message).await? {
        Some(m) if !m.parts.is_empty() => m,
        _ => core.write_prompt(session, &queued, &message).await?,
    };
    if queued.no_reply {
        return Ok(written);
    }
    run_loop::run(&core.inner, session, cancel).await
}
