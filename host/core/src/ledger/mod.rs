//! The session ledger: an append-mostly record of sessions, messages and
//! parts in SQLite, which the loop re-reads every round. Nothing the loop
//! needs lives only in memory.
//!
//! This module is the narrow storage interface: every SQL statement and
//! every SQLite setting lives here, so another backend (PostgreSQL for hosts
//! sharing sessions) replaces this module and nothing else. Every write is
//! published on the [`Bus`] after it commits.

mod audit;
pub mod audit_query;
mod check;
mod checkpoint;
mod codec;
mod error;
pub mod id;
mod lease;
pub mod phase;
mod schema;
mod timeline;
mod transition;

use lease::check_fence;

pub use check::{IntegrityReport, check_file};
pub use error::LedgerError;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};
use warden_protocol::{
    Event, MessageId, MessageInfo, MessageWithParts, Millis, Part, PartBody, Rule, SessionId,
    SessionInfo, SessionTime,
};

use checkpoint::Checkpointer;

use crate::bus::Bus;
use crate::clock::now_ms;
use crate::error::{CoreError, Result};

/// How a part write is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartWrite<'a> {
    /// A new part or a finished change: the row, and for a tool call a
    /// `part_event` (its state transitions are the replayable timeline).
    Changed,
    /// Streamed text appended: the row only; the bus carries the delta.
    Delta(&'a str),
}

pub use audit::AuditEntry;
pub use timeline::PartEvent;

/// A runner's proof that it holds a session's lease: the holder and the
/// epoch its lease was taken at. Every write to a session this process holds
/// checks it in the write's own transaction, so once another process has
/// taken the session over (a new epoch), a stale runner can write nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub holder: String,
    pub epoch: i64,
}

/// Who holds a session's runner lease, when taking it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHeld {
    pub holder: String,
    pub expires_at: Millis,
}

/// The ledger. Cheap to clone; all clones share one connection.
#[derive(Clone)]
pub struct Ledger {
    db: Arc<Mutex<Connection>>,
    bus: Bus,
    path: Arc<str>,
    /// The messages of the sessions this process holds the runner lease of,
    /// kept equal to their rows: loaded whole when the lease is taken,
    /// updated by every write after it commits, dropped when the lease is
    /// given back. While the lease is held nobody else may write them, so a
    /// round of the loop re-reads its history without decoding it again.
    held: Arc<Mutex<HashMap<SessionId, Vec<Arc<MessageWithParts>>>>>,
    /// The fences of the sessions this process holds the lease of, from
    /// taking the lease until giving it back. Kept when a renewal fails (the
    /// cached copy goes, the fence stays), so a stale runner stays fenced.
    fences: Arc<Mutex<HashMap<SessionId, Fence>>>,
    /// The audit trail's keys of guest hashes.
    guests: Arc<audit::GuestKeys>,
    /// Stops when the last clone is dropped.
    _checkpointer: Option<Arc<Checkpointer>>,
}

impl Ledger {
    /// Open (creating if needed) the ledger at `path` and bring its schema up to date.
    ///
    /// A file that is not a ledger, or whose pages do not pass SQLite's quick
    /// check, is refused as damaged (`LedgerError::Damaged`, which says what
    /// to do) before anything is written to it.
    pub fn open(path: &Path, bus: Bus) -> Result<Ledger> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| CoreError::Config(format!("cannot create {}: {e}", dir.display())))?;
        }
        let shown = path.display().to_string();
        let opened = (|| -> Result<Ledger> {
            let conn = Connection::open(path)?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            check::quick_check(&conn, &shown)?;
            let mut ledger = Self::init(conn, bus, &shown)?;
            // The checkpoint thread does the work; SQLite's own checkpoint on
            // commit stays only as a backstop, should the log ever reach 40 MB.
            ledger
                .conn()
                .pragma_update(None, "wal_autocheckpoint", 10_000)?;
            ledger._checkpointer = Some(Arc::new(Checkpointer::start(path)?));
            Ok(ledger)
        })();
        opened.map_err(|e| check::named(e, &shown))
    }

    /// A private in-memory ledger, for tests.
    #[cfg(test)]
    pub(crate) fn in_memory(bus: Bus) -> Result<Ledger> {
        Self::init(Connection::open_in_memory()?, bus, ":memory:")
    }

    fn init(conn: Connection, bus: Bus, path: &str) -> Result<Ledger> {
        // WAL + NORMAL survives a killed process (only power loss can lose the
        // last transactions); the busy timeout lets processes share the file.
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut conn = conn;
        schema::migrate(&mut conn, path)?;
        Ok(Ledger {
            db: Arc::new(Mutex::new(conn)),
            bus,
            path: path.into(),
            held: Arc::new(Mutex::new(HashMap::new())),
            fences: Arc::new(Mutex::new(HashMap::new())),
            guests: Arc::new(audit::GuestKeys::default()),
            _checkpointer: None,
        })
    }

    /// Move the write-ahead log into the database file (e.g. before measuring
    /// its size or copying it).
    pub fn checkpoint(&self) -> Result<()> {
        self.conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// Where the ledger lives.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The bus every write is published on.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (the
        // transaction rolls back), so a poisoned lock is still usable.
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one path every write to a session takes: one transaction, and
    /// when this process holds the session's lease, the lease's [`Fence`]
    /// checked first inside it, so a runner whose lease was taken over
    /// writes nothing (`LedgerError::Fenced`). New write methods go through
    /// here and are fenced the same way.
    pub(crate) fn write<T>(
        &self,
        session: &SessionId,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let fence = self.fences().get(session).cloned();
        let result = (|| -> Result<T> {
            let mut conn = self.conn();
            // Fenced writes take the write lock before they check, so no
            // other process can take the lease between the check and the write.
            let behaviour = match fence {
                Some(_) => rusqlite::TransactionBehavior::Immediate,
                None => rusqlite::TransactionBehavior::Deferred,
            };
            let tx = conn.transaction_with_behavior(behaviour)?;
            if let Some(fence) = &fence {
                check_fence(&tx, session, fence)?;
            }
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })();
        if let Err(CoreError::Ledger(LedgerError::Fenced { .. })) = &result {
            // Someone else writes this session now: the copy is stale.
            self.held().remove(session);
        }
        result.map_err(|e| check::named(e, &self.path))
    }

    /// Whether this process still holds the session's lease at the epoch it
    /// took it at: checked before each step and each model request, so a
    /// runner that lost its session starts nothing new. `Ok` for sessions
    /// this process does not hold (nothing to check).
    pub fn check_fence(&self, session: &SessionId) -> Result<()> {
        let Some(fence) = self.fences().get(session).cloned() else {
            return Ok(());
        };
        let result = check_fence(&self.conn(), session, &fence);
        if result.is_err() {
            self.held().remove(session);
        }
        result
    }

    fn fences(&self) -> MutexGuard<'_, HashMap<SessionId, Fence>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- sessions ----

    /// Create a session working in `directory`.
    pub fn create_session(&self, directory: &str, title: &str) -> Result<SessionInfo> {
        let now = now_ms();
        let info = SessionInfo::new(
            SessionId(id::ascending(SessionId::PREFIX)),
            title.to_string(),
            directory.to_string(),
            Vec::new(),
            SessionTime {
                created: now,
                updated: now,
            },
        );
        self.write(&info.id, |tx| {
            tx.execute(
                "INSERT INTO session (id, title, directory, permission, created_at, updated_at) VALUES (?1, ?2, ?3, '[]', ?4, ?4)",
                params![info.id.as_str(), info.title, info.directory, now],
            )?;
            Ok(())
        })?;
        self.bus.publish(Event::SessionCreated {
            session: info.clone(),
        });
        Ok(info)
    }

    /// A session, or `SessionNotFound`.
    pub fn session(&self, id: &SessionId) -> Result<SessionInfo> {
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT id, title, directory, permission, created_at, updated_at FROM session WHERE id = ?1",
                params![id.as_str()],
                session_row,
            )
            .optional()?;
        match row {
            Some(r) => r,
            None => Err(CoreError::SessionNotFound(id.clone())),
        }
    }

    /// Every session, newest first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, title, directory, permission, created_at, updated_at FROM session ORDER BY id DESC",
        )?;
        let rows = stmt.query_map([], session_row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r??);
        }
        Ok(out)
    }

    /// Replace the session's own permission rules.
    pub fn set_session_permission(&self, id: &SessionId, rules: &[Rule]) -> Result<SessionInfo> {
        self.update_session_permission(id, |current| *current = rules.to_vec())
    }

    /// Change the session's own rules in one transaction, so two changes at
    /// once (two prompts' tool switches, two `always` answers) both land.
    pub fn update_session_permission(
        &self,
        id: &SessionId,
        change: impl FnOnce(&mut Vec<Rule>),
    ) -> Result<SessionInfo> {
        self.write(id, |tx| {
            let current: Option<String> = tx
                .query_row(
                    "SELECT permission FROM session WHERE id = ?1",
                    params![id.as_str()],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(current) = current else {
                return Err(CoreError::SessionNotFound(id.clone()));
            };
            let mut rules: Vec<Rule> =
                decode(&current, || format!("permission rules of session {id}"))?;
            change(&mut rules);
            let body =
                serde_json::to_string(&rules).map_err(|e| CoreError::Internal(e.to_string()))?;
            tx.execute(
                "UPDATE session SET permission = ?2, updated_at = ?3 WHERE id = ?1",
                params![id.as_str(), body, now_ms()],
            )?;
            Ok(())
        })?;
        let info = self.session(id)?;
        self.bus.publish(Event::SessionUpdated {
            session: info.clone(),
        });
        Ok(info)
    }

    /// Delete a session and everything recorded about it.
    pub fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.held().remove(id);
        self.write(id, |tx| {
            // Messages and parts go with the session (foreign keys); the
            // timeline, audit trail and phases are removed by its key, the
            // lease by its id.
            for table in ["part_event", "audit", "phase"] {
                tx.execute(
                    &format!(
                        "DELETE FROM {table} WHERE session = (SELECT key FROM session WHERE id = ?1)"
                    ),
                    params![id.as_str()],
                )?;
            }
            tx.execute(
                "DELETE FROM runner_lease WHERE session_id = ?1",
                params![id.as_str()],
            )?;
            let n = tx.execute("DELETE FROM session WHERE id = ?1", params![id.as_str()])?;
            if n == 0 {
                return Err(CoreError::SessionNotFound(id.clone()));
            }
            Ok(())
        })?;
        self.fences().remove(id);
        Ok(())
    }

    /// Mark the session as just used.
    pub fn touch_session(&self, id: &SessionId) -> Result<()> {
        let n = self.write(id, |tx| {
            Ok(tx
                .prepare_cached("UPDATE session SET updated_at = ?2 WHERE id = ?1")?
                .execute(params![id.as_str(), now_ms()])?)
        })?;
        if n == 0 {
            return Err(CoreError::SessionNotFound(id.clone()));
        }
        Ok(())
    }

    // ---- messages and parts ----

    /// Insert or update a message header.
    pub fn put_message(&self, info: &MessageInfo) -> Result<()> {
        // The header without its role and ids, which are columns of the row.
        let body = serde_json::to_string(info).map_err(|e| CoreError::Internal(e.to_string()))?;
        let (role, id, sid) = header_fields(info);
        let body = codec::slim_tokens(codec::strip(
            body,
            &[("role", &role), ("id", &id), ("sessionID", &sid)],
        ));
        let now = now_ms();
        let n = self.write(info.session_id(), |tx| {
            Ok(tx.prepare_cached(UPSERT_MESSAGE)?.execute(params![
                info.id().as_str(),
                info.session_id().as_str(),
                info.role(),
                body,
                info.created(),
                now
            ])?)
        })?;
        if n == 0 {
            return Err(CoreError::SessionNotFound(info.session_id().clone()));
        }
        if let Some(held) = self.held().get_mut(info.session_id()) {
            match held.binary_search_by(|m| m.info.id().cmp(info.id())) {
                Ok(i) => Arc::make_mut(&mut held[i]).info = info.clone(),
                Err(i) => held.insert(
                    i,
                    Arc::new(MessageWithParts {
                        info: info.clone(),
                        parts: Vec::new(),
                    }),
                ),
            }
        }
        self.bus
            .publish(Event::MessageUpdated { info: info.clone() });
        Ok(())
    }

    /// Insert or update a part; see [`PartWrite`] for what is recorded.
    pub fn put_part(&self, part: &Part, write: PartWrite<'_>) -> Result<()> {
        self.put_part_with_audit(part, write, &[])
    }

    /// [`Ledger::put_part`], with `audit` written in the same transaction.
    fn put_part_with_audit(
        &self,
        part: &Part,
        write: PartWrite<'_>,
        audit: &[AuditEntry],
    ) -> Result<()> {
        // The body is the part without its type and ids, which are columns of the row.
        let body =
            serde_json::to_string(&part.body).map_err(|e| CoreError::Internal(e.to_string()))?;
        let mut body = codec::strip(body, &[("type", &codec::quoted(part.body.kind()))]);
        if matches!(part.body, PartBody::StepFinish { .. }) {
            body = codec::slim_tokens(body);
        }
        let now = now_ms();
        self.write(&part.session_id, |tx| {
            let n = tx.prepare_cached(UPSERT_PART)?.execute(params![
                part.session_id.as_str(),
                part.message_id.as_str(),
                part.id.as_str(),
                codec::kind_code(&part.body),
                body,
            ])?;
            if n == 0 {
                return Err(CoreError::Corrupt {
                    what: format!("part {}", part.id),
                    reason: format!(
                        "its message {} of session {} is not in the ledger",
                        part.message_id, part.session_id
                    ),
                });
            }
            // The timeline is of tool calls: their states are what a trace
            // replays. Other parts keep their content in their own row.
            if write == PartWrite::Changed && matches!(part.body, PartBody::Tool { .. }) {
                timeline::insert(tx, part, now)?;
            }
            if !audit.is_empty() {
                audit::insert(tx, &self.guests, audit)?;
            }
            Ok(())
        })?;
        let delta = match write {
            PartWrite::Delta(d) => Some(d.to_string()),
            PartWrite::Changed => None,
        };
        if let Some(held) = self.held().get_mut(&part.session_id)
            && let Ok(m) = held.binary_search_by(|m| m.info.id().cmp(&part.message_id))
        {
            let parts = &mut Arc::make_mut(&mut held[m]).parts;
            match parts.binary_search_by(|p| p.id.cmp(&part.id)) {
                Ok(i) => parts[i] = part.clone(),
                Err(i) => parts.insert(i, part.clone()),
            }
        }
        self.bus.publish(Event::PartUpdated {
            part: part.clone(),
            delta,
        });
        Ok(())
    }

    /// Every message of a session with its parts, in id order.
    pub fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        if let Some(held) = self.held().get(session) {
            return Ok(held.iter().map(|m| MessageWithParts::clone(m)).collect());
        }
        self.read_messages(session)
    }

    /// The same messages, shared: cheap to take every round while this
    /// process holds the session's lease (nothing is copied but pointers).
    pub fn history(&self, session: &SessionId) -> Result<Vec<Arc<MessageWithParts>>> {
        if let Some(held) = self.held().get(session) {
            return Ok(held.clone());
        }
        Ok(self
            .read_messages(session)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    fn held(&self) -> MutexGuard<'_, HashMap<SessionId, Vec<Arc<MessageWithParts>>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        let conn = self.conn();
        let mut out: Vec<MessageWithParts> = Vec::new();
        let mut keys: Vec<i64> = Vec::new();
        let sid = codec::quoted(session.as_str());
        {
            let mut stmt = conn.prepare(
                "SELECT m.key, m.id, m.role, m.info FROM message m JOIN session s ON s.key = m.session
                 WHERE s.id = ?1 ORDER BY m.id",
            )?;
            let rows = stmt.query_map(params![session.as_str()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            for row in rows {
                let (key, id, role, info) = row?;
                let info = codec::splice(
                    &info,
                    &[
                        ("role", &codec::quoted(&role)),
                        ("id", &codec::quoted(&id)),
                        ("sessionID", &sid),
                    ],
                );
                let info: MessageInfo = decode(&info, || format!("message {id}"))?;
                keys.push(key);
                out.push(MessageWithParts {
                    info,
                    parts: Vec::new(),
                });
            }
        }
        let mut stmt = conn.prepare(
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
        let mut idx = 0;
        for row in rows {
            let (message, id, kind, body) = row?;
            let kind = codec::kind_name(kind).ok_or_else(|| CoreError::Corrupt {
                what: format!("part {id}"),
                reason: format!("unknown kind code {kind}"),
            })?;
            let body = codec::splice(&body, &[("type", &codec::quoted(kind))]);
            // Both lists are in message id order, so one forward walk pairs them.
            while idx < keys.len() && keys[idx] != message {
                idx += 1;
            }
            let Some(m) = out.get_mut(idx) else {
                return Err(CoreError::Corrupt {
                    what: format!("part {id}"),
                    reason: "its message is missing".into(),
                });
            };
            m.parts.push(Part {
                body: decode(&body, || format!("part {id}"))?,
                id: id.into(),
                session_id: session.clone(),
                message_id: m.info.id().clone(),
            });
        }
        Ok(out)
    }

    /// One message with its parts.
    pub fn message(&self, session: &SessionId, id: &MessageId) -> Result<Option<MessageWithParts>> {
        Ok(self
            .messages(session)?
            .into_iter()
            .find(|m| m.info.id() == id))
    }

    /// How many assistant messages of the session began a model step.
    pub fn started_turns(&self, session: &SessionId) -> Result<u32> {
        let n: i64 = self.conn().query_row(
            "SELECT COUNT(DISTINCT p.message) FROM part p JOIN message m ON m.key = p.message
             JOIN session s ON s.key = m.session
             WHERE s.id = ?1 AND p.kind = ?2 AND m.role = 'assistant'",
            params![session.as_str(), codec::STEP_START],
            |r| r.get(0),
        )?;
        Ok(n as u32)
    }

    /// The recorded timeline of the session's parts, in order.
    pub fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>> {
        timeline::read(&self.conn(), session)
    }

    // ---- audit ----

    /// Record a decision or guest call.
    pub fn audit(&self, entry: &AuditEntry) -> Result<()> {
        self.write(&entry.session_id, |tx| {
            audit::insert(tx, &self.guests, std::slice::from_ref(entry))
        })
    }

    /// Record a call's entries, one row per call, in one transaction.
    pub fn audit_all(&self, entries: &[AuditEntry]) -> Result<()> {
        // One transaction per session (in practice there is one).
        let mut rest = entries;
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .take_while(|e| e.session_id == first.session_id)
                .count();
            let (these, after) = rest.split_at(n);
            self.write(&first.session_id, |tx| {
                audit::insert(tx, &self.guests, these)
            })?;
            rest = after;
        }
        Ok(())
    }

    /// The session's audit trail, entry by entry, in order.
    pub fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>> {
        audit::read(&self.conn(), session)
    }
}

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

/// A header's role and ids as JSON, as serde writes them first.
fn header_fields(info: &MessageInfo) -> (String, String, String) {
    (
        codec::quoted(info.role()),
        codec::quoted(info.id().as_str()),
        codec::quoted(info.session_id().as_str()),
    )
}

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<SessionInfo>> {
    let id: String = r.get(0)?;
    let permission: String = r.get(3)?;
    let rules = match serde_json::from_str::<Vec<Rule>>(&permission) {
        Ok(rules) => rules,
        Err(e) => {
            return Ok(Err(CoreError::Corrupt {
                what: format!("permission rules of session {id}"),
                reason: e.to_string(),
            }));
        }
    };
    Ok(Ok(SessionInfo::new(
        SessionId(id),
        r.get(1)?,
        r.get(2)?,
        rules,
        SessionTime {
            created: r.get(4)?,
            updated: r.get(5)?,
        },
    )))
}

fn decode<T: serde::de::DeserializeOwned>(text: &str, what: impl FnOnce() -> String) -> Result<T> {
    serde_json::from_str(text).map_err(|e| CoreError::Corrupt {
        what: what(),
        reason: e.to_string(),
    })
}

/// True for parts that carry content a model produced or a user typed.
pub fn has_content(parts: &[Part]) -> bool {
    parts.iter().any(|p| match &p.body {
        PartBody::Text { text, .. } | PartBody::Reasoning { text, .. } => !text.is_empty(),
        PartBody::Tool { .. } => true,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_protocol::{MessageError, MessageTime, ModelRef, ToolState, UserInfo};

    fn ledger() -> Ledger {
        Ledger::in_memory(Bus::new()).unwrap()
    }

    fn user_message(session: &SessionId) -> MessageInfo {
        MessageInfo::User(UserInfo {
            id: MessageId(id::ascending("msg")),
            session_id: session.clone(),
            time: MessageTime::at(1),
            agent: "build".into(),
            model: ModelRef {
                provider: "scripted".into(),
                model: "x".into(),
            },
        })
    }

    fn text_part(message: &MessageInfo, text: String) -> Part {
        Part {
            id: id::ascending("prt").into(),
            session_id: message.session_id().clone(),
            message_id: message.id().clone(),
            body: PartBody::Text {
                text,
                synthetic: false,
                time: None,
                ignored: false,
            },
        }
    }

    #[test]
    fn messages_come_back_with_their_parts_in_id_order() {
        let l = ledger();
        let s = l.create_session("/w", "t").unwrap();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let info = user_message(&s.id);
            l.put_message(&info).unwrap();
            for n in 0..2 {
                let part = text_part(&info, format!("{n}"));
                l.put_part(&part, PartWrite::Changed).unwrap();
            }
            ids.push(info.id().clone());
        }
        let msgs = l.messages(&s.id).unwrap();
        assert_eq!(
            msgs.iter().map(|m| m.info.id().clone()).collect::<Vec<_>>(),
            ids
        );
        for m in &msgs {
            assert_eq!(m.parts.len(), 2);
            assert!(m.parts[0].id < m.parts[1].id);
        }
    }

    #[test]
    fn only_changes_enter_the_timeline() {
        let l = ledger();
        let s = l.create_session("/w", "t").unwrap();
        let info = user_message(&s.id);
        l.put_message(&info).unwrap();
        let mut part = Part {
            id: id::ascending("prt").into(),
            session_id: s.id.clone(),
            message_id: info.id().clone(),
            body: PartBody::Tool {
                call_id: "c1".into(),
                tool: "read".into(),
                state: ToolState::pending(),
                provider_executed: false,
                ignored: false,
            },
        };
        l.put_part(&part, PartWrite::Changed).unwrap();
        l.put_part(&part, PartWrite::Delta("{")).unwrap();
        if let PartBody::Tool { state, .. } = &mut part.body {
            *state = state.start(serde_json::json!({}), 5).unwrap();
        }
        l.put_part(&part, PartWrite::Changed).unwrap();
        let events = l.part_events(&s.id).unwrap();
        let statuses: Vec<_> = events
            .iter()
            .map(|e| e.part.tool_state().unwrap().status())
            .collect();
        assert_eq!(statuses, ["pending", "running"]);
    }

    #[test]
    fn a_lease_is_exclusive_until_it_expires_or_its_holder_dies() {
        let l = ledger();
        let s = l.create_session("/w", "t").unwrap();
        let a = l
            .acquire_lease(&s.id, "a", 60_000, |_| false)
            .unwrap()
            .unwrap();
        let held = l
            .acquire_lease(&s.id, "b", 60_000, |_| false)
            .unwrap()
            .unwrap_err();
        assert_eq!(held.holder, "a");
        let b = l
            .acquire_lease(&s.id, "b", 60_000, |h| h == "a")
            .unwrap()
            .unwrap();
        assert!(b.epoch > a.epoch, "a new holder, a new epoch");
        assert!(!l.renew_lease(&s.id, &a, 60_000).unwrap());
        assert!(l.renew_lease(&s.id, &b, 60_000).unwrap());
        l.release_lease(&s.id, &b).unwrap();
        let a2 = l.acquire_lease(&s.id, "a", -1, |_| false).unwrap().unwrap();
        assert!(a2.epoch > b.epoch, "epochs only grow, also after a release");
        assert!(
            l.acquire_lease(&s.id, "b", 60_000, |_| false)
                .unwrap()
                .is_ok(),
            "expired lease is taken over"
        );
    }

    /// Two processes on one file: the first holds the lease, the second takes
    /// it over; every write of the first is refused from then on, in the
    /// write's own transaction, and the second's go through.
    #[test]
    fn a_holder_whose_lease_was_taken_over_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let (a, b) = (
            Ledger::open(&path, Bus::new()).unwrap(),
            Ledger::open(&path, Bus::new()).unwrap(),
        );
        let s = a.create_session("/w", "t").unwrap();
        a.acquire_lease(&s.id, "a", 60_000, |_| false)
            .unwrap()
            .unwrap();
        let first = user_message(&s.id);
        a.put_message(&first).unwrap();
        a.check_fence(&s.id).unwrap();
        // B takes over (A was declared dead, or its lease ran out).
        b.acquire_lease(&s.id, "b", 60_000, |h| h == "a")
            .unwrap()
            .unwrap();
        let before = b.read_messages(&s.id).unwrap();
        let fenced = |r: Result<()>| match r {
            Err(CoreError::Ledger(LedgerError::Fenced { session })) => assert_eq!(session, s.id),
            other => panic!("expected a fenced write, got {other:?}"),
        };
        fenced(a.check_fence(&s.id));
        fenced(a.put_message(&user_message(&s.id)));
        fenced(a.put_part(&text_part(&first, "late".into()), PartWrite::Changed));
        fenced(a.touch_session(&s.id));
        fenced(a.audit(&AuditEntry {
            seq: 0,
            session_id: s.id.clone(),
            message_id: None,
            call_id: None,
            at: 1,
            stage: "tool".into(),
            subject: "read".into(),
            plugin_hash: None,
            decision: "allowed".into(),
            rule: None,
            duration_us: None,
            outcome: None,
        }));
        fenced(a.set_session_permission(&s.id, &[]).map(|_| ()));
        assert_eq!(b.read_messages(&s.id).unwrap(), before);
        assert!(b.audit_trail(&s.id).unwrap().is_empty());
        // A's reads come from the rows now, not from its stale copy.
        assert_eq!(a.messages(&s.id).unwrap(), before);
        // The new holder writes as usual.
        b.put_part(&text_part(&first, "mine".into()), PartWrite::Changed)
            .unwrap();
        assert_eq!(b.read_messages(&s.id).unwrap()[0].parts.len(), 1);
    }

    #[test]
    fn the_copy_kept_while_holding_a_lease_equals_the_rows() {
        let l = ledger();
        let s = l.create_session("/w", "t").unwrap();
        let user = |n: u32| {
            MessageInfo::User(UserInfo {
                id: MessageId(id::ascending("msg")),
                session_id: s.id.clone(),
                time: MessageTime::at(n as i64),
                agent: "build".into(),
                model: ModelRef {
                    provider: "scripted".into(),
                    model: "x".into(),
                },
            })
        };
        // One message before the lease, more while it is held.
        let first = user(0);
        l.put_message(&first).unwrap();
        let me = l
            .acquire_lease(&s.id, "me", 60_000, |_| false)
            .unwrap()
            .unwrap();
        let mut tool = Part {
            id: id::ascending("prt").into(),
            session_id: s.id.clone(),
            message_id: first.id().clone(),
            body: PartBody::Tool {
                call_id: "c".into(),
                tool: "read".into(),
                state: ToolState::pending(),
                provider_executed: false,
                ignored: false,
            },
        };
        l.put_part(&tool, PartWrite::Changed).unwrap();
        if let PartBody::Tool { state, .. } = &mut tool.body {
            *state = state.start(serde_json::json!({"a": 1}), 2).unwrap();
        }
        l.put_part(&tool, PartWrite::Changed).unwrap();
        for n in 1..4 {
            let m = user(n);
            l.put_message(&m).unwrap();
            let p = Part {
                id: id::ascending("prt").into(),
                session_id: s.id.clone(),
                message_id: m.id().clone(),
                body: PartBody::StepStart {},
            };
            l.put_part(&p, PartWrite::Changed).unwrap();
        }
        let held = l.messages(&s.id).unwrap();
        assert_eq!(held, l.read_messages(&s.id).unwrap());
        let shared: Vec<MessageWithParts> = l
            .history(&s.id)
            .unwrap()
            .iter()
            .map(|m| (**m).clone())
            .collect();
        assert_eq!(shared, held);
        assert_eq!(held.len(), 4);
        assert_eq!(held[0].parts[0].tool_state().unwrap().status(), "running");
        l.release_lease(&s.id, &me).unwrap();
        assert!(l.held().is_empty());
        assert_eq!(l.messages(&s.id).unwrap(), held);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        drop(Ledger::open(&path, Bus::new()).unwrap());
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        match Ledger::open(&path, Bus::new()) {
            Err(CoreError::LedgerTooNew { found: 99, .. }) => {}
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => panic!("opened a newer ledger"),
        }
    }

    #[test]
    fn the_log_reaches_the_database_file_without_a_writer_paying_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let l = Ledger::open(&path, Bus::new()).unwrap();
        let s = l.create_session("/w", "t").unwrap();
        // What the first checkpoint found (the schema) is in the file by now.
        std::thread::sleep(Checkpointer::EVERY * 3);
        let before = std::fs::metadata(&path).unwrap().len();
        let info = user_message(&s.id);
        l.put_message(&info).unwrap();
        for n in 0..200 {
            let part = text_part(&info, format!("{n} {}", "x".repeat(500)));
            l.put_part(&part, PartWrite::Changed).unwrap();
        }
        // SQLite alone would leave 100 KB in the log (its own threshold is
        // 40 MB); the checkpoint thread copies it into the file.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::metadata(&path).unwrap().len() < before + 100_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file stayed at {} bytes",
                std::fs::metadata(&path).unwrap().len()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Dropping the last clone stops the thread (the test would hang otherwise).
        let clone = l.clone();
        drop(l);
        drop(clone);
        assert_eq!(
            Ledger::open(&path, Bus::new())
                .unwrap()
                .messages(&s.id)
                .unwrap()[0]
                .parts
                .len(),
            200
        );
    }

    #[test]
    fn message_headers_written_before_opencode_s_shapes_are_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(schema::MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        let (sid, user, answer) = (
            id::ascending("ses"),
            id::ascending("msg"),
            id::ascending("msg"),
        );
        c.execute(
            "INSERT INTO session (id, title, directory, created_at, updated_at) VALUES (?1, 't', '/w', 1, 1)",
            [&sid],
        )
        .unwrap();
        let old_user = json!({"role": "user", "id": user, "session_id": sid, "created": 5,
            "agent": "build", "model": {"provider": "scripted", "model": "x"}});
        let old_answer = json!({"role": "assistant", "id": answer, "session_id": sid,
            "parent_id": user, "agent": "build", "model": {"provider": "openai", "model": "gpt"},
            "created": 6, "completed": 9, "finish": "stop", "cost": 0.5,
            "error": {"name": "Provider", "message": "503 from the provider", "status": 503}});
        for (id, role, info) in [
            (&user, "user", &old_user),
            (&answer, "assistant", &old_answer),
        ] {
            c.execute(
                "INSERT INTO message (session_id, id, role, info, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 1, 1)",
                rusqlite::params![sid, id, role, info.to_string()],
            )
            .unwrap();
        }
        drop(c);

        let l = Ledger::open(&path, Bus::new()).unwrap();
        let messages = l.messages(&SessionId(sid.clone())).unwrap();
        let infos: Vec<_> = messages.iter().map(|m| m.info.clone()).collect();
        let MessageInfo::User(u) = &infos[0] else {
            panic!("{infos:?}")
        };
        assert_eq!(
            (u.time, u.model.provider.as_str()),
            (MessageTime::at(5), "scripted")
        );
        let MessageInfo::Assistant(a) = &infos[1] else {
            panic!("{infos:?}")
        };
        assert_eq!(a.parent_id.0, user);
        assert_eq!((a.mode.as_str(), a.model.model.as_str()), ("build", "gpt"));
        assert_eq!((a.time.created, a.time.completed), (6, Some(9)));
        assert_eq!((a.path.cwd.as_str(), a.path.root.as_str()), ("/w", "/w"));
        assert_eq!(
            a.error,
            Some(MessageError::Provider {
                message: "503 from the provider".into(),
                status: Some(503)
            })
        );
        assert_eq!(a.cost, 0.5);
    }

    #[test]
    fn a_ledger_from_before_the_schema_was_fixed_is_refused_with_a_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL,
                                   info TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        drop(c);
        match Ledger::open(&path, Bus::new()) {
            Err(e @ CoreError::LedgerPreRelease { .. }) => {
                assert!(e.to_string().contains("move it away"), "{e}")
            }
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => panic!("opened a ledger it cannot write"),
        }
    }

    #[test]
    fn a_ledger_of_schema_1_is_carried_over_and_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(schema::MIGRATIONS[0]).unwrap();
        c.execute_batch(
            r#"
            INSERT INTO session VALUES ('ses_1', 't', '/w', '[]', 1, 2);
            INSERT INTO message VALUES ('ses_1', 'msg_1', 'user',
                '{"role":"user","id":"msg_1","session_id":"ses_1","created":1,"agent":"build","model":{"provider":"scripted","model":"x"}}', 1, 1);
            INSERT INTO part VALUES ('ses_1', 'msg_1', 'prt_1', 'tool', 'c1', 'completed',
                '{"type":"tool","call_id":"c1","tool":"read","state":{"status":"completed","input":{"a":1},"output":"out","title":"","metadata":{},"time":{"start":3,"end":4}}}', 4);
            INSERT INTO part_event VALUES ('ses_1', 1, 'msg_1', 'prt_1', 'tool', 'c1', 'running', 3,
                '{"type":"tool","call_id":"c1","tool":"read","state":{"status":"running","input":{"a":1},"time":{"start":3}}}');
            INSERT INTO audit VALUES ('ses_1', 1, 'msg_1', 'c1', 3, 'tool', 'plugin:read', 'abc', 'allowed', NULL, 12, 'ok');
            PRAGMA user_version = 1;
            "#,
        )
        .unwrap();
        drop(c);
        let l = Ledger::open(&path, Bus::new()).unwrap();
        let s = SessionId("ses_1".into());
        assert_eq!(l.session(&s).unwrap().title, "t");
        let msgs = l.messages(&s).unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].info, user_message_with(&s, "msg_1", 1));
        match msgs[0].parts[0].tool_state().unwrap() {
            ToolState::Completed { input, output, .. } => {
                assert_eq!(
                    (input, output.as_str()),
                    (&serde_json::json!({"a": 1}), "out")
                )
            }
            other => panic!("{other:?}"),
        }
        let events = l.part_events(&s).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(
            events[0].part.tool_state().unwrap(),
            &ToolState::pending()
                .start(serde_json::json!({"a": 1}), 3)
                .unwrap()
        );
        let audit = l.audit_trail(&s).unwrap();
        assert_eq!(audit.len(), 1);
        assert_eq!(
            (
                audit[0].stage.as_str(),
                audit[0].plugin_hash.as_deref(),
                audit[0].duration_us,
                audit[0].rule.as_deref()
            ),
            ("tool", Some("abc"), Some(12), None)
        );
        // And it takes new writes in the new form.
        let info = user_message(&s);
        l.put_message(&info).unwrap();
        l.put_part(&text_part(&info, "hi".into()), PartWrite::Changed)
            .unwrap();
        assert_eq!(l.messages(&s).unwrap().len(), 2);
    }

    fn user_message_with(session: &SessionId, id: &str, created: i64) -> MessageInfo {
        MessageInfo::User(UserInfo {
            id: MessageId(id.into()),
            session_id: session.clone(),
            time: MessageTime::at(created),
            agent: "build".into(),
            model: ModelRef {
                provider: "scripted".into(),
                model: "x".into(),
            },
        })
    }

    #[test]
    fn a_call_is_one_audit_row_and_reads_back_entry_by_entry() {
        let l = ledger();
        let s = l.create_session("/w", "t").unwrap();
        let info = user_message(&s.id);
        l.put_message(&info).unwrap();
        let entry = |stage: &str, hash: Option<&str>, at: i64| AuditEntry {
            seq: 0,
            session_id: s.id.clone(),
            message_id: Some(info.id().clone()),
            call_id: Some("c1".into()),
            at,
            stage: stage.into(),
            subject: "read".into(),
            plugin_hash: hash.map(str::to_string),
            decision: "allowed".into(),
            rule: (stage == "permission").then(|| "read * allow".to_string()),
            duration_us: hash.map(|_| 40),
            outcome: Some("ok".into()),
        };
        let entries = vec![
            entry("permission", None, 10),
            entry("before", Some(&"a".repeat(64)), 10),
            entry("tool", Some(&"b".repeat(64)), 11),
            entry("after", Some(&"a".repeat(64)), 12),
        ];
        l.audit_all(&entries).unwrap();
        let rows: i64 = l
            .conn()
            .query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        let back = l.audit_trail(&s.id).unwrap();
        let expected: Vec<AuditEntry> = entries
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.seq = i as i64 + 1;
                e
            })
            .collect();
        assert_eq!(back, expected);
    }
}
