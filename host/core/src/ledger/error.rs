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
