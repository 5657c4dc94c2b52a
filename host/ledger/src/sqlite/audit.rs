//! The audit trail: every decision and guest call at the host boundary. A
//! tool call's entries (permission, hooks, tool) are one row; each entry is
//! a compact JSON array, and a guest's content hash is written once, in
//! `guest`, and referred to by its key. The words every call repeats
//! (stages, decisions, the common outcomes) are stored as their numbers in
//! `codec`'s lists; any other text is stored as it is.

use std::collections::HashMap;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use warden_protocol::{MessageId, SessionId};

use super::{Result, codec};
use crate::{AuditEntry, LedgerError};

const INSERT: &str = "\
    INSERT INTO audit (session, seq, message, call_id, at, entries)
    SELECT s.key,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM audit WHERE session = s.key),
           (SELECT m.key FROM message m WHERE m.session = s.key AND m.id = ?2),
           ?3, ?4, ?5
    FROM session s WHERE s.id = ?1";

/// The keys of guest hashes already in `guest`, so a call's row costs no lookup.
#[derive(Default)]
pub struct GuestKeys(Mutex<HashMap<String, i64>>);

impl GuestKeys {
    fn key(&self, conn: &Connection, hash: &str) -> Result<i64> {
        if let Some(k) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(hash) {
            return Ok(*k);
        }
        conn.prepare_cached("INSERT OR IGNORE INTO guest (hash) VALUES (?1)")?
            .execute(params![hash])?;
        let key: i64 = conn
            .prepare_cached("SELECT key FROM guest WHERE hash = ?1")?
            .query_row(params![hash], |r| r.get(0))?;
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(hash.to_string(), key);
        Ok(key)
    }
}

/// Write `entries` as one row per run of entries of the same call.
pub fn insert(conn: &Connection, keys: &GuestKeys, entries: &[AuditEntry]) -> Result<()> {
    let same_call = |a: &AuditEntry, b: &AuditEntry| {
        a.session_id == b.session_id && a.message_id == b.message_id && a.call_id == b.call_id
    };
    let mut start = 0;
    while start < entries.len() {
        let mut end = start + 1;
        while end < entries.len() && same_call(&entries[start], &entries[end]) {
            end += 1;
        }
        let group = &entries[start..end];
        let first = &group[0];
        let mut encoded = Vec::with_capacity(group.len());
        for e in group {
            let guest = match &e.plugin_hash {
                Some(h) => Value::from(keys.key(conn, h)?),
                None => Value::Null,
            };
            let mut fields = vec![
                codec::word(codec::STAGES, &e.stage),
                Value::from(e.subject.as_str()),
                codec::word(codec::DECISIONS, &e.decision),
                e.rule.as_deref().map_or(Value::Null, Value::from),
                guest,
                e.duration_us.map_or(Value::Null, Value::from),
                e.outcome
                    .as_deref()
                    .map_or(Value::Null, |o| codec::word(codec::OUTCOMES, o)),
                match e.at - first.at {
                    0 => Value::Null,
                    d => Value::from(d),
                },
            ];
            while fields.last().is_some_and(Value::is_null) {
                fields.pop();
            }
            encoded.push(Value::Array(fields));
        }
        conn.prepare_cached(INSERT)?.execute(params![
            first.session_id.as_str(),
            first.message_id.as_ref().map(|m| m.as_str()),
            first.call_id,
            first.at,
            Value::Array(encoded).to_string(),
        ])?;
        start = end;
    }
    Ok(())
}

/// The session's trail, entry by entry, in order.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(
        "SELECT a.seq, m.id, a.call_id, a.at, a.entries
         FROM audit a JOIN session s ON s.key = a.session
         LEFT JOIN message m ON m.key = a.message
         WHERE s.id = ?1 ORDER BY a.seq",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut hashes: HashMap<i64, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    for row in rows {
        let (seq, message_id, call_id, at, entries) = row?;
        let corrupt = |reason: String| LedgerError::Corrupt {
            what: format!("audit row {seq}"),
            reason,
        };
        let entries: Vec<Vec<Value>> =
            serde_json::from_str(&entries).map_err(|e| corrupt(e.to_string()))?;
        for e in entries {
            let text = |i: usize| e.get(i).and_then(Value::as_str).map(str::to_string);
            let word = |i: usize, words: &[&str]| e.get(i).and_then(|v| codec::word_of(words, v));
            let int = |i: usize| e.get(i).and_then(Value::as_i64);
            let plugin_hash = match int(4) {
                Some(k) => match hashes.get(&k) {
                    Some(h) => h.clone(),
                    None => {
                        let h: Option<String> = conn
                            .query_row("SELECT hash FROM guest WHERE key = ?1", params![k], |r| {
                                r.get(0)
                            })
                            .optional()?;
                        hashes.insert(k, h.clone());
                        h
                    }
                },
                None => None,
            };
            out.push(AuditEntry {
                seq: out.len() as i64 + 1,
                session_id: session.clone(),
                message_id: message_id.clone().map(MessageId),
                call_id: call_id.clone(),
                at: at + int(7).unwrap_or(0),
                stage: word(0, codec::STAGES)
                    .ok_or_else(|| corrupt("an entry has no stage".into()))?,
                subject: text(1).unwrap_or_default(),
                plugin_hash,
                decision: word(2, codec::DECISIONS).unwrap_or_default(),
                rule: text(3),
                duration_us: int(5),
                outcome: word(6, codec::OUTCOMES),
            });
        }
    }
    Ok(out)
}
