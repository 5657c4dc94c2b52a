//! Phase marks in SQLite: one row per mark, numbered per session, keyed by
//! the session's and message's integer keys, with a numeric kind and the
//! kind's fields in columns of their own (about 20 bytes a mark).

use rusqlite::{Connection, params};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Result;
use crate::phase::{Phase, PhaseKind, PhaseRow};

const INSERT_PHASE: &str = "\
    INSERT INTO phase (session, seq, message, at, kind, attempt, until_at, detail)
    SELECT s.key,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session = s.key),
           (SELECT m.key FROM message m WHERE m.session = s.key AND m.id = ?2),
           ?3, ?4, ?5, ?6, ?7
    FROM session s WHERE s.id = ?1";

/// Record `marks` inside `tx`.
pub fn insert(
    tx: &Connection,
    session: &SessionId,
    message: Option<&MessageId>,
    marks: &[(Millis, PhaseKind)],
) -> Result<()> {
    let mut insert = tx.prepare_cached(INSERT_PHASE)?;
    for (at, k) in marks {
        let row = k.to_row();
        insert.execute(params![
            session.as_str(),
            message.map(|m| m.as_str()),
            at,
            row.code,
            row.attempt,
            row.until,
            row.detail
        ])?;
    }
    Ok(())
}

/// One mark with its own number (an import).
pub fn insert_at(
    tx: &Connection,
    session: &SessionId,
    message: Option<&MessageId>,
    seq: i64,
    at: Millis,
    k: &PhaseKind,
) -> Result<()> {
    let row = k.to_row();
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
        row.code,
        row.attempt,
        row.until,
        row.detail,
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
            PhaseKind::from_row(PhaseRow {
                code: r.get(3)?,
                attempt: r.get(4)?,
                until: r.get(5)?,
                detail: r.get::<_, Option<String>>(6)?.as_deref(),
            }),
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
