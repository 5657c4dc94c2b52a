//! The ledger's storage interface: what a backend must do, and nothing
//! more. SQLite implements it ([`crate::sqlite::SqliteStore`]), and
//! PostgreSQL ([`crate::postgres::PgStore`]). The bus, the copy of held
//! sessions and the bookkeeping of which leases this process holds live
//! above it, in warden-core's `Ledger`, so event order and cache coherence
//! are written once, not per backend.
//!
//! **Why async, through `async-trait`.** A PostgreSQL backend talks to its
//! server through an async client (tokio-postgres, sqlx); a synchronous
//! trait would make it block a thread per call or hide a runtime inside.
//! Async methods let each backend choose: SQLite sends each call to the
//! thread that owns its connection and awaits the answer, a network
//! backend awaits its client. Native `async fn` in traits cannot be called
//! through `dyn` yet, and the core holds its backend as `Arc<dyn Store>`
//! (chosen at start from a path or a URL), so the methods return boxed
//! futures, which `async-trait` writes for us; the box costs nothing next
//! to a disk or network round trip.
//!
//! **Fencing.** Every write to a session takes the [`Fence`] of the lease
//! this process holds on it (`None` when it holds none: a prompt written
//! before a run, say). A backend checks it *inside the write's own
//! transaction*, holding whatever lock keeps another process from taking
//! the lease between the check and the write (SQLite: an immediate
//! transaction; PostgreSQL: `SELECT … FOR SHARE` on the lease row, or the
//! check and the write in one statement), and refuses with
//! [`LedgerError::Fenced`] when the lease has moved on. Epochs only grow:
//! a lease given back keeps its epoch, and taking it from another holder
//! (or anew) raises it.
//!
//! **Errors** are [`LedgerError`]: no backend's own error type crosses
//! this trait. Absence is a value (`Option`, `bool`), not an error: the
//! layer above decides what a missing session means.
//!
//! **Events across hosts.** A backend shared by several hosts keeps the
//! outbox they relay their events through ([`Store::outbox`]); the core's
//! relay drives it, and nothing else above knows whether one exists. A
//! backend of one machine (SQLite) keeps the default: none.
//!
//! **Time.** A backend keeps its own bookkeeping times (a row's
//! `updated_at`, a lease's expiry) on its own clock: a shared database's
//! clock is the one its hosts agree on.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use warden_protocol::{
    MessageId, MessageInfo, MessageWithParts, Millis, Part, Rule, SessionId, SessionInfo,
};

use super::phase::{Phase, PhaseKind};
use super::{AuditEntry, LedgerError, PartEvent};

/// One session whole, as a backend holds it, to move it to another: its
/// row, its messages and parts, its timeline, audit trail and phase marks,
/// with their own ids, sequence numbers and times. Its lease is not part of
/// it (a lease belongs to a running process, not to the session's record).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionExport {
    pub session: SessionInfo,
    /// In id order, each with its parts in id order.
    pub messages: Vec<ExportedMessage>,
    /// The tool calls' timeline, in order.
    pub timeline: Vec<PartEvent>,
    /// The audit trail, numbered from 1.
    pub audit: Vec<AuditEntry>,
    /// The phase marks, in order.
    pub phases: Vec<Phase>,
}

impl SessionExport {
    /// The arguments each tool part ended with, as its row says, by part id.
    pub fn last_inputs(&self) -> std::collections::HashMap<&str, &Value> {
        self.messages
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| Some((p.id.as_str(), p.tool_state()?.input())))
            .collect()
    }
}

/// A message of a [`SessionExport`]: its header, when its row last changed
/// (the backend's clock), and its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedMessage {
    pub info: MessageInfo,
    pub updated_at: Millis,
    pub parts: Vec<Part>,
}

/// Relayed events read back from a shared ledger's outbox, to resume a
/// client's stream from a number.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The oldest number still kept (older ones were pruned); 0 for none.
    pub oldest: i64,
    /// The events past the number asked for, with their numbers, in order.
    pub events: Vec<(i64, warden_protocol::Event)>,
    /// Whether more follow (read again past the last one).
    pub more: bool,
}

impl Replay {
    /// Say whether a page of at most `page` rows left some out.
    pub fn with_more(mut self, page: i64) -> Replay {
        self.more = self.events.len() as i64 >= page;
        self
    }
}

/// A prompt in a session's queue (see `session/prompt_queue.rs`): accepted
/// by any host, answered by whichever holds the session's lease, in the
/// order the ledger numbered them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedPrompt {
    /// The queue's number: the order prompts are answered in.
    pub number: i64,
    pub session_id: SessionId,
    pub state: PromptState,
    /// What to write and run, as the accepting host encoded it.
    pub body: String,
    /// When it was accepted (the backend's clock).
    pub accepted_at: Millis,
}

/// Where a queued prompt is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptState {
    /// Waiting for its turn.
    Queued,
    /// A runner took it: its user message has this id (written, or about
    /// to be: a runner taking over after a crash writes it again, same id).
    Taken { message: MessageId },
    /// Answered by this message (the user message itself for `no_reply`).
    Answered { message: MessageId },
    /// Ended without an answer, for this reason.
    Failed { error: String },
}

impl PromptState {
    /// Whether the prompt still waits for its answer.
    pub fn is_open(&self) -> bool {
        matches!(self, PromptState::Queued | PromptState::Taken { .. })
    }

    /// As both backends keep it: a state word and its detail (the message
    /// id, or the error).
    pub fn to_row(&self) -> (&'static str, Option<&str>) {
        match self {
            PromptState::Queued => ("queued", None),
            PromptState::Taken { message } => ("taken", Some(message.as_str())),
            PromptState::Answered { message } => ("answered", Some(message.as_str())),
            PromptState::Failed { error } => ("failed", Some(error)),
        }
    }

    /// Back from a row; a row it cannot read is `Corrupt`.
    pub fn from_row(number: i64, state: &str, detail: Option<String>) -> Result<PromptState> {
        let corrupt = |reason: &str| LedgerError::Corrupt {
            what: format!("queued prompt {number}"),
            reason: reason.to_string(),
        };
        Ok(match (state, detail) {
            ("queued", _) => PromptState::Queued,
            ("taken", Some(m)) => PromptState::Taken {
                message: MessageId(m),
            },
            ("answered", Some(m)) => PromptState::Answered {
                message: MessageId(m),
            },
            ("failed", Some(error)) => PromptState::Failed { error },
            (other, _) => return Err(corrupt(&format!("state {other:?} without its detail"))),
        })
    }
}

/// How long a settled prompt stays in the queue (for a waiter on another
/// host to read its answer) before it is pruned: an hour.
pub const SETTLED_KEPT_MS: i64 = 60 * 60 * 1000;

/// A result of the storage interface.
pub type Result<T> = std::result::Result<T, LedgerError>;

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

/// Says whether a lease holder is known to be gone (its process died), so
/// its lease may be taken before it expires. Called inside the lease's
/// transaction, so it must be quick and must not touch the ledger.
pub type HolderIsDead = dyn Fn(&str) -> bool + Send + Sync;

/// A change to a session's own rules, applied inside the transaction that
/// reads and writes them, so two changes at once both land.
pub type PermissionChange = Box<dyn FnOnce(&mut Vec<Rule>) + Send>;

/// A tool call's state change as its timeline row records it, beyond the
/// state itself.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimelineRow<'a> {
    /// For a call that finishes: the arguments it started running with. A
    /// running row keeps no arguments (they are the part row's), so where a
    /// before hook rewrote them the finishing row keeps these.
    pub started_with: Option<&'a Value>,
    /// When a pending state began, for one written later with its next
    /// state (a call held back while its arguments streamed); `None`: now.
    pub at: Option<Millis>,
}

/// A part written by [`Store::write_step`]: with a timeline row when it is
/// a tool call's state change.
#[derive(Debug, Clone, Copy)]
pub struct PartChange<'a> {
    pub part: &'a Part,
    pub timeline: Option<TimelineRow<'a>>,
}

/// What one transaction of a step writes (see [`Store::write_step`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StepWrite<'a> {
    /// The step's header, when it changed.
    pub header: Option<&'a MessageInfo>,
    pub parts: &'a [PartChange<'a>],
    /// The decisions behind the changes.
    pub audit: &'a [AuditEntry],
    pub marks: &'a [(Millis, PhaseKind)],
}

/// A ledger backend. Object-safe: the core holds an `Arc<dyn Store>`.
#[async_trait]
pub trait Store: Send + Sync {
    /// What to call this ledger in messages: its file path or its URL
    /// (without a password).
    fn name(&self) -> &str;

    /// The outbox the hosts sharing this ledger relay their events
    /// through; `None` (the default) for a ledger only one machine uses.
    fn outbox(&self) -> Option<Arc<dyn crate::outbox::Outbox>> {
        None
    }

    /// A watch that wakes when another process may have written to this
    /// ledger, for a ledger other processes share without a relay (a SQLite
    /// file); `None` (the default) where the relay carries the notices, or
    /// nothing can be watched.
    fn watch_writes(&self) -> Option<crate::watch::Writes> {
        None
    }

    /// The relayed events past number `after` (of one session, or all), for
    /// a client resuming its stream; `None` where nothing is relayed.
    async fn replay(&self, _after: i64, _session: Option<&SessionId>) -> Result<Option<Replay>> {
        Ok(None)
    }

    // ---- sessions ----

    /// Record a new session.
    async fn create_session(&self, info: &SessionInfo) -> Result<()>;

    /// A session, or `None`.
    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>>;

    /// Every session, newest (highest id) first.
    async fn sessions(&self) -> Result<Vec<SessionInfo>>;

    /// Change the session's own rules in one fenced transaction and return
    /// the session as it is after; `None` if there is no such session.
    async fn update_permission(
        &self,
        id: &SessionId,
        fence: Option<&Fence>,
        change: PermissionChange,
    ) -> Result<Option<SessionInfo>>;

    /// Delete a session with its messages, parts, timeline, audit trail,
    /// phases and lease; `false` if there was none.
    async fn delete_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool>;

    /// Mark the session as just used; `false` if there is no such session.
    async fn touch_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool>;

    // ---- messages, parts and the timeline ----

    /// Insert or update a message header; `false` if its session is missing.
    async fn put_message(&self, info: &MessageInfo, fence: Option<&Fence>) -> Result<bool>;

    /// Insert or update a part, in one fenced transaction with: a timeline
    /// row when `timeline` is given (a tool call's state change), and
    /// `audit` (the decisions that caused the change). A part whose message
    /// is missing is refused as [`LedgerError::Corrupt`].
    async fn put_part(
        &self,
        part: &Part,
        timeline: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()>;

    /// One transaction of a step, fenced: its header when given (inserted or
    /// updated first), its parts in order (a tool call's state changes each
    /// with its timeline row; a part named again later in the same write
    /// keeps only its last row, its earlier states only their timeline
    /// rows), the audit rows and the phase marks. `false` (and nothing
    /// written) if the header's session is missing; a part of another
    /// message than the header's, or of another session, is refused with
    /// all the rest as [`LedgerError::Corrupt`], and so is a part whose
    /// message is missing.
    async fn write_step(&self, write: &StepWrite<'_>, fence: Option<&Fence>) -> Result<bool>;

    /// Every message of a session with its parts, both in id order.
    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>>;

    /// The session's tool-call timeline, in order.
    async fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>>;

    // ---- audit and phases ----

    /// Append entries of one session to its audit trail, in one fenced
    /// transaction.
    async fn audit(
        &self,
        session: &SessionId,
        entries: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()>;

    /// The session's audit trail, entry by entry, numbered from 1.
    async fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>>;

    /// Append phase marks `(when, what)` of one message, in one fenced
    /// transaction.
    async fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
        fence: Option<&Fence>,
    ) -> Result<()>;

    /// The session's phase marks, in order (marks it cannot read skipped).
    async fn phases(&self, session: &SessionId) -> Result<Vec<Phase>>;

    // ---- leases ----

    /// Take the session's runner lease for `ttl_ms` (or renew it, when
    /// `holder` has it already, keeping its epoch) and return its fence.
    /// `Ok(Err(held))` when another holder has an unexpired lease that
    /// `holder_is_dead` does not release. Atomic: two processes taking one
    /// lease at once get one fence between them.
    async fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: Arc<HolderIsDead>,
    ) -> Result<std::result::Result<Fence, LeaseHeld>>;

    /// Extend the lease `fence` names by `ttl_ms` from now; `false` if it
    /// is no longer current (taken over).
    async fn renew_lease(&self, session: &SessionId, fence: &Fence, ttl_ms: i64) -> Result<bool>;

    /// Give the lease back, if `fence` is still current. Its epoch stays.
    async fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()>;

    /// Every held lease: (session, holder, expiry), by session.
    async fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>>;

    /// The session's lease if it is held: its holder and the milliseconds
    /// left before it expires (zero or less: expired), on the clock leases
    /// are judged by (PostgreSQL's: the database's).
    async fn lease(&self, session: &SessionId) -> Result<Option<(String, i64)>>;

    /// `Ok` if `fence` is the session's current lease, else `Fenced`.
    async fn check_fence(&self, session: &SessionId, fence: &Fence) -> Result<()>;

    // ---- the prompt queue ----

    /// Queue a prompt for the session (no fence: any host may accept one)
    /// and return its number, greater than every number given before.
    /// Prompts settled long ago are pruned here.
    async fn enqueue_prompt(&self, session: &SessionId, body: &str) -> Result<i64>;

    /// The session's open prompts (queued or taken), in number order.
    async fn open_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>>;

    /// One queued prompt, whatever its state; `None` once pruned (or with
    /// its session deleted).
    async fn queued_prompt(&self, number: i64) -> Result<Option<QueuedPrompt>>;

    /// Take a queued prompt for its turn, recording the id its user message
    /// gets, in one fenced transaction; `false` if it was not queued.
    async fn take_prompt(
        &self,
        session: &SessionId,
        number: i64,
        message: &MessageId,
        fence: Option<&Fence>,
    ) -> Result<bool>;

    /// Record how an open prompt ended (`Answered` or `Failed`), fenced.
    async fn settle_prompt(
        &self,
        session: &SessionId,
        number: i64,
        state: &PromptState,
        fence: Option<&Fence>,
    ) -> Result<()>;

    /// The sessions with open prompts, by session.
    async fn sessions_with_open_prompts(&self) -> Result<Vec<SessionId>>;

    // ---- upkeep ----

    /// Make everything committed durable in the main store (SQLite: move
    /// the write-ahead log into the file). A no-op where there is nothing
    /// to move.
    async fn checkpoint(&self) -> Result<()>;

    // ---- moving a ledger ----

    /// The session whole, read in one snapshot; `None` if there is none.
    async fn export_session(&self, id: &SessionId) -> Result<Option<SessionExport>>;

    /// Write a session exported from another ledger, whole, in one
    /// transaction, keeping its ids, sequence numbers and times; `false`
    /// (and nothing written) if a session with its id is here already.
    async fn import_session(&self, export: &SessionExport) -> Result<bool>;
}

/// A step write with no header and no part ([`step_session`] said `None`):
/// its audit rows alone, through [`Store::audit`], or nothing. Both
/// backends' `write_step` end here for such a write.
pub async fn write_audit_only<S: Store + ?Sized>(
    store: &S,
    write: &StepWrite<'_>,
    fence: Option<&Fence>,
) -> Result<bool> {
    match write.audit.first() {
        Some(e) => store
            .audit(&e.session_id, write.audit, fence)
            .await
            .map(|()| true),
        None => Ok(true),
    }
}

/// The session `write` is of, after checking that every part in it is of
/// that session and, when it has a header, of that message (see
/// [`Store::write_step`]); `None` when it writes nothing of a session.
pub fn step_session<'a>(write: &StepWrite<'a>) -> Result<Option<&'a SessionId>> {
    let session = match (write.header, write.parts.first()) {
        (Some(info), _) => info.session_id(),
        (None, Some(change)) => &change.part.session_id,
        (None, None) => return Ok(None),
    };
    for PartChange { part, .. } in write.parts {
        let theirs = match write.header {
            Some(info) => &part.message_id != info.id() || &part.session_id != session,
            None => &part.session_id != session,
        };
        if theirs {
            return Err(LedgerError::Corrupt {
                what: format!("part {}", part.id),
                reason: format!(
                    "it belongs to message {} of session {}, not to the step of {} written with it",
                    part.message_id,
                    part.session_id,
                    write.header.map_or(session.as_str(), |i| i.id().as_str()),
                ),
            });
        }
    }
    Ok(Some(session))
}

/// Whether the change at `index` of `parts` is the last naming its part (the
/// one whose row is stored; the earlier ones keep only their timeline rows).
pub fn is_last_of_its_part(parts: &[PartChange<'_>], index: usize) -> bool {
    let id = &parts[index].part.id;
    !parts[index + 1..].iter().any(|c| &c.part.id == id)
}
