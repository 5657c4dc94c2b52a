//! Moving a whole ledger from one backend to another (SQLite to PostgreSQL
//! and back): every session, whole, with its own ids, sequence numbers and
//! times, one session per transaction at the target.
//!
//! **Idempotent, and checked.** A session already at the target is not
//! written again: it is *verified* — read from both sides and compared —
//! and a difference stops the migration with an error naming the session
//! (the target has a session of that id with other contents: someone wrote
//! to it, or it is another ledger's). So a migration cut short can be run
//! again, and a finished one run again proves the copy. Leases are not
//! moved: run it with no warden using either ledger.

use warden_protocol::SessionId;

use super::LedgerError;
use super::store::Store;

/// What happened to one session, as the migration goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Copied to the target.
    Copied { session: SessionId },
    /// Already at the target, and the same there.
    Verified { session: SessionId },
    /// Gone from the source between listing and reading it (deleted meanwhile).
    Vanished { session: SessionId },
}

/// One step of `total`, numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub step: Step,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    pub copied: usize,
    pub verified: usize,
    pub vanished: usize,
}

/// Copy every session of `from` into `to`, oldest first, telling
/// `progress` after each; see the module's doc for sessions already there.
pub async fn migrate(
    from: &dyn Store,
    to: &dyn Store,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Migrated, LedgerError> {
    let mut sessions = from.sessions().await?;
    sessions.reverse();
    let total = sessions.len();
    let mut out = Migrated::default();
    for (i, info) in sessions.iter().enumerate() {
        let id = &info.id;
        let step = match from.export_session(id).await? {
            None => {
                out.vanished += 1;
                Step::Vanished {
                    session: id.clone(),
                }
            }
            Some(export) => {
                if to.import_session(&export).await? {
                    out.copied += 1;
                    Step::Copied {
                        session: id.clone(),
                    }
                } else {
                    let there = to.export_session(id).await?;
                    if there.as_ref() != Some(&export) {
                        return Err(LedgerError::Storage(format!(
                            "session {id} is already in {} with other contents than in {}; move it aside (or migrate into an empty ledger) and run the migration again",
                            to.name(),
                            from.name()
                        )));
                    }
                    out.verified += 1;
                    Step::Verified {
                        session: id.clone(),
                    }
                }
            }
        };
        progress(Progress {
            done: i + 1,
            total,
            step,
        });
    }
    Ok(out)
}
