//! The ledger's side of the prompt queue (the mechanic is in
//! `session/prompt_queue.rs`): taking and settling a prompt are runner
//! writes, fenced like every other; queueing and reading are not.

use warden_protocol::{MessageId, SessionId};

use super::Ledger;
use super::store::{PromptState, QueuedPrompt};
use crate::error::Result;

impl Ledger {
    /// Queue a prompt for the session; its number.
    pub async fn enqueue_prompt(&self, session: &SessionId, body: &str) -> Result<i64> {
        Ok(self.store.enqueue_prompt(session, body).await?)
    }

    /// The session's open prompts, in number order.
    pub async fn open_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
        Ok(self.store.open_prompts(session).await?)
    }

    /// One queued prompt; `None` once pruned or with its session deleted.
    pub async fn queued_prompt(&self, number: i64) -> Result<Option<QueuedPrompt>> {
        Ok(self.store.queued_prompt(number).await?)
    }

    /// Take a queued prompt for its turn; `false` if it was not queued.
    pub async fn take_prompt(
        &self,
        session: &SessionId,
        number: i64,
        message: &MessageId,
    ) -> Result<bool> {
        self.write(session, async |fence| {
            self.store
                .take_prompt(session, number, message, fence)
                .await
        })
        .await
    }

    /// Record how an open prompt ended.
    pub async fn settle_prompt(
        &self,
        session: &SessionId,
        number: i64,
        state: &PromptState,
    ) -> Result<()> {
        self.write(session, async |fence| {
            self.store
                .settle_prompt(session, number, state, fence)
                .await
        })
        .await?;
        self.bus.notify(crate::hosts::Notice::PromptSettled {
            session_id: session.clone(),
            number,
        });
        Ok(())
    }

    /// The sessions with open prompts.
    pub async fn sessions_with_open_prompts(&self) -> Result<Vec<SessionId>> {
        Ok(self.store.sessions_with_open_prompts().await?)
    }
}
