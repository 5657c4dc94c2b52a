//! Message and part rows in SQLite. A row keeps in columns what identifies
//! it (role, ids, part kind) and the rest as JSON without those fields
//! (see `codec`); reading splices them back.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use warden_protocol::{MessageInfo, MessageWithParts, Millis, Part, PartBody, SessionId};

use super::{Result, audit, codec, header, timeline};
use crate::assemble::attach_parts;
use crate::{AuditEntry, LedgerError};

// The statements every step runs, prepared once per connection.
const UPSERT_MESSAGE: &str = "\
    INSERT INTO message (session, id, role, info, created_at, updated_at)
    SELECT key, ?1, ?3, ?4, ?5, ?6 FROM session WHERE id = ?2
    ON CONFLICT(session, id) DO UPDATE SET info = excluded.info, updated_at = excluded.updated_at";
const UPSERT_PART: &str = "\
    INSERT INTO part (message, id, kind, body)
    SELECT m.key, ?3, ?4, ?5 FROM message m JOIN session s ON s.key = m.session
    WHERE s.id = ?1 AND m.id = ?2
    ON CONFLICT(message, id) DO UPDATE SET body = excluded.body";

/// What a header's row stands in for (see `header`): its session's
/// directory and, for an answer, its user message's model. `None` when the
/// session is not in the ledger.
fn context_of(conn: &Connection, info: &MessageInfo) -> Result<Option<(String, Option<Value>)>> {
    let parent = match info {
        MessageInfo::Assistant(a) => Some(a.parent_id.as_str()),
        MessageInfo::User(_) => None,
    };
    let found = conn
        .prepare_cached(
            "SELECT s.directory,
                    (SELECT json_extract(m.info, '$.model') FROM message m
                     WHERE m.session = s.key AND m.id = ?2 AND m.role = 'user')
             FROM session s WHERE s.id = ?1",
        )?
        .query_row(params![info.session_id().as_str(), parent], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })
        .optional()?;
    // A user header keeps its model whole (`header`), so SQLite hands it over as JSON.
    Ok(found.map(|(directory, model)| {
        let model = model
            .and_then(|m| serde_json::from_str::<Value>(&m).ok())
            .filter(Value::is_object);
        (directory, model)
    }))
}

/// The part as stored: without its type and ids, which are columns of the row.
pub fn encode_part(part: &Part) -> Result<String> {
    let body = serde_json::to_string(&part.body).map_err(|e| LedgerError::encode("a part", e))?;
    let body = codec::strip(body, &[("type", &codec::quoted(part.body.kind()))]);
    Ok(if matches!(part.body, PartBody::StepFinish { .. }) {
        codec::slim_tokens(body)
    } else {
        body
    })
}

/// Insert or update a header, stored without what its context says;
/// `false` if its session is missing.
pub fn put_message(tx: &Connection, info: &MessageInfo, now: Millis) -> Result<bool> {
    let Some((directory, parent_model)) = context_of(tx, info)? else {
        return Ok(false);
    };
    let body = header::encode(
        info,
        &header::Context {
            directory: &directory,
            parent_model: parent_model.as_ref(),
        },
    )?;
    Ok(tx.prepare_cached(UPSERT_MESSAGE)?.execute(params![
        info.id().as_str(),
        info.session_id().as_str(),
        info.role(),
        body,
        info.created(),
        now
    ])? > 0)
}

/// Insert or update a part (already encoded), its timeline row when asked
/// (`Some`: with the arguments a finishing call started with, when a hook
/// rewrote them), and `audit`, all inside `tx`.
pub fn put_part(
    tx: &Connection,
    guests: &audit::GuestKeys,
    part: &Part,
    body: &str,
    timeline: Option<Option<&Value>>,
    entries: &[AuditEntry],
    now: Millis,
) -> Result<()> {
    let n = tx.prepare_cached(UPSERT_PART)?.execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::kind_code(&part.body),
        body,
    ])?;
    if n == 0 {
        return Err(LedgerError::Corrupt {
            what: format!("part {}", part.id),
            reason: format!(
                "its message {} of session {} is not in the ledger",
                part.message_id, part.session_id
            ),
        });
    }
    if let Some(started_with) = timeline {
        timeline::insert(tx, part, started_with, now)?;
    }
    if !entries.is_empty() {
        audit::insert(tx, guests, entries)?;
    }
    Ok(())
}

/// Every message of a session with its parts, in id order.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<MessageWithParts>> {
    let mut out: Vec<MessageWithParts> = Vec::new();
    let mut keys: Vec<i64> = Vec::new();
    {
        let mut stmt = conn.prepare_cached(
            "SELECT m.key, m.id, m.role, m.info, m.created_at, s.directory
             FROM message m JOIN session s ON s.key = m.session
             WHERE s.id = ?1 ORDER BY m.id",
        )?;
        let rows = stmt.query_map(params![session.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        // The models of the user messages read so far, for the answers after them.
        let mut models: HashMap<String, Value> = HashMap::new();
        for row in rows {
            let (key, id, role, info, created_at, directory) = row?;
            let info = header::decode(
                &header::Row {
                    id: &id,
                    role: &role,
                    session_id: session.as_str(),
                    created_at,
                    info: &info,
                },
                &directory,
                |parent| models.get(parent),
            )
            .map_err(|reason| LedgerError::Corrupt {
                what: format!("message {id}"),
                reason,
            })?;
            if let MessageInfo::User(u) = &info {
                models.insert(u.id.to_string(), header::model_value(&u.model));
            }
            keys.push(key);
            out.push(MessageWithParts {
                info,
                parts: Vec::new(),
            });
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT p.message, p.id, p.kind, p.body FROM part p JOIN message m ON m.key = p.message
         JOIN session s ON s.key = m.session WHERE s.id = ?1 ORDER BY m.id, p.id",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let parts = rows.map(|row| {
        let (message, id, kind, body) = row?;
        let kind = codec::kind_name(kind).ok_or_else(|| LedgerError::Corrupt {
            what: format!("part {id}"),
            reason: format!("unknown kind code {kind}"),
        })?;
        Ok((
            message,
            id.clone(),
            codec::splice(&body, &[("type", &codec::quoted(kind))]),
        ))
    });
    attach_parts(session, &mut out, &keys, parts)?;
    Ok(out)
}
