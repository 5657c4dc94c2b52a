//! The ledger's own error type: what any storage backend can report, with
//! no backend's types in it (SQLite's errors are converted in the SQLite
//! code, a PostgreSQL backend converts its own).

use warden_protocol::SessionId;

/// Errors of the ledger. The core wraps them as `CoreError::Ledger`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// The storage failed (disk full, locked past the busy timeout, ...).
    /// The loop stops; nothing committed before is lost.
    #[error("ledger: {0}")]
    Storage(String),

    /// The ledger takes no writes (or reads) now: its disk is full, it is
    /// read-only, or its database server cannot be reached. A step that
    /// meets it stops at once and writes nothing more; what was committed
    /// before stays, and the session's next run (on any host) marks the
    /// calls that step left open as interrupted, in the ledger.
    #[error("the ledger is unavailable: {0}")]
    Unavailable(String),

    /// The ledger file is not a database, or its pages do not check out.
    /// Raised when opening (after a quick integrity check) and whenever the
    /// storage reports damage later; nothing more is written to it.
    #[error("{}", damaged_text(path, reason))]
    Damaged { path: String, reason: String },

    /// A write (or a step, or a model request) of a runner whose lease was
    /// taken over by another process: the write did not happen. The runner
    /// stops; the new holder owns the session.
    #[error(
        "session {session}: this process lost the session's runner lease to another process, so it writes nothing more to it"
    )]
    Fenced { session: SessionId },

    /// A row does not decode. Raised when reading; the loop stops rather
    /// than act on a history it cannot read.
    #[error("ledger: {what} is unreadable: {reason}")]
    Corrupt { what: String, reason: String },

    /// The ledger was written by a newer warden. Raised when opening.
    #[error(
        "the ledger at {path} has schema version {found}, newer than this warden understands ({supported}); upgrade warden"
    )]
    TooNew {
        path: String,
        found: i64,
        supported: i64,
    },

    /// The ledger has this version's number but an older development layout
    /// (written before 0.1 fixed its schema). Raised when opening.
    #[error(
        "the ledger at {path} was written by a development build of warden with an older layout; move it away (or pass another --data-dir) and warden starts a new one"
    )]
    PreRelease { path: String },
}

impl LedgerError {
    /// A value the ledger could not encode for storage (a bug, not input).
    pub(crate) fn encode(what: &str, e: impl std::fmt::Display) -> LedgerError {
        LedgerError::Storage(format!("cannot encode {what}: {e}"))
    }
}

fn damaged_text(path: &str, reason: &str) -> String {
    let path = if path.is_empty() {
        "(this ledger)"
    } else {
        path
    };
    format!(
        "the ledger at {path} is damaged: {reason}; run `warden ledger check {path}`, restore it from a backup or move it aside (warden then starts a new one)"
    )
}
