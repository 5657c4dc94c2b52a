//! Several hosts on one ledger: everything a host does because other
//! processes share its ledger (several `warden serve` on one PostgreSQL
//! database, a `warden run` next to a server on one SQLite file) is here.
//! The rest of the core runs one session on one host and never asks
//! whether another exists.
//!
//! - **Who runs a session** is the runner lease (the ledger's `leases`):
//!   one holder per session, named by [`holder`] so a process on the same
//!   machine can tell at once that it died. The session actor
//!   (`session/actor.rs`) takes the lease when it has work and gives it back
//!   when it has none.
//! - **Events and answers** go to the other hosts through the [`relay`]
//!   (the ledger's outbox), with the [`Notice`]s below: what a host waiting
//!   on another's work needs to hear.
//! - **A prompt another host runs** is waited for by [`wait`]: woken by
//!   that host's notices, by the ledger's writes where no relay carries
//!   them (SQLite), by the lease's expiry, or by its holder's exit. Never by
//!   looking every so often, except on a platform with none of these.
//! - **Taking over** a session whose runner died, or prompts no runner has
//!   taken, is [`takeover`]: a server's task woken the same way.

pub mod holder;
pub mod relay;
pub mod takeover;
pub(crate) mod wait;

use serde::{Deserialize, Serialize};
use warden_protocol::SessionId;

/// What one host tells the others (and its own waiters) about the work it
/// shares with them: sent through the bus ([`crate::bus::Bus::notify`]) and
/// the relay, never shown to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Notice {
    /// A queued prompt was answered or failed (its row says which).
    PromptSettled { session_id: SessionId, number: i64 },
    /// A runner gave a session's lease back: it may be another's to run.
    LeaseReleased { session_id: SessionId },
    /// This host stopped working on a session that still has work, because
    /// the ledger failed (a full disk, a lost database): its takeover tries
    /// again later. Only for this host's own waiters, never relayed.
    Stranded { session_id: SessionId },
}

impl Notice {
    pub fn session_id(&self) -> &SessionId {
        match self {
            Notice::PromptSettled { session_id, .. }
            | Notice::LeaseReleased { session_id }
            | Notice::Stranded { session_id } => session_id,
        }
    }
}
