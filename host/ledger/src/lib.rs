//! The session ledger's storage: the interface a backend implements
//! ([`Store`]), its two backends ([`sqlite`] on one file, [`postgres`] on a
//! database several hosts share), opening one from a location
//! ([`location`]), moving sessions between them ([`migrate`]), and the
//! outbox hosts relay their events through ([`outbox`]).
//!
//! This crate is the only one that links a database driver. It knows
//! nothing of the bus, the loop or the tool model: warden-core's `Ledger`
//! sits above it (publishing each write after it commits, keeping the
//! fences of the leases its process holds and the held sessions' messages)
//! and its `relay` drives the outbox.
//!
//! Where to start reading: [`store`] (the interface, its fencing and error
//! rules), then [`sqlite`] (`connection.rs`: who waits for the file's locks)
//! and [`postgres`].

mod assemble;
pub mod clock;
pub mod counted;
mod error;
pub mod id;
pub mod outbox;
pub mod phase;
mod record;
pub mod sqlite;
pub mod store;
mod timeline;
pub mod watch;
// Choosing a backend from a location, moving ledgers, the shared contract.
#[cfg(test)]
mod contract;
pub mod location;
pub mod migrate;
pub mod postgres;

pub use error::LedgerError;
pub use record::{AuditEntry, PartEvent};
pub use sqlite::{IntegrityReport, SqliteStore, check_file};
pub use store::{
    Fence, LeaseHeld, PartChange, PromptState, QueuedPrompt, StepWrite, Store, TimelineRow,
};
