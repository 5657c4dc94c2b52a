//! The prompt queue in PostgreSQL: one row per accepted prompt, open until
//! a runner settles it. A prompt is numbered under its session row's lock,
//! so per session, numbers commit in the order they are given: a runner
//! reading the queue never takes a later prompt while an earlier one is
//! still committing.

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;
use warden_protocol::{MessageId, SessionId};

use super::{NOW, Result, lock_session};
use crate::store::{PromptState, QueuedPrompt, SETTLED_KEPT_MS};

const COLUMNS: &str = "number, session_id, state, detail, body, accepted_at";

/// Queue a prompt; its number. Prompts settled long ago go.
pub async fn enqueue(tx: &Transaction<'_>, session: &SessionId, body: &str) -> Result<i64> {
    lock_session(tx, session).await?;
    tx.execute(
        &tx.prepare_cached(&format!(
            "DELETE FROM prompt_queue WHERE session_id = $1 AND state IN ('answered', 'failed')
             AND settled_at < {NOW} - $2"
        ))
        .await?,
        &[&session.as_str(), &SETTLED_KEPT_MS],
    )
    .await?;
    let row = tx
        .query_one(
            &tx.prepare_cached(&format!(
                "INSERT INTO prompt_queue (session_id, state, body, accepted_at)
                 VALUES ($1, 'queued', $2, {NOW}) RETURNING number"
            ))
            .await?,
            &[&session.as_str(), &body],
        )
        .await?;
    Ok(row.get(0))
}

pub async fn open(c: &impl GenericClient, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
    c.query(
        &c.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM prompt_queue WHERE session_id = $1 AND state IN ('queued', 'taken') ORDER BY number"
        ))
        .await?,
        &[&session.as_str()],
    )
    .await?
    .iter()
    .map(row)
    .collect()
}

pub async fn get(c: &impl GenericClient, number: i64) -> Result<Option<QueuedPrompt>> {
    c.query_opt(
        &c.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM prompt_queue WHERE number = $1"
        ))
        .await?,
        &[&number],
    )
    .await?
    .as_ref()
    .map(row)
    .transpose()
}

/// Mark a queued prompt taken, its user message `message`; whether it was queued.
pub async fn take(
    tx: &Transaction<'_>,
    session: &SessionId,
    number: i64,
    message: &MessageId,
) -> Result<bool> {
    Ok(tx
        .execute(
            &tx.prepare_cached(
                "UPDATE prompt_queue SET state = 'taken', detail = $3
                 WHERE number = $1 AND session_id = $2 AND state = 'queued'",
            )
            .await?,
            &[&number, &session.as_str(), &message.as_str()],
        )
        .await?
        == 1)
}

/// Settle an open prompt.
pub async fn settle(
    tx: &Transaction<'_>,
    session: &SessionId,
    number: i64,
    state: &PromptState,
) -> Result<()> {
    let (word, detail) = state.to_row();
    tx.execute(
        &tx.prepare_cached(&format!(
            "UPDATE prompt_queue SET state = $3, detail = $4, settled_at = {NOW}
             WHERE number = $1 AND session_id = $2 AND state IN ('queued', 'taken')"
        ))
        .await?,
        &[&number, &session.as_str(), &word, &detail],
    )
    .await?;
    Ok(())
}

pub async fn sessions_with_open(c: &impl GenericClient) -> Result<Vec<SessionId>> {
    Ok(c
        .query(
            &c.prepare_cached(
                "SELECT DISTINCT session_id FROM prompt_queue WHERE state IN ('queued', 'taken') ORDER BY session_id",
            )
            .await?,
            &[],
        )
        .await?
        .iter()
        .map(|r| SessionId(r.get(0)))
        .collect())
}

fn row(r: &Row) -> Result<QueuedPrompt> {
    let number: i64 = r.get(0);
    let state: String = r.get(2);
    Ok(QueuedPrompt {
        number,
        session_id: SessionId(r.get(1)),
        state: PromptState::from_row(number, &state, r.get(3))?,
        body: r.get(4),
        accepted_at: r.get(5),
    })
}
