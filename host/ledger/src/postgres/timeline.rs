//! The replayable timeline of tool calls in PostgreSQL: one row per state
//! change, keeping what SQLite keeps (the state's status, time and what it
//! adds beyond its defaults; content stays in the part row), and read back
//! the same way, through SQLite's own encoding of a state
//! (`sqlite/timeline.rs`), so both backends replay a call identically.

use deadpool_postgres::{GenericClient, Transaction};
use serde_json::Value;
use warden_protocol::{Millis, Part, SessionId, ToolState};

use super::{NOW, Result};
use crate::PartEvent;
use crate::timeline::{Row, adds, replay, time_of};

/// A timeline row; `$6` its number, or NULL for the session's next; `$5`
/// its time, or NULL for now on the database's clock.
pub fn insert_sql() -> String {
    format!(
        "INSERT INTO part_event (session_id, seq, message_id, part_id, status, at, adds)
             VALUES ($1,
                     COALESCE($6, (SELECT COALESCE(MAX(seq), 0) + 1 FROM part_event WHERE session_id = $1)),
                     $2, $3, $4, COALESCE($5, {NOW}), $7)"
    )
}

/// Record a tool part's new state (the caller holds the session's row
/// lock); `started_with` as [`adds`] takes it; `pending_at` when a pending
/// state began, if not now.
pub async fn insert(
    tx: &Transaction<'_>,
    part: &Part,
    started_with: Option<&Value>,
    pending_at: Option<Millis>,
) -> Result<()> {
    let Some(s) = part.tool_state() else {
        return Ok(());
    };
    // A pending state happens now (on the database's clock) unless it was
    // held back.
    let at: Option<Millis> = match s {
        ToolState::Pending { .. } => pending_at,
        other => Some(time_of(other, 0)),
    };
    insert_row(
        tx,
        part,
        None,
        s.status(),
        at,
        adds(s, started_with).as_deref(),
    )
    .await
}

/// One timeline row; `seq` given (an import) or the session's next.
pub async fn insert_row(
    tx: &Transaction<'_>,
    part: &Part,
    seq: Option<i64>,
    status: &str,
    at: Option<Millis>,
    adds: Option<&str>,
) -> Result<()> {
    tx.execute(
        &tx.prepare_cached(&insert_sql()).await?,
        &[
            &part.session_id.as_str(),
            &part.message_id.as_str(),
            &part.id.as_str(),
            &status,
            &at,
            &seq,
            &adds,
        ],
    )
    .await?;
    Ok(())
}

/// The session's timeline, in order, each state on its part's envelope.
pub async fn read(c: &impl GenericClient, session: &SessionId) -> Result<Vec<PartEvent>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT e.seq, e.at, e.message_id, e.part_id, e.status, e.adds, p.body
             FROM part_event e
             LEFT JOIN part p ON p.session_id = e.session_id AND p.message_id = e.message_id
                              AND p.id = e.part_id
             WHERE e.session_id = $1 ORDER BY e.seq",
            )
            .await?,
            &[&session.as_str()],
        )
        .await?;
    let rows = rows
        .iter()
        .map(|r| Row {
            seq: r.get(0),
            at: r.get(1),
            message_id: r.get(2),
            part_id: r.get(3),
            status: r.get(4),
            adds: r.get(5),
            body: r.get(6),
        })
        .collect();
    replay(session, rows)
}
