//! Waiting on another host's work: a prompt this process queued (or was
//! asked to answer) while another process holds the session's lease. The
//! waiter reads the prompt's row and the lease, then sleeps until one of
//! them may have changed:
//!
//! - a [`Notice`] for the session: the prompt settled, or the lease was
//!   given back (from this process's bus, or relayed from another host);
//! - a write to the ledger by another process, where no relay carries
//!   notices (a SQLite file: one kernel watch per process, shared by its
//!   waiters through `Ledger::writes`);
//! - the lease's expiry (a runner that stopped renewing: paused, or on a
//!   machine that went away);
//! - its holder's exit, when the holder is a process on this machine.
//!
//! Then it reads again. Where none of the first two exist (a SQLite file
//! on a platform without inotify) it also reads every [`LOOK_EVERY`].

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use warden_protocol::{MessageWithParts, SessionId};

use super::{Notice, holder};
use crate::Core;
use crate::error::{CoreError, Result};
use crate::ledger::{PromptState, QueuedPrompt};

/// How often a waiter with nothing to wake it reads again.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// The least time between two reads woken by the ledger's writes: under a
/// busy writer, one read per this many commits' worth of time, not one per
/// commit.
const WRITES_COALESCE: Duration = Duration::from_millis(10);
/// Past a lease's expiry, by the store's clock, before a waiter reads it
/// again (the holder's last renewal may be in flight).
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

#[cfg(test)]
thread_local! {
    /// How many times waiters on this thread read their prompt's row (a
    /// test on a current-thread runtime counts its own).
    pub(crate) static LOOKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// What a waiter found.
pub(crate) enum Found {
    /// The prompt settled: its answer, or why it failed.
    Settled(Box<Result<MessageWithParts>>),
    /// The lease is free, expired, or its holder is gone: the session may be
    /// this process's to run.
    Free,
}

/// Wait until queued prompt `number` of `session` settles or the session
/// may be this process's to run.
pub(crate) async fn prompt(core: &Core, session: &SessionId, number: i64) -> Result<Found> {
    let ledger = &core.inner.ledger;
    // Listen before reading, so nothing that happens after the read is missed.
    let mut notices = core.bus().subscribe_notices();
    let mut writes = ledger.writes();
    let nothing_wakes = writes.is_none() && !core.bus().is_relayed();
    let mut exit: Option<(String, futures::future::Fuse<_>)> = None;
    loop {
        #[cfg(test)]
        LOOKS.with(|l| l.set(l.get() + 1));
        let entry = ledger
            .queued_prompt(number)
            .await?
            .ok_or_else(|| CoreError::SessionNotFound(session.clone()))?;
        if let Some(done) = settled(core, &entry).await {
            return Ok(Found::Settled(Box::new(done)));
        }
        let Some((holder, left_ms)) = ledger.lease(session).await? else {
            return Ok(Found::Free);
        };
        if holder == core.inner.holder || left_ms <= 0 || holder::holder_is_dead(&holder) {
            return Ok(Found::Free);
        }
        if exit.as_ref().is_none_or(|(h, _)| *h != holder) {
            let watch = holder::exit(&holder).map(futures::FutureExt::fuse);
            exit = watch.map(|w| (holder.clone(), w));
        }
        let expiry = Duration::from_millis(left_ms as u64) + EXPIRY_MARGIN;
        let looked = tokio::time::Instant::now();
        tokio::select! {
            woken = next_notice(&mut notices, session, number) => if !woken {
                // The bus is gone (the process is stopping): reading on
                // would only repeat this.
                return Err(CoreError::Cancelled);
            },
            () = async {
                match writes.as_mut() {
                    // A change, or several (lagged): look again either way.
                    Some(w) => match w.recv().await {
                        Ok(()) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => std::future::pending().await,
                    },
                    None => std::future::pending().await,
                }
            } => tokio::time::sleep_until(looked + WRITES_COALESCE).await,
            () = tokio::time::sleep(expiry) => {}
            () = async {
                match exit.as_mut() {
                    Some((_, exit)) => exit.await,
                    None => std::future::pending().await,
                }
            } => {}
            () = tokio::time::sleep(LOOK_EVERY), if nothing_wakes => {}
        }
    }
}

/// Wait for a notice that concerns prompt `number` of `session` (or for a
/// lag, after which anything may have happened). `false` once the bus is
/// closed.
async fn next_notice(
    notices: &mut tokio::sync::broadcast::Receiver<Notice>,
    session: &SessionId,
    number: i64,
) -> bool {
    loop {
        match notices.recv().await {
            Ok(Notice::PromptSettled {
                session_id,
                number: n,
            }) if &session_id == session && n == number => {
                return true;
            }
            Ok(Notice::LeaseReleased { session_id }) if &session_id == session => return true,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}

/// What a settled prompt's waiter gets; `None` while it is open.
pub(crate) async fn settled(core: &Core, entry: &QueuedPrompt) -> Option<Result<MessageWithParts>> {
    match &entry.state {
        PromptState::Queued | PromptState::Taken { .. } => None,
        PromptState::Failed { error } => Some(Err(CoreError::PromptFailed(error.clone()))),
        PromptState::Answered { message } => Some(
            match core.inner.ledger.message(&entry.session_id, message).await {
                Ok(Some(m)) => Ok(m),
                Ok(None) => Err(CoreError::Internal(format!(
                    "prompt {} was answered by message {message}, which is not in the ledger",
                    entry.number
                ))),
                Err(e) => Err(e),
            },
        ),
    }
}
