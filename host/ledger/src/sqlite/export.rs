//! Moving a session whole out of and into SQLite, with its own ids,
//! sequence numbers and times (see `Store::export_session`).

use std::collections::HashMap;

use rusqlite::{Connection, params};
use warden_protocol::SessionId;

use super::{Result, audit, messages, phase, sessions, timeline};
use crate::store::{ExportedMessage, SessionExport};

/// The session whole, read on `conn` (inside a read transaction).
pub fn export(conn: &Connection, id: &SessionId) -> Result<Option<SessionExport>> {
    let Some(session) = sessions::get(conn, id)? else {
        return Ok(None);
    };
    let mut stmt = conn.prepare(
        "SELECT m.id, m.updated_at FROM message m JOIN session s ON s.key = m.session WHERE s.id = ?1",
    )?;
    let updated: HashMap<String, i64> = stmt
        .query_map(params![id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let messages = messages::read(conn, id)?
        .into_iter()
        .map(|m| ExportedMessage {
            updated_at: updated.get(m.info.id().as_str()).copied().unwrap_or(0),
            info: m.info,
            parts: m.parts,
        })
        .collect();
    Ok(Some(SessionExport {
        session,
        messages,
        timeline: timeline::read(conn, id)?,
        audit: audit::read(conn, id)?,
        phases: phase::read(conn, id)?,
    }))
}

/// Write `export` inside `tx`; `false` (nothing written) if its session is
/// here already. The audit trail is packed per tool call as `audit` packs
/// it; its entries read back the same.
pub fn import(tx: &Connection, guests: &audit::GuestKeys, export: &SessionExport) -> Result<bool> {
    let id = &export.session.id;
    if sessions::get(tx, id)?.is_some() {
        return Ok(false);
    }
    sessions::create(tx, &export.session)?;
    for m in &export.messages {
        messages::put_message(tx, &m.info, m.updated_at)?;
        for p in &m.parts {
            let body = messages::encode_part(p)?;
            messages::put_part(tx, guests, p, &body, None, &[], 0)?;
        }
    }
    let last = export.last_inputs();
    let started = crate::timeline::started_with(&export.timeline, |part| last.get(part).copied());
    for (e, started_with) in export.timeline.iter().zip(started) {
        timeline::insert_at(tx, &e.part, started_with, e.seq, e.at)?;
    }
    audit::insert(tx, guests, &export.audit)?;
    for p in &export.phases {
        phase::insert_at(tx, id, p.message_id.as_ref(), p.seq, p.at, &p.kind)?;
    }
    Ok(true)
}
