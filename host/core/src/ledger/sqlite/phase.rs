//! Phase marks in SQLite: one row per mark, numbered per session.

use rusqlite::{Connection, Transaction, params};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Result;
use crate::ledger::LedgerError;
use crate::ledger::phase::{Phase, PhaseKind};

const INSERT_PHASE: &str = "\
    INSERT INTO phase (session_id, seq, message_id, at, kind, detail)
    VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session_id = ?1), ?2, ?3, ?4, ?5)";

pub fn insert(
    tx: &Transaction<'_>,
    session: &SessionId,
    message: Option<&MessageId>,
    at: Millis,
    kind: &PhaseKind,
) -> Result<()> {
    let detail = serde_json::to_string(kind).map_err(|e| LedgerError::encode("a phase mark", e))?;
    tx.prepare_cached(INSERT_PHASE)?.execute(params![
        session.as_str(),
        message.map(|m| m.as_str()),
        at,
        kind.name(),
        detail
    ])?;
    Ok(())
}

/// A session's phase marks, in order. A row this warden cannot read (from a
/// newer one) is skipped, not fatal: the trace is a view.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<Phase>> {
    let mut stmt = conn.prepare(
        "SELECT seq, at, message_id, detail FROM phase WHERE session_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, message_id, detail) = row?;
        let Some(kind) = detail.and_then(|d| serde_json::from_str(&d).ok()) else {
            continue;
        };
        out.push(Phase {
            seq,
            at,
            message_id: message_id.map(MessageId),
            kind,
        });
    }
    Ok(out)
}
