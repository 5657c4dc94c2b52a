//! The SQLite side of the tool-call timeline (the codec is
//! [`crate::timeline`]): writing its rows and reading them back.

use rusqlite::{Connection, params};
use serde_json::Value;
use warden_protocol::{Millis, Part, SessionId};

use super::{Result, codec};
use crate::timeline::{Row, adds, replay, time_of};
use crate::{LedgerError, PartEvent};

const INSERT: &str = "\
    INSERT INTO part_event (session, seq, message, part, status, at, adds)
    SELECT m.session,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM part_event WHERE session = m.session),
           m.key, ?3, ?4, ?5, ?6
    FROM message m JOIN session s ON s.key = m.session WHERE s.id = ?1 AND m.id = ?2";

/// Record a tool part's new state; `started_with`: the arguments it started
/// running with, when it finishes (see [`adds`]).
pub fn insert(
    conn: &Connection,
    part: &Part,
    started_with: Option<&Value>,
    now: Millis,
) -> Result<()> {
    let Some(state) = part.tool_state() else {
        return Ok(());
    };
    conn.prepare_cached(INSERT)?.execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::status_code(state.status()),
        time_of(state, now),
        adds(state, started_with),
    ])?;
    Ok(())
}

/// A timeline row with its own number and time (an import).
pub fn insert_at(
    conn: &Connection,
    part: &Part,
    started_with: Option<&Value>,
    seq: i64,
    at: Millis,
) -> Result<()> {
    let Some(state) = part.tool_state() else {
        return Ok(());
    };
    conn.prepare_cached(
        "INSERT INTO part_event (session, seq, message, part, status, at, adds)
         SELECT m.session, ?7, m.key, ?3, ?4, ?5, ?6
         FROM message m JOIN session s ON s.key = m.session WHERE s.id = ?1 AND m.id = ?2",
    )?
    .execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::status_code(state.status()),
        at,
        adds(state, started_with),
        seq,
    ])?;
    Ok(())
}

/// The session's timeline, in order, each state on its part's envelope.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<PartEvent>> {
    let mut stmt = conn.prepare(
        "SELECT e.seq, e.at, m.id, e.part, e.status, e.adds, p.body, p.body_key, p.body_chunks
         FROM part_event e
         JOIN session s ON s.key = e.session
         JOIN message m ON m.key = e.message
         LEFT JOIN part p ON p.message = e.message AND p.id = e.part
         WHERE s.id = ?1 ORDER BY e.seq",
    )?;
    let tool = codec::quoted("tool");
    let mut rows = Vec::new();
    for row in stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Option<String>>(6)?,
            r.get::<_, Option<i64>>(7)?.zip(r.get::<_, Option<i64>>(8)?),
        ))
    })? {
        let (seq, at, message_id, part_id, status, adds, body, chunks) = row?;
        let body = match body {
            Some(b) => Some(super::messages::body_of(conn, &part_id, b, chunks)?),
            None => None,
        };
        let status = codec::status_name(status).ok_or_else(|| LedgerError::Corrupt {
            what: format!("part event {seq}"),
            reason: format!("unknown status code {status}"),
        })?;
        rows.push(Row {
            seq,
            at,
            message_id,
            part_id,
            status: status.to_string(),
            adds,
            body: body.map(|b| codec::splice(&b, &[("type", &tool)])),
        });
    }
    replay(session, rows)
}
