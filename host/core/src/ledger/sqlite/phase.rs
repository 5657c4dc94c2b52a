//! Phase marks in SQLite: one row per mark, numbered per session, keyed by
//! the session's and message's integer keys, with a numeric kind and the
//! kind's fields in columns of their own (about 20 bytes a mark).

use rusqlite::{Connection, Transaction, params};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Result;
use crate::ledger::phase::{Phase, PhaseKind};

const INSERT_PHASE: &str = "\
    INSERT INTO phase (session, seq, message, at, kind, attempt, until_at, detail)
    SELECT s.key,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session = s.key),
           (SELECT m.key FROM message m WHERE m.session = s.key AND m.id = ?2),
           ?3, ?4, ?5, ?6, ?7
    FROM session s WHERE s.id = ?1";

/// The stored kind (`kind` column).
fn code(kind: &PhaseKind) -> i64 {
    match kind {
        PhaseKind::ModelRequest { .. } => 0,
        PhaseKind::FirstToken => 1,
        PhaseKind::StepFinish { .. } => 2,
        PhaseKind::RetryWait { .. } => 3,
    }
}

/// The stored columns besides the kind: (attempt, until, detail).
fn columns(kind: &PhaseKind) -> (Option<u32>, Option<Millis>, Option<&str>) {
    match kind {
        PhaseKind::ModelRequest { attempt } => (Some(*attempt), None, None),
        PhaseKind::FirstToken => (None, None, None),
        PhaseKind::StepFinish { reason } => (None, None, Some(reason)),
        PhaseKind::RetryWait {
            attempt,
            until,
            message,
        } => (Some(*attempt), Some(*until), Some(message)),
    }
}

/// Back from the stored columns; `None` for a kind this warden does not
/// know (written by a newer one).
fn kind(
    code: i64,
    attempt: Option<u32>,
    until: Option<Millis>,
    detail: Option<String>,
) -> Option<PhaseKind> {
    Some(match code {
        0 => PhaseKind::ModelRequest {
            attempt: attempt.unwrap_or(1),
        },
        1 => PhaseKind::FirstToken,
        2 => PhaseKind::StepFinish {
            reason: detail.unwrap_or_default(),
        },
        3 => PhaseKind::RetryWait {
            attempt: attempt.unwrap_or(1),
            until: until.unwrap_or(0),
            message: detail.unwrap_or_default(),
        },
        _ => return None,
    })
}

/// Record `marks` inside `tx`.
pub fn insert(
    tx: &Transaction<'_>,
    session: &SessionId,
    message: Option<&MessageId>,
    marks: &[(Millis, PhaseKind)],
) -> Result<()> {
    let mut insert = tx.prepare_cached(INSERT_PHASE)?;
    for (at, k) in marks {
        let (attempt, until, detail) = columns(k);
        insert.execute(params![
            session.as_str(),
            message.map(|m| m.as_str()),
            at,
            code(k),
            attempt,
            until,
            detail
        ])?;
    }
    Ok(())
}

/// One mark with its own number (an import).
pub fn insert_at(
    tx: &Transaction<'_>,
    session: &SessionId,
    message: Option<&MessageId>,
    seq: i64,
    at: Millis,
    k: &PhaseKind,
) -> Result<()> {
    let (attempt, until, detail) = columns(k);
    tx.prepare_cached(
        "INSERT INTO phase (session, seq, message, at, kind, attempt, until_at, detail)
         SELECT s.key, ?8,
                (SELECT m.key FROM message m WHERE m.session = s.key AND m.id = ?2),
                ?3, ?4, ?5, ?6, ?7
         FROM session s WHERE s.id = ?1",
    )?
    .execute(params![
        session.as_str(),
        message.map(|m| m.as_str()),
        at,
        code(k),
        attempt,
        until,
        detail,
        seq
    ])?;
    Ok(())
}

/// A session's phase marks, in order. A row this warden cannot read (from a
/// newer one) is skipped, not fatal: the trace is a view.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<Phase>> {
    let mut stmt = conn.prepare(
        "SELECT p.seq, p.at, m.id, p.kind, p.attempt, p.until_at, p.detail
         FROM phase p JOIN session s ON s.key = p.session
         LEFT JOIN message m ON m.key = p.message
         WHERE s.id = ?1 ORDER BY p.seq",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<String>>(2)?,
            kind(r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?),
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, message_id, kind) = row?;
        let Some(kind) = kind else { continue };
        out.push(Phase {
            seq,
            at,
            message_id: message_id.map(MessageId),
            kind,
        });
    }
    Ok(out)
}
