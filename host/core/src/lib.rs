//! The warden agent core: the session ledger (above its storage in
//! warden-ledger), the run loop, the turn, the boundary, permissions, the
//! event bus and the relay between hosts ([`relay`]). Models are reached only through the
//! `warden_llm` seam (`ModelResolver` → `ResolvedModel` → `Provider`). It never prints and knows
//! nothing of wasmtime: guests run behind the [`tool::Registry`] of tool sources and hook hosts, and
//! front ends only consume [`bus`] events.
//!
//! Where to start reading: [`session`] (`Core::prompt` → the session's actor,
//! which holds its lease → [`session::run_loop`] → [`session::turn`]), then
//! [`ledger`] (`Ledger`: bus, fences and held-session cache, above
//! [`ledger::Store`], the storage interface warden-ledger's backends
//! implement, whose every write checks the lease's fence in its own
//! transaction) and
//! [`boundary`]
//! (the host boundary: permission, hooks, guest, audit). The
//! tool state machine itself is `warden_protocol::tool_state`.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent;
pub mod boundary;
pub mod bus;
pub use warden_ledger::clock;
pub mod config;
pub mod error;
pub mod hosts;
pub mod ledger;
pub mod permission;
pub mod session;
pub use warden_tool as tool;

pub use bus::Bus;
pub use config::Config;
pub use error::{CoreError, Result};
pub use ledger::{Ledger, LedgerError};
pub use session::{Core, CoreOptions, PromptInput};
