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
    INSERT INTO part (message, id, kind, body, body_key, body_chunks)
    SELECT m.key, ?3, ?4, ?5, ?6, ?7 FROM message m JOIN session s ON s.key = m.session
    WHERE s.id = ?1 AND m.id = ?2
    ON CONFLICT(message, id) DO UPDATE SET
        body = excluded.body, body_key = excluded.body_key, body_chunks = excluded.body_chunks";
const INSERT_CHUNK: &str = "INSERT INTO part_body (chunk) VALUES (?1)";
const READ_CHUNKS: &str =
    "SELECT chunk FROM part_body WHERE key >= ?1 AND key < ?1 + ?2 ORDER BY key";

/// The longest body a part row keeps itself; a longer one goes to
/// `part_body` (see schema 9): under the roughly 1,000 bytes past which a
/// row of the part table spills onto an overflow page, with room for the
/// row's key.
pub const INLINE_MOST: usize = 900;
/// The bytes of a body each `part_body` row holds: four such rows fill a
/// 4 KiB page.
pub const CHUNK: usize = 1000;
/// A body longer than this is one `part_body` row: SQLite keeps a long
/// row's first bytes in its page and the rest on overflow pages it fills
/// whole, so only the first bytes share a page with other rows.
pub const ONE_ROW_FROM: usize = 16 * 1024;

/// Whether a part has its last body, as far as its kind says: a finished
/// call, a text or reasoning that stopped streaming. Only such a body goes
/// to `part_body`: chunks a rewrite drops leave gaps in pages that later
/// chunks (with higher keys) never fill, while an earlier body kept in its
/// row spills onto whole overflow pages, which the next write frees for
/// reuse.
fn settled(body: &PartBody) -> bool {
    match body {
        PartBody::Tool { state, .. } => state.is_terminal(),
        PartBody::Text { time, .. } | PartBody::Reasoning { time, .. } => {
            time.as_ref().is_none_or(|t| t.end.is_some())
        }
        _ => true,
    }
}

/// Store a long body's chunks under consecutive keys; the first key and how
/// many there are.
fn put_chunks(tx: &Connection, body: &str) -> Result<(i64, i64)> {
    let mut insert = tx.prepare_cached(INSERT_CHUNK)?;
    let mut first = None;
    let mut n = 0i64;
    let size = if body.len() > ONE_ROW_FROM {
        body.len()
    } else {
        CHUNK
    };
    for chunk in body.as_bytes().chunks(size) {
        insert.execute([chunk])?;
        let key = tx.last_insert_rowid();
        let first = *first.get_or_insert(key);
        // Keys follow the largest one (this write holds the file's lock),
        // so a body's chunks are a range.
        if key != first + n {
            return Err(LedgerError::Storage(format!(
                "a part's chunk got key {key}, not {} (a bug)",
                first + n
            )));
        }
        n += 1;
    }
    Ok((first.unwrap_or(0), n))
}

/// A part's body as its row keeps it: in the row, or (`key`, `chunks`) in
/// `part_body`.
pub fn body_of(
    conn: &Connection,
    part: &str,
    inline: String,
    chunks: Option<(i64, i64)>,
) -> Result<String> {
    let Some((key, n)) = chunks else {
        return Ok(inline);
    };
    let mut bytes = Vec::new();
    let mut read = 0;
    let mut stmt = conn.prepare_cached(READ_CHUNKS)?;
    let mut rows = stmt.query(params![key, n])?;
    while let Some(row) = rows.next()? {
        bytes.extend_from_slice(row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?);
        read += 1;
    }
    let corrupt = |reason: String| LedgerError::Corrupt {
        what: format!("part {part}"),
        reason,
    };
    if read != n {
        return Err(corrupt(format!(
            "{read} of its {n} body chunks are in the ledger"
        )));
    }
    String::from_utf8(bytes).map_err(|e| corrupt(format!("its body is not UTF-8: {e}")))
}

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
    let (inline, chunks) = if body.len() > INLINE_MOST && settled(&part.body) {
        ("", Some(put_chunks(tx, body)?))
    } else {
        (body, None)
    };
    let n = tx.prepare_cached(UPSERT_PART)?.execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::kind_code(&part.body),
        inline,
        chunks.map(|c| c.0),
        chunks.map(|c| c.1),
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
        "SELECT p.message, p.id, p.kind, p.body, p.body_key, p.body_chunks FROM part p
         JOIN message m ON m.key = p.message JOIN session s ON s.key = m.session
         WHERE s.id = ?1 ORDER BY m.id, p.id",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<i64>>(4)?.zip(r.get::<_, Option<i64>>(5)?),
        ))
    })?;
    let parts = rows.map(|row| {
        let (message, id, kind, body, chunks) = row?;
        let body = body_of(conn, &id, body, chunks)?;
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
