//! The prompt queue in SQLite: one row per accepted prompt, numbered by
//! SQLite (`AUTOINCREMENT`: a number is never given twice, even after the
//! newest row is deleted), open until a runner settles it.

use rusqlite::{Connection, OptionalExtension, params};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Result;
use crate::store::{PromptState, QueuedPrompt, SETTLED_KEPT_MS};

const COLUMNS: &str = "number, session_id, state, detail, body, accepted_at";

/// Queue a prompt; its number. Prompts settled long ago go.
pub fn enqueue(tx: &Connection, session: &SessionId, body: &str, now: Millis) -> Result<i64> {
    tx.prepare_cached(
        "DELETE FROM prompt_queue WHERE session_id = ?1 AND state IN ('answered', 'failed') AND settled_at < ?2",
    )?
    .execute(params![session.as_str(), now - SETTLED_KEPT_MS])?;
    tx.prepare_cached(
        "INSERT INTO prompt_queue (session_id, state, body, accepted_at) VALUES (?1, 'queued', ?2, ?3)",
    )?
    .execute(params![session.as_str(), body, now])?;
    Ok(tx.last_insert_rowid())
}

pub fn open(conn: &Connection, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM prompt_queue WHERE session_id = ?1 AND state IN ('queued', 'taken') ORDER BY number"
    ))?;
    let rows = stmt.query_map(params![session.as_str()], row)?;
    rows.map(|r| r?).collect()
}

pub fn get(conn: &Connection, number: i64) -> Result<Option<QueuedPrompt>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM prompt_queue WHERE number = ?1"
    ))?
    .query_row(params![number], row)
    .optional()?
    .transpose()
}

/// Mark a queued prompt taken, its user message `message`; whether it was queued.
pub fn take(
    tx: &Connection,
    session: &SessionId,
    number: i64,
    message: &MessageId,
) -> Result<bool> {
    Ok(tx
        .prepare_cached(
            "UPDATE prompt_queue SET state = 'taken', detail = ?3
             WHERE number = ?1 AND session_id = ?2 AND state = 'queued'",
        )?
        .execute(params![number, session.as_str(), message.as_str()])?
        == 1)
}

/// Settle an open prompt.
pub fn settle(
    tx: &Connection,
    session: &SessionId,
    number: i64,
    state: &PromptState,
    now: Millis,
) -> Result<()> {
    let (word, detail) = state.to_row();
    tx.prepare_cached(
        "UPDATE prompt_queue SET state = ?3, detail = ?4, settled_at = ?5
         WHERE number = ?1 AND session_id = ?2 AND state IN ('queued', 'taken')",
    )?
    .execute(params![number, session.as_str(), word, detail, now])?;
    Ok(())
}

pub fn sessions_with_open(conn: &Connection) -> Result<Vec<SessionId>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT session_id FROM prompt_queue WHERE state IN ('queued', 'taken') ORDER BY session_id",
    )?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .map(SessionId)
        .collect())
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<QueuedPrompt>> {
    let number: i64 = r.get(0)?;
    let state: String = r.get(2)?;
    let detail: Option<String> = r.get(3)?;
    let (session, body, accepted_at): (String, String, Millis) = (r.get(1)?, r.get(4)?, r.get(5)?);
    Ok(
        PromptState::from_row(number, &state, detail).map(|state| QueuedPrompt {
            number,
            session_id: SessionId(session),
            state,
            body,
            accepted_at,
        }),
    )
}
