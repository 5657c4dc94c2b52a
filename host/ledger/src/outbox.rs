//! The outbox several hosts relay their events through: the storage side
//! of running on several hosts. A backend shared by hosts (PostgreSQL)
//! offers one ([`Store::outbox`](crate::Store::outbox)); a backend of one
//! machine (SQLite) offers none. What goes in and comes out, and in what
//! order, is the core's `relay` module: this is only where it is kept.
//!
//! **Order is commit order.** Rows are numbered as they commit, one
//! appending transaction at a time, so a reader that has seen number `n`
//! has seen or will never see every smaller one: a reader tailing the
//! outbox never skips a row.

use async_trait::async_trait;

use crate::LedgerError;

type Result<T> = std::result::Result<T, LedgerError>;

/// One row to append: the session, what it is (`event` or `answer`) and its
/// JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub session: String,
    pub kind: &'static str,
    pub body: String,
    /// The lease epoch the session was held at by the host appending it.
    pub epoch: Option<i64>,
}

impl Item {
    /// A bus event of `session`, as JSON.
    pub fn event(session: &str, event: &warden_protocol::Event, epoch: Option<i64>) -> Item {
        Item {
            session: session.to_string(),
            kind: "event",
            body: serde_json::to_string(event).unwrap_or_default(),
            epoch,
        }
    }
}

/// One row of the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seq: i64,
    pub origin: String,
    pub session: String,
    pub kind: String,
    pub body: String,
    pub epoch: Option<i64>,
}

/// The highest lease epoch seen per session, to drop the late events of a
/// runner that has lost its session since: a host paused with events not
/// yet appended appends them after the host that took its sessions over
/// appended newer ones.
#[derive(Debug, Default)]
pub struct Epochs(std::collections::HashMap<String, i64>);

impl Epochs {
    /// Whether an event of `session` at `epoch` is current (and remember it).
    pub fn current(&mut self, session: &str, epoch: Option<i64>) -> bool {
        let Some(epoch) = epoch else {
            return true;
        };
        match self.0.get_mut(session) {
            Some(seen) if *seen > epoch => false,
            Some(seen) => {
                *seen = epoch;
                true
            }
            None => {
                self.0.insert(session.to_string(), epoch);
                true
            }
        }
    }
}

/// Where hosts sharing a ledger append their events and read each other's.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// What to call it in log lines (the ledger's name, no password).
    fn name(&self) -> &str;

    /// Append `items` from `origin` in one transaction, in order, and wake
    /// every listener at its commit.
    async fn append(&self, origin: &str, items: &[Item]) -> Result<()>;

    /// Delete the rows more than the outbox keeps behind the newest; how
    /// many went.
    async fn prune(&self) -> Result<u64>;

    /// A connection of its own that is woken when any host appends.
    async fn listen(&self) -> Result<Box<dyn Listener>>;
}

/// One listening connection to an [`Outbox`].
#[async_trait]
pub trait Listener: Send {
    /// The newest row's number (0 for none).
    async fn newest(&mut self) -> Result<i64>;

    /// The rows past `after`, in order, at most `limit`.
    async fn read_after(&mut self, after: i64, limit: i64) -> Result<Vec<Row>>;

    /// Wait until a host appends; `false` once the connection is gone.
    /// Wake-ups that came while the caller was reading are folded into one.
    async fn appended(&mut self) -> bool;
}
