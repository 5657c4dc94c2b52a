//! The SQLite backend: one file, shared by every warden process on the
//! machine. Every SQL statement and every SQLite setting lives in this
//! folder, a module per kind of row.
//!
//! One connection serves every call of [`Store`], one call at a time: on the
//! caller's thread when the connection is free and the file's locks can be
//! had at once, else on the connection's own thread, which is the only one
//! that ever waits on a lock another process holds (`connection`). Values
//! are encoded for their rows before the call, so the connection does SQL
//! only. A second thread moves the write-ahead log into the file
//! (`checkpoint`).

mod audit;
mod check;
pub mod checkpoint;
mod codec;
mod connection;
mod export;
mod header;
mod lease;
mod messages;
mod phase;
mod queue;
pub mod schema;
mod sessions;
pub(crate) mod timeline;

pub use check::{IntegrityReport, check_file};

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, TransactionBehavior};
use warden_protocol::{
    MessageId, MessageInfo, MessageWithParts, Millis, Part, SessionId, SessionInfo,
};

use super::phase::{Phase, PhaseKind};
use super::store::{
    Fence, HolderIsDead, LeaseHeld, PermissionChange, PromptState, QueuedPrompt, SessionExport,
    StepWrite, Store, is_last_of_its_part, step_session, write_audit_only,
};
use super::{AuditEntry, LedgerError, PartEvent, TimelineRow};
use crate::clock::now_ms;
use checkpoint::Checkpointer;

type Result<T> = std::result::Result<T, LedgerError>;

/// The SQLite ledger.
pub struct SqliteStore {
    name: Arc<str>,
    conn: connection::Shared,
    /// The audit trail's keys of guest hashes.
    guests: Arc<audit::GuestKeys>,
    /// Stops with the store.
    _checkpointer: Option<Checkpointer>,
    /// The file, for watching other processes' writes (`None` in memory).
    path: Option<std::path::PathBuf>,
}

impl SqliteStore {
    /// Open (creating if needed) the ledger file at `path` and bring its
    /// schema up to date. A file that is not a ledger, or whose pages do not
    /// pass SQLite's quick check, is refused as damaged before anything is
    /// written to it.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                LedgerError::Storage(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let shown = path.display().to_string();
        let opened = (|| -> Result<SqliteStore> {
            let conn = Connection::open(path)?;
            conn.busy_timeout(connection::BUSY_WAIT)?;
            check::quick_check(&conn, &shown)?;
            let conn = Self::prepare(conn, &shown)?;
            // The checkpoint thread does the work; SQLite's own checkpoint on
            // commit stays only as a backstop, should the log ever reach 40 MB.
            conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
            let mut store = Self::start(conn, &shown)?;
            store._checkpointer = Some(Checkpointer::start(path)?);
            store.path = Some(path.to_path_buf());
            Ok(store)
        })();
        opened.map_err(|e| check::named(e, &shown))
    }

    /// A private in-memory ledger, for tests.
    pub fn in_memory() -> Result<SqliteStore> {
        let conn = Self::prepare(Connection::open_in_memory()?, ":memory:")?;
        Self::start(conn, ":memory:")
    }

    fn prepare(mut conn: Connection, name: &str) -> Result<Connection> {
        // WAL + NORMAL survives a killed process (only power loss can lose the
        // last transactions); the busy timeout lets processes share the file.
        conn.busy_timeout(connection::BUSY_WAIT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        schema::migrate(&mut conn, name)?;
        Ok(conn)
    }

    fn start(conn: Connection, name: &str) -> Result<SqliteStore> {
        Ok(SqliteStore {
            name: name.into(),
            conn: connection::Shared::start(conn, name)?,
            guests: Arc::new(audit::GuestKeys::default()),
            _checkpointer: None,
            path: None,
        })
    }

    /// Run `job` on the connection (see [`connection`]).
    async fn run<T: Send + 'static>(
        &self,
        job: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        self.conn.run(job).await
    }

    /// Run the write `job` (one that takes its transaction through
    /// [`write`]) on the connection, committed with the writes queued beside
    /// it when it has to wait (see [`connection`]).
    async fn write<T: Send + 'static>(
        &self,
        job: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        self.conn.write(job).await
    }

    /// Run `job` on the connection's thread: a read of a whole session or
    /// more, which should not hold an async worker.
    async fn run_there<T: Send + 'static>(
        &self,
        job: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        self.conn.run_there(job).await
    }
}

/// The one path every write to a session takes: one transaction (or, when
/// the connection's thread runs it with other writes, a savepoint in theirs;
/// see `connection`), and with a fence, the fence checked first inside it.
/// Every write takes the write lock when it begins (an immediate
/// transaction): a fenced write so no other process can take the lease
/// between the check and the write, and a write that reads first (a rule
/// change) because a deferred transaction that read cannot wait for the
/// lock: it fails at once with "database is locked" when another process
/// wrote meanwhile.
fn write<T>(
    conn: &mut Connection,
    session: &SessionId,
    fence: Option<&Fence>,
    f: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    if connection::in_group() {
        // Inside a transaction shared with other writes: a savepoint, so
        // this write fails (and rolls back) alone.
        let sp = conn.savepoint()?;
        if let Some(fence) = fence {
            lease::check_fence(&sp, session, fence)?;
        }
        let out = f(&sp)?;
        sp.commit()?;
        return Ok(out);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(fence) = fence {
        lease::check_fence(&tx, session, fence)?;
    }
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// Run a read of several queries in one read transaction: one snapshot of
/// the file, so a write another process commits between two of them (a
/// message, a part's rewritten body) is seen by all of them or by none.
fn snapshot<T>(conn: &mut Connection, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let tx = conn.transaction()?;
    let out = read(&tx)?;
    tx.commit()?;
    Ok(out)
}

#[async_trait]
impl Store for SqliteStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn watch_writes(&self) -> Option<crate::watch::Writes> {
        crate::watch::Writes::sqlite(self.path.as_deref()?)
    }

    async fn create_session(&self, info: &SessionInfo) -> Result<()> {
        let info = info.clone();
        self.write(move |c| write(c, &info.id, None, |tx| sessions::create(tx, &info)))
            .await
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        let id = id.clone();
        self.run(move |c| sessions::get(c, &id)).await
    }

    async fn sessions(&self) -> Result<Vec<SessionInfo>> {
        self.run_there(|c| sessions::all(c)).await
    }

    async fn update_permission(
        &self,
        id: &SessionId,
        fence: Option<&Fence>,
        change: PermissionChange,
    ) -> Result<Option<SessionInfo>> {
        let (id, fence) = (id.clone(), fence.cloned());
        // Taken once the write lock is held: a call that found the file busy
        // before that runs again with the change still in place.
        let change = std::sync::Mutex::new(Some(change));
        self.write(move |c| {
            write(c, &id, fence.as_ref(), |tx| {
                let change = change
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| {
                        LedgerError::Storage("a rule change was applied twice (a bug)".into())
                    })?;
                if !sessions::update_permission(tx, &id, now_ms(), change)? {
                    return Ok(None);
                }
                sessions::get(tx, &id)
            })
        })
        .await
    }

    async fn delete_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        let (id, fence) = (id.clone(), fence.cloned());
        self.write(move |c| write(c, &id, fence.as_ref(), |tx| sessions::delete(tx, &id)))
            .await
    }

    async fn touch_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        let (id, fence) = (id.clone(), fence.cloned());
        self.write(move |c| {
            write(c, &id, fence.as_ref(), |tx| {
                sessions::touch(tx, &id, now_ms())
            })
        })
        .await
    }

    async fn put_message(&self, info: &MessageInfo, fence: Option<&Fence>) -> Result<bool> {
        let (info, fence) = (info.clone(), fence.cloned());
        self.write(move |c| {
            write(c, info.session_id(), fence.as_ref(), |tx| {
                messages::put_message(tx, &info, now_ms())
            })
        })
        .await
    }

    async fn put_part(
        &self,
        part: &Part,
        timeline: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let body = messages::encode_part(part)?;
        let (part, audit, fence) = (part.clone(), audit.to_vec(), fence.cloned());
        let timeline = timeline.map(|t| t.started_with.cloned());
        let guests = self.guests.clone();
        self.write(move |c| {
            write(c, &part.session_id, fence.as_ref(), |tx| {
                let row = timeline.as_ref().map(|w| w.as_ref());
                messages::put_part(tx, &guests, &part, &body, row, &audit, now_ms())
            })
        })
        .await
    }

    async fn write_step(&self, step: &StepWrite<'_>, fence: Option<&Fence>) -> Result<bool> {
        let Some(session) = step_session(step)? else {
            return write_audit_only(self, step, fence).await;
        };
        // Encoded before the call, so the connection does SQL only: each
        // part's row (its last change in this write) and each timeline row.
        type Row = (Option<serde_json::Value>, Option<Millis>);
        let parts: Vec<(Part, Option<String>, Option<Row>)> = step
            .parts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let body = match is_last_of_its_part(step.parts, i) {
                    true => Some(messages::encode_part(c.part)?),
                    false => None,
                };
                let timeline = c.timeline.map(|t| (t.started_with.cloned(), t.at));
                Ok((c.part.clone(), body, timeline))
            })
            .collect::<Result<_>>()?;
        let (session, header) = (session.clone(), step.header.cloned());
        let (audit, marks, fence) = (step.audit.to_vec(), step.marks.to_vec(), fence.cloned());
        let guests = self.guests.clone();
        self.write(move |c| {
            write(c, &session, fence.as_ref(), |tx| {
                let now = now_ms();
                if let Some(info) = &header
                    && !messages::put_message(tx, info, now)?
                {
                    return Ok(false);
                }
                for (part, body, timeline) in &parts {
                    let row = timeline.as_ref().map(|(w, _)| w.as_ref());
                    let at = timeline.as_ref().and_then(|(_, at)| *at).unwrap_or(now);
                    match body {
                        Some(body) => messages::put_part(tx, &guests, part, body, row, &[], at)?,
                        None => {
                            if let Some(started_with) = row {
                                timeline::insert(tx, part, started_with, at)?;
                            }
                        }
                    }
                }
                if !audit.is_empty() {
                    audit::insert(tx, &guests, &audit)?;
                }
                let message = header.as_ref().map(|i| i.id());
                phase::insert(tx, &session, message, &marks)?;
                Ok(true)
            })
        })
        .await
    }

    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        let session = session.clone();
        // Headers, parts and long bodies are several queries.
        self.run_there(move |c| snapshot(c, |tx| messages::read(tx, &session)))
            .await
    }

    async fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>> {
        let session = session.clone();
        // The timeline and its parts' long bodies are several queries.
        self.run_there(move |c| snapshot(c, |tx| timeline::read(tx, &session)))
            .await
    }

    async fn audit(
        &self,
        session: &SessionId,
        entries: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let (session, entries, fence) = (session.clone(), entries.to_vec(), fence.cloned());
        let guests = self.guests.clone();
        self.write(move |c| {
            write(c, &session, fence.as_ref(), |tx| {
                audit::insert(tx, &guests, &entries)
            })
        })
        .await
    }

    async fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>> {
        let session = session.clone();
        self.run_there(move |c| audit::read(c, &session)).await
    }

    async fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let (session, message, marks, fence) = (
            session.clone(),
            message.cloned(),
            marks.to_vec(),
            fence.cloned(),
        );
        self.write(move |c| {
            write(c, &session, fence.as_ref(), |tx| {
                phase::insert(tx, &session, message.as_ref(), &marks)
            })
        })
        .await
    }

    async fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        let session = session.clone();
        self.run_there(move |c| phase::read(c, &session)).await
    }

    async fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: Arc<HolderIsDead>,
    ) -> Result<std::result::Result<Fence, LeaseHeld>> {
        let (session, holder) = (session.clone(), holder.to_string());
        self.run(move |c| {
            let now = now_ms();
            lease::acquire(c, &session, &holder, now + ttl_ms, now, &*holder_is_dead)
        })
        .await
    }

    async fn renew_lease(&self, session: &SessionId, fence: &Fence, ttl_ms: i64) -> Result<bool> {
        let (session, fence) = (session.clone(), fence.clone());
        self.run(move |c| lease::renew(c, &session, &fence, now_ms() + ttl_ms))
            .await
    }

    async fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        let (session, fence) = (session.clone(), fence.clone());
        self.run(move |c| lease::release(c, &session, &fence)).await
    }

    async fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>> {
        self.run_there(|c| lease::all(c)).await
    }

    async fn lease(&self, session: &SessionId) -> Result<Option<(String, i64)>> {
        let session = session.clone();
        self.run(move |c| lease::one(c, &session, now_ms())).await
    }

    async fn check_fence(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        let (session, fence) = (session.clone(), fence.clone());
        self.run(move |c| lease::check_fence(c, &session, &fence))
            .await
    }

    async fn enqueue_prompt(&self, session: &SessionId, body: &str) -> Result<i64> {
        let (session, body) = (session.clone(), body.to_string());
        self.write(move |c| {
            write(c, &session, None, |tx| {
                queue::enqueue(tx, &session, &body, now_ms())
            })
        })
        .await
    }

    async fn open_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
        let session = session.clone();
        self.run(move |c| queue::open(c, &session)).await
    }

    async fn queued_prompt(&self, number: i64) -> Result<Option<QueuedPrompt>> {
        self.run(move |c| queue::get(c, number)).await
    }

    async fn take_prompt(
        &self,
        session: &SessionId,
        number: i64,
        message: &MessageId,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        let (session, message, fence) = (session.clone(), message.clone(), fence.cloned());
        self.write(move |c| {
            write(c, &session, fence.as_ref(), |tx| {
                queue::take(tx, &session, number, &message)
            })
        })
        .await
    }

    async fn settle_prompt(
        &self,
        session: &SessionId,
        number: i64,
        state: &PromptState,
        fence: Option<&Fence>,
    ) -> Result<()> {
        let (session, state, fence) = (session.clone(), state.clone(), fence.cloned());
        self.write(move |c| {
            write(c, &session, fence.as_ref(), |tx| {
                queue::settle(tx, &session, number, &state, now_ms())
            })
        })
        .await
    }

    async fn sessions_with_open_prompts(&self) -> Result<Vec<SessionId>> {
        self.run(|c| queue::sessions_with_open(c)).await
    }

    async fn checkpoint(&self) -> Result<()> {
        // On the connection's thread: it copies the log and syncs the file.
        self.run_there(|c| {
            // A checkpoint that meets a reader, a writer or another checkpoint
            // (the checkpoint thread's) reports it in its first column rather
            // than failing, and does not wait for that last one: try again
            // until it gets through.
            let deadline = std::time::Instant::now() + connection::BUSY_WAIT;
            loop {
                let busy: i64 =
                    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
                if busy == 0 {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err(LedgerError::Storage(
                        "the ledger's write-ahead log could not be moved into the file: other connections kept it busy".into(),
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
        .await
    }

    async fn export_session(&self, id: &SessionId) -> Result<Option<SessionExport>> {
        let id = id.clone();
        self.run_there(move |c| snapshot(c, |tx| export::export(tx, &id)))
            .await
    }

    async fn import_session(&self, export: &SessionExport) -> Result<bool> {
        let export = export.clone();
        let guests = self.guests.clone();
        self.run_there(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if !export::import(&tx, &guests, &export)? {
                return Ok(false);
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }
}
