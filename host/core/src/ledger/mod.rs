//! The session ledger: an append-mostly record of sessions, messages and
//! parts, which the loop re-reads every round. Nothing the loop needs lives
//! only in memory.
//!
//! Long: the one facade every write goes through; publish-after-commit and the fence rule are kept beside every method.
//!
//! Two layers. [`Store`] (warden-ledger's `store.rs`) is the storage
//! interface a backend implements — sessions, messages, parts, timeline,
//! audit, phases, leases and the fenced write — with its own error type and
//! no bus or cache; warden-ledger's `sqlite/` implements it on one SQLite
//! file and `postgres/` on a database several hosts share. [`Ledger`]
//! (this file) is what the rest of the core uses: it
//! holds an `Arc<dyn Store>`, publishes every write on the [`Bus`] after it
//! commits, keeps the fences of the leases this process holds (and passes
//! them to every write of those sessions), and keeps a copy of the held
//! sessions' messages so a round re-reads its history without decoding it.
//! Event order and cache coherence are written here once, for every backend.
//!
//! The `Ledger` methods are async and await the store directly: no thread
//! blocks on a ledger call, so a backend may be a network client on a
//! single-threaded runtime. The locks here (fences, held copy) are held only
//! between awaits, never across one.

pub mod audit_query;
mod queue;

// The storage below, from warden-ledger (the only crate with a driver).
pub use warden_ledger::{
    AuditEntry, Fence, IntegrityReport, LeaseHeld, LedgerError, PartChange, PartEvent, PromptState,
    QueuedPrompt, SqliteStore, StepWrite, Store, TimelineRow, check_file, counted, id, location,
    migrate, outbox, phase, postgres, sqlite, store, watch,
};

pub use audit_query::{AuditFilter, DecisionClass};

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use warden_protocol::{
    Event, MessageId, MessageInfo, MessageWithParts, Millis, Part, PartBody, Rule, SessionId,
    SessionInfo, SessionTime,
};

use crate::bus::Bus;
use crate::error::{CoreError, Result};
use phase::{Phase, PhaseKind};
use warden_ledger::clock::now_ms;

/// How a part write is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartWrite<'a> {
    /// A new part or a finished change: the row, and for a tool call a
    /// `part_event` (its state transitions are the replayable timeline).
    Changed,
    /// Streamed text appended: the row only; the bus carries the delta.
    Delta(&'a str),
}

/// A part change written by [`Ledger::write_step`].
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub part: &'a Part,
    /// For a tool call's state change: its timeline row.
    pub timeline: Option<TimelineRow<'a>>,
    /// Streamed text appended, which the bus carries.
    pub delta: Option<&'a str>,
    /// Published already (a state clients saw before it was written).
    pub announced: bool,
}

impl<'a> Change<'a> {
    /// A part's new content, published once written.
    pub fn of(part: &'a Part) -> Change<'a> {
        Change {
            part,
            timeline: None,
            delta: None,
            announced: false,
        }
    }

    /// A part written as [`Ledger::put_part`] writes it.
    pub fn put(part: &'a Part, write: PartWrite<'a>) -> Change<'a> {
        Change {
            timeline: timeline_of(part, write, None),
            delta: match write {
                PartWrite::Delta(d) => Some(d),
                PartWrite::Changed => None,
            },
            ..Change::of(part)
        }
    }

    /// A tool call's new state, with its timeline row.
    pub fn transition(part: &'a Part, row: TimelineRow<'a>) -> Change<'a> {
        Change {
            timeline: Some(row),
            ..Change::of(part)
        }
    }
}

/// The timeline row a part write records: a tool call's changed state's
/// (`row`, or the default); none for streamed text or another part.
fn timeline_of<'a>(
    part: &Part,
    write: PartWrite<'_>,
    row: Option<TimelineRow<'a>>,
) -> Option<TimelineRow<'a>> {
    match (write, &part.body) {
        (PartWrite::Changed, PartBody::Tool { .. }) => Some(row.unwrap_or_default()),
        _ => None,
    }
}

/// What this process keeps of a session it holds the lease of.
struct HeldSession {
    /// Its messages, in id order, shared with the rounds that read them.
    messages: Vec<Arc<MessageWithParts>>,
    /// Its own permission rules, which every permission decision of its
    /// calls reads.
    rules: Arc<[Rule]>,
    /// Which copy this is (a copy loaded again after the lease came back
    /// is another), and how many changes it has had: a reader's
    /// [`History`] names both, to be told only what changed since.
    load: u64,
    changes: u64,
    /// The latest changes, oldest first: (change number, the index of the
    /// message it wrote). Later messages may have moved by an insert, so a
    /// reader takes everything from the lowest index on.
    touched: VecDeque<(u64, usize)>,
}

/// How many of a held session's latest changes are remembered for
/// [`Ledger::refresh`]; a reader further behind reads the history whole.
const TOUCHED: usize = 1024;

impl HeldSession {
    fn new(messages: Vec<Arc<MessageWithParts>>, rules: Arc<[Rule]>) -> HeldSession {
        static LOADS: AtomicU64 = AtomicU64::new(1);
        HeldSession {
            messages,
            rules,
            load: LOADS.fetch_add(1, Ordering::Relaxed),
            changes: 0,
            touched: VecDeque::new(),
        }
    }

    fn touch(&mut self, index: usize) {
        self.changes += 1;
        if self.touched.len() == TOUCHED {
            self.touched.pop_front();
        }
        self.touched.push_back((self.changes, index));
    }

    /// A header written: its message's, or a new message's.
    fn put_message(&mut self, info: &MessageInfo) {
        let held = &mut self.messages;
        let i = match held.binary_search_by(|m| m.info.id().cmp(info.id())) {
            Ok(i) => {
                Arc::make_mut(&mut held[i]).info = info.clone();
                i
            }
            Err(i) => {
                held.insert(
                    i,
                    Arc::new(MessageWithParts {
                        info: info.clone(),
                        parts: Vec::new(),
                    }),
                );
                i
            }
        };
        self.touch(i);
    }

    /// A part written, into its message (held already: a part's message is
    /// written first).
    fn put_part(&mut self, part: &Part) {
        let Ok(m) = self
            .messages
            .binary_search_by(|m| m.info.id().cmp(&part.message_id))
        else {
            return;
        };
        let parts = &mut Arc::make_mut(&mut self.messages[m]).parts;
        match parts.binary_search_by(|p| p.id.cmp(&part.id)) {
            Ok(i) => parts[i] = part.clone(),
            Err(i) => parts.insert(i, part.clone()),
        }
        self.touch(m);
    }

    /// Bring `history` up to this copy: only the messages from the first
    /// one changed since it was last brought up to date, when this copy
    /// still remembers that far back.
    fn refresh(&self, history: &mut History) {
        let from = match history.seen {
            Some((load, seen)) if load == self.load && seen == self.changes => {
                Some(self.messages.len().min(history.messages.len()))
            }
            Some((load, seen))
                if load == self.load
                    && self
                        .touched
                        .front()
                        .is_some_and(|&(first, _)| first <= seen + 1) =>
            {
                self.touched
                    .iter()
                    .rev()
                    .take_while(|&&(change, _)| change > seen)
                    .map(|&(_, i)| i)
                    .min()
            }
            _ => None,
        };
        let from = from.unwrap_or(0).min(history.messages.len());
        history.messages.truncate(from);
        history.messages.extend_from_slice(&self.messages[from..]);
        history.changed_from = from;
        history.seen = Some((self.load, self.changes));
    }
}

/// A session's messages in id order, as a reader last saw them, brought up
/// to date by [`Ledger::refresh`]: while this process holds the session's
/// lease that copies only what changed since, so a round of a long session
/// costs what its last step wrote, not the session's length.
#[derive(Debug, Default)]
pub struct History {
    pub messages: Vec<Arc<MessageWithParts>>,
    /// The index of the first message the last refresh replaced: those
    /// before it are the very ones (the same `Arc`s) the reader had.
    pub changed_from: usize,
    /// The held copy and its change number this was brought up to.
    seen: Option<(u64, u64)>,
}

type Held = HashMap<SessionId, HeldSession>;

/// The ledger. Cheap to clone; all clones share one store, bus and cache.
#[derive(Clone)]
pub struct Ledger {
    store: Arc<dyn Store>,
    bus: Bus,
    /// The messages and rules of the sessions this process holds the runner
    /// lease of, kept equal to their rows: loaded whole when the lease is
    /// taken, updated by every write after it commits, dropped when the
    /// lease is given back or found taken over. While the lease is held
    /// nobody else may write them, so a round of the loop re-reads its
    /// history without decoding it again, and a call's permission decisions
    /// read the session's rules without a query.
    held: Arc<Mutex<Held>>,
    /// The fences of the sessions this process holds the lease of, from
    /// taking the lease until giving it back. Kept when a renewal fails (the
    /// cached copy goes, the fence stays), so a stale runner stays fenced.
    fences: Arc<Mutex<HashMap<SessionId, Fence>>>,
    /// Other processes' writes to a ledger shared without a relay, told to
    /// every waiter of this process from one watch (see [`Ledger::writes`]).
    writes: Arc<Mutex<Option<tokio::sync::broadcast::Sender<()>>>>,
}

impl Ledger {
    /// Open (creating if needed) the SQLite ledger at `path` and bring its
    /// schema up to date.
    ///
    /// A file that is not a ledger, or whose pages do not pass SQLite's quick
    /// check, is refused as damaged (`LedgerError::Damaged`, which says what
    /// to do) before anything is written to it.
    pub fn open(path: &Path, bus: Bus) -> Result<Ledger> {
        Ok(Ledger::new(Arc::new(SqliteStore::open(path)?), bus))
    }

    /// The ledger on `store`, publishing on `bus`. A store shared by
    /// several hosts connects `bus` to them here (its relay), so every
    /// event published below reaches their buses too, and theirs this one.
    pub fn new(store: Arc<dyn Store>, bus: Bus) -> Ledger {
        let fences: Arc<Mutex<HashMap<SessionId, Fence>>> = Arc::new(Mutex::new(HashMap::new()));
        let epochs = fences.clone();
        bus.tag_epochs(Arc::new(move |session| {
            let fences = epochs.lock().unwrap_or_else(|p| p.into_inner());
            fences.get(session).map(|f| f.epoch)
        }));
        if let Some(outbox) = store.outbox() {
            crate::hosts::relay::start(outbox, &bus);
        }
        Ledger {
            store,
            bus,
            held: Arc::new(Mutex::new(HashMap::new())),
            fences,
            writes: Default::default(),
        }
    }

    /// A private in-memory ledger, for tests.
    #[cfg(test)]
    pub(crate) fn in_memory(bus: Bus) -> Result<Ledger> {
        Ok(Ledger::new(Arc::new(SqliteStore::in_memory()?), bus))
    }

    /// Make everything committed durable in the main store (SQLite: move
    /// the write-ahead log into the file, e.g. before measuring its size).
    pub async fn checkpoint(&self) -> Result<()> {
        Ok(self.store.checkpoint().await?)
    }

    /// Where the ledger lives.
    pub fn path(&self) -> &str {
        self.store.name()
    }

    /// The relayed events past number `after` (of one session, or all), for
    /// a client resuming its stream; `None` when this ledger relays nothing
    /// (one machine's). See `store.rs`.
    pub async fn replay(
        &self,
        after: i64,
        session: Option<&SessionId>,
    ) -> Result<Option<store::Replay>> {
        Ok(self.store.replay(after, session).await?)
    }

    /// The bus every write is published on.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // Nothing panics while holding these locks; a poisoned one is usable.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fences(&self) -> MutexGuard<'_, HashMap<SessionId, Fence>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence to pass with a write to `session`: this process's, if it
    /// holds the session's lease.
    fn fence(&self, session: &SessionId) -> Option<Fence> {
        self.fences().get(session).cloned()
    }

    /// Run a write of `session` with its fence; a refused one (the lease was
    /// taken over) drops the held copy, which is no longer this process's.
    async fn write<T>(
        &self,
        session: &SessionId,
        work: impl AsyncFnOnce(Option<&Fence>) -> store::Result<T>,
    ) -> Result<T> {
        let fence = self.fence(session);
        let result = work(fence.as_ref()).await;
        if let Err(LedgerError::Fenced { .. }) = &result {
            self.held().remove(session);
        }
        Ok(result?)
    }

    /// Whether this process still holds the session's lease at the epoch it
    /// took it at: checked before each step and each model request, so a
    /// runner that lost its session starts nothing new. `Ok` for sessions
    /// this process does not hold (nothing to check).
    pub async fn check_fence(&self, session: &SessionId) -> Result<()> {
        let Some(fence) = self.fence(session) else {
            return Ok(());
        };
        let result = self.store.check_fence(session, &fence).await;
        if result.is_err() {
            self.held().remove(session);
        }
        Ok(result?)
    }

    // ---- sessions ----

    /// Create a session working in `directory`.
    pub async fn create_session(&self, directory: &str, title: &str) -> Result<SessionInfo> {
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
        self.store.create_session(&info).await?;
        self.bus.publish(Event::SessionCreated {
            session: info.clone(),
        });
        Ok(info)
    }

    /// A session, or `SessionNotFound`.
    pub async fn session(&self, id: &SessionId) -> Result<SessionInfo> {
        self.store
            .session(id)
            .await?
            .ok_or_else(|| CoreError::SessionNotFound(id.clone()))
    }

    /// The session's own permission rules as they stand now (from the held
    /// copy while this process holds its lease), or `SessionNotFound`.
    pub async fn session_rules(&self, id: &SessionId) -> Result<Arc<[Rule]>> {
        if let Some(held) = self.held().get(id) {
            return Ok(held.rules.clone());
        }
        Ok(Arc::from(self.session(id).await?.permission))
    }

    /// Every session, newest first.
    pub async fn sessions(&self) -> Result<Vec<SessionInfo>> {
        Ok(self.store.sessions().await?)
    }

    /// Replace the session's own permission rules.
    pub async fn set_session_permission(
        &self,
        id: &SessionId,
        rules: &[Rule],
    ) -> Result<SessionInfo> {
        let rules = rules.to_vec();
        self.update_session_permission(id, move |current| *current = rules)
            .await
    }

    /// Change the session's own rules in one transaction, so two changes at
    /// once (two prompts' tool switches, two `always` answers) both land.
    pub async fn update_session_permission(
        &self,
        id: &SessionId,
        change: impl FnOnce(&mut Vec<Rule>) + Send + 'static,
    ) -> Result<SessionInfo> {
        let info = self
            .write(id, async |fence| {
                self.store
                    .update_permission(id, fence, Box::new(change))
                    .await
            })
            .await?
            .ok_or_else(|| CoreError::SessionNotFound(id.clone()))?;
        if let Some(held) = self.held().get_mut(id) {
            held.rules = Arc::from(info.permission.as_slice());
        }
        self.bus.publish(Event::SessionUpdated {
            session: info.clone(),
        });
        Ok(info)
    }

    /// Delete a session and everything recorded about it.
    pub async fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.held().remove(id);
        let deleted = self
            .write(id, async |fence| self.store.delete_session(id, fence).await)
            .await?;
        self.fences().remove(id);
        if !deleted {
            return Err(CoreError::SessionNotFound(id.clone()));
        }
        Ok(())
    }

    /// Mark the session as just used.
    pub async fn touch_session(&self, id: &SessionId) -> Result<()> {
        if !self
            .write(id, async |fence| self.store.touch_session(id, fence).await)
            .await?
        {
            return Err(CoreError::SessionNotFound(id.clone()));
        }
        Ok(())
    }

    // ---- messages and parts ----

    /// Insert or update a message header.
    pub async fn put_message(&self, info: &MessageInfo) -> Result<()> {
        let session = info.session_id();
        if !self
            .write(session, async |fence| {
                self.store.put_message(info, fence).await
            })
            .await?
        {
            return Err(CoreError::SessionNotFound(session.clone()));
        }
        if let Some(held) = self.held().get_mut(session) {
            held.put_message(info);
        }
        self.bus
            .publish(Event::MessageUpdated { info: info.clone() });
        Ok(())
    }

    /// One transaction of a step (see [`Store::write_step`]): its header
    /// when given, its part `changes` in order, `audit` and `marks`. Then
    /// the held copy takes each part's last state and the header, and each
    /// part not announced before is published (its last state), then the
    /// header.
    pub async fn write_step(
        &self,
        header: Option<&MessageInfo>,
        changes: &[Change<'_>],
        audit: &[AuditEntry],
        marks: &[(Millis, PhaseKind)],
    ) -> Result<()> {
        let session = match (header, changes.first()) {
            (Some(info), _) => info.session_id(),
            (None, Some(change)) => &change.part.session_id,
            (None, None) => return self.audit_all(audit).await,
        };
        let parts: Vec<PartChange<'_>> = changes
            .iter()
            .map(|c| PartChange {
                part: c.part,
                timeline: c.timeline,
            })
            .collect();
        let write = StepWrite {
            header,
            parts: &parts,
            audit,
            marks,
        };
        if !self
            .write(session, async |fence| {
                self.store.write_step(&write, fence).await
            })
            .await?
        {
            return Err(CoreError::SessionNotFound(session.clone()));
        }
        let last = |i: usize| store::is_last_of_its_part(&parts, i);
        if let Some(held) = self.held().get_mut(session) {
            if let Some(info) = header {
                held.put_message(info);
            }
            for (i, change) in changes.iter().enumerate() {
                if last(i) {
                    held.put_part(change.part);
                }
            }
        }
        for (i, change) in changes.iter().enumerate() {
            if last(i) && !change.announced {
                self.bus.publish(Event::PartUpdated {
                    part: change.part.clone(),
                    delta: change.delta.map(str::to_string),
                });
            }
        }
        if let Some(info) = header {
            self.bus
                .publish(Event::MessageUpdated { info: info.clone() });
        }
        Ok(())
    }

    /// Insert or update a part; see [`PartWrite`] for what is recorded.
    pub async fn put_part(&self, part: &Part, write: PartWrite<'_>) -> Result<()> {
        self.put_part_with_audit(part, write, None, &[]).await
    }

    /// Record a tool part's new state (its row and a timeline row, see
    /// [`TimelineRow`]) and `audit` in one transaction, then publish the
    /// part: a reader never sees a call that ended without the decisions
    /// that ended it, or the reverse.
    pub async fn transition(
        &self,
        part: &Part,
        row: TimelineRow<'_>,
        audit: &[AuditEntry],
    ) -> Result<()> {
        if !matches!(part.body, PartBody::Tool { .. }) {
            return Err(CoreError::Internal(
                "a state transition was written for a part that is not a tool call".into(),
            ));
        }
        self.put_part_with_audit(part, PartWrite::Changed, Some(row), audit)
            .await
    }

    async fn put_part_with_audit(
        &self,
        part: &Part,
        write: PartWrite<'_>,
        row: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
    ) -> Result<()> {
        // The timeline is of tool calls: their states are what a trace
        // replays. Other parts keep their content in their own row.
        let timeline = timeline_of(part, write, row);
        self.write(&part.session_id, async |fence| {
            self.store.put_part(part, timeline, audit, fence).await
        })
        .await?;
        let delta = match write {
            PartWrite::Delta(d) => Some(d.to_string()),
            PartWrite::Changed => None,
        };
        if let Some(held) = self.held().get_mut(&part.session_id) {
            held.put_part(part);
        }
        self.bus.publish(Event::PartUpdated {
            part: part.clone(),
            delta,
        });
        Ok(())
    }

    /// Every message of a session with its parts, in id order.
    pub async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        if let Some(held) = self.held().get(session) {
            return Ok(held
                .messages
                .iter()
                .map(|m| MessageWithParts::clone(m))
                .collect());
        }
        self.read_messages(session).await
    }

    /// The same messages, shared: cheap to take every round while this
    /// process holds the session's lease (nothing is copied but pointers).
    pub async fn history(&self, session: &SessionId) -> Result<Vec<Arc<MessageWithParts>>> {
        if let Some(held) = self.held().get(session) {
            return Ok(held.messages.clone());
        }
        Ok(self
            .read_messages(session)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    /// Bring `history` up to date with the session's messages: from the
    /// held copy, only what changed since `history` last saw it; else read
    /// whole from the store (`changed_from` is then 0).
    pub async fn refresh(&self, session: &SessionId, history: &mut History) -> Result<()> {
        if let Some(held) = self.held().get(session) {
            held.refresh(history);
            return Ok(());
        }
        history.messages = self
            .read_messages(session)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        history.changed_from = 0;
        history.seen = None;
        Ok(())
    }

    /// Publish the session's latest turn again as it is recorded (the last
    /// user message and everything after it), for clients that may have
    /// missed its last changes: those of a runner that died before its
    /// notices went out.
    /// Only on a ledger shared by hosts (a relay connected): elsewhere
    /// every client is this process's own and missed nothing.
    pub async fn republish_latest(&self, session: &SessionId) -> Result<()> {
        if !self.bus.is_relayed() {
            return Ok(());
        }
        let history = self.history(session).await?;
        let from = history
            .iter()
            .rposition(|m| m.info.role() == "user")
            .unwrap_or(0);
        for m in &history[from..] {
            self.bus.publish(Event::MessageUpdated {
                info: m.info.clone(),
            });
            for part in &m.parts {
                self.bus.publish(Event::PartUpdated {
                    part: part.clone(),
                    delta: None,
                });
            }
        }
        Ok(())
    }

    /// The messages as the store has them, past the held copy.
    async fn read_messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        Ok(self.store.messages(session).await?)
    }

    /// One message with its parts.
    pub async fn message(
        &self,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        // Shared copies: only the message found is cloned, not the history.
        Ok(self
            .history(session)
            .await?
            .iter()
            .find(|m| m.info.id() == id)
            .map(|m| MessageWithParts::clone(m)))
    }

    /// The recorded timeline of the session's parts, in order.
    pub async fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>> {
        Ok(self.store.part_events(session).await?)
    }

    // ---- audit and phases ----

    /// Record a decision or guest call.
    pub async fn audit(&self, entry: &AuditEntry) -> Result<()> {
        self.audit_all(std::slice::from_ref(entry)).await
    }

    /// Record a call's entries, one row per call, in one transaction.
    pub async fn audit_all(&self, entries: &[AuditEntry]) -> Result<()> {
        // One transaction per session (in practice there is one).
        let mut rest = entries;
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .take_while(|e| e.session_id == first.session_id)
                .count();
            let (these, after) = rest.split_at(n);
            let session = &first.session_id;
            self.write(session, async |fence| {
                self.store.audit(session, these, fence).await
            })
            .await?;
            rest = after;
        }
        Ok(())
    }

    /// The session's audit trail, entry by entry, in order.
    pub async fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>> {
        Ok(self.store.audit_trail(session).await?)
    }

    /// Record phase marks of a session, `(when, what)`, in one transaction
    /// (fenced: a runner that lost its lease marks nothing).
    pub async fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
    ) -> Result<()> {
        if marks.is_empty() {
            return Ok(());
        }
        self.write(session, async |fence| {
            self.store.mark_phases(session, message, marks, fence).await
        })
        .await
    }

    /// A session's phase marks, in order.
    pub async fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        Ok(self.store.phases(session).await?)
    }

    // ---- leases ----

    /// Take the session's runner lease for `ttl_ms` (or renew it, when this
    /// holder has it already) and return its [`Fence`]. Fails with the current
    /// holder when someone else holds an unexpired lease, unless
    /// `holder_is_dead` says that holder is gone. Taking a lease from another
    /// holder (or anew) starts a new epoch, which fences off every write of
    /// the previous holder from then on. The session's messages are loaded
    /// into the held copy.
    pub async fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<std::result::Result<Fence, LeaseHeld>> {
        let taken = self
            .store
            .acquire_lease(session, holder, ttl_ms, Arc::new(holder_is_dead))
            .await?;
        let fence = match taken {
            Ok(fence) => fence,
            Err(held) => return Ok(Err(held)),
        };
        self.fences().insert(session.clone(), fence.clone());
        if !self.held().contains_key(session) {
            let info = self.session(session).await?;
            let messages = self
                .read_messages(session)
                .await?
                .into_iter()
                .map(Arc::new)
                .collect();
            self.held()
                .entry(session.clone())
                .or_insert_with(|| HeldSession::new(messages, Arc::from(info.permission)));
        }
        Ok(Ok(fence))
    }

    /// Extend a lease this holder has at this epoch; `false` if it was taken
    /// over meanwhile (its writes are fenced off from then on).
    pub async fn renew_lease(
        &self,
        session: &SessionId,
        fence: &Fence,
        ttl_ms: i64,
    ) -> Result<bool> {
        let renewed = self.store.renew_lease(session, fence, ttl_ms).await?;
        if !renewed {
            // Someone else holds it now and may write: stop trusting the copy.
            self.held().remove(session);
        }
        Ok(renewed)
    }

    /// Every lease: (session, holder, expiry). A lease outlives its run only
    /// when the run's process died.
    pub async fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>> {
        Ok(self.store.leases().await?)
    }

    /// The session's lease if it is held: its holder and the milliseconds
    /// left before it expires (zero or less: expired).
    pub async fn lease(&self, session: &SessionId) -> Result<Option<(String, i64)>> {
        Ok(self.store.lease(session).await?)
    }

    /// Told of every write to the ledger (by any process, this one's too)
    /// where other processes share it without a relay (a SQLite file); see
    /// warden-ledger's `watch.rs`. One watch serves every receiver of this
    /// process (a kernel watch each would run into the limit on them): a
    /// task started by the first receiver, which ends at the first change
    /// after the last receiver went. `None` where nothing can be watched.
    pub fn writes(&self) -> Option<tokio::sync::broadcast::Receiver<()>> {
        let mut slot = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = slot.as_ref() {
            return Some(tx.subscribe());
        }
        let mut watch = self.store.watch_writes()?;
        let (tx, rx) = tokio::sync::broadcast::channel(1);
        *slot = Some(tx.clone());
        let shared = self.writes.clone();
        tokio::spawn(async move {
            loop {
                watch.changed().await;
                let mut slot = shared.lock().unwrap_or_else(|p| p.into_inner());
                if tx.receiver_count() == 0 {
                    // Under the slot's lock: a receiver asking now starts
                    // a watch of its own.
                    *slot = None;
                    return;
                }
                // A receiver behind by one change has lagged, which it
                // reads as a change.
                let _ = tx.send(());
            }
        });
        Some(rx)
    }

    /// Stop using the lease `fence` names in this process (its held copy and
    /// its fence), without telling the store: the first half of
    /// [`Ledger::release_lease`], for a caller that cannot wait for the second.
    pub fn forget_lease(&self, session: &SessionId, fence: &Fence) {
        self.held().remove(session);
        let mut fences = self.fences();
        if fences.get(session) == Some(fence) {
            fences.remove(session);
        }
    }

    /// Give the lease back (only if this holder still has it at this epoch).
    /// Its epoch stays, so the next holder's is higher.
    pub async fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        self.forget_lease(session, fence);
        self.store.release_lease(session, fence).await?;
        self.bus.notify(crate::hosts::Notice::LeaseReleased {
            session_id: session.clone(),
        });
        Ok(())
    }
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
mod tests;
