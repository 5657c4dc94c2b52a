//! Taking over: a session whose runner died (its lease outlived its
//! process) or whose queued prompts no runner took (the process that
//! accepted them stopped first) is run by a server that sees it
//! ([`Core::orphaned`], [`Core::take_over_orphans`]).
//!
//! The server's task looks when something may have made an orphan:
//!
//! - a holder of a lease that is a process on this machine exits (its
//!   pidfd: a killed `warden run` or server is taken over at once);
//! - the earliest lease another process holds expires (a runner that
//!   stopped renewing: paused, or on a machine that went away);
//! - a session it failed to run, or that this host's runner left with work
//!   when the ledger failed ([`Notice::Stranded`]), is due again (backing
//!   off from 1 s to 30 s, so a ledger that stays full is not retried every
//!   round);
//! - and every lease TTL at the latest, for the one orphan nothing
//!   announces: a prompt queued by a process that was killed before it
//!   took the session's lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use warden_protocol::SessionId;

use super::{Notice, holder};
use crate::Core;
use crate::clock::now_ms;
use crate::error::{CoreError, Result};

/// The least time between two looks woken by leases' expiries: holders
/// judged by another clock (PostgreSQL's) may look expired here a little
/// before they are there.
const LEAST_WAIT: Duration = Duration::from_millis(50);
/// The first wait before running a session again that failed to run, and
/// the most it grows to.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(30);

/// Every lease: (session, holder, expiry).
type Leases = Vec<(SessionId, String, warden_protocol::Millis)>;

impl Core {
    /// Sessions with work and no live runner, candidates for taking over
    /// with [`Core::run`]: those whose run was cut short by a process that
    /// died (their lease outlived it), and those with queued prompts that no
    /// process is running (the process that accepted them stopped first).
    pub async fn orphaned(&self) -> Result<Vec<SessionId>> {
        Ok(self.orphans().await?.0)
    }

    /// The orphans, with the leases they were read from and when.
    async fn orphans(&self) -> Result<(Vec<SessionId>, Leases, i64)> {
        let now = now_ms();
        let leases = self.inner.ledger.leases().await?;
        let live = |holder: &str, expires: i64| expires > now && !holder::holder_is_dead(holder);
        let mut out: Vec<SessionId> = leases
            .iter()
            .filter(|(s, holder, expires)| {
                if holder == &self.inner.holder {
                    // This host's own lease with no actor behind it: a
                    // release that failed (the ledger was unwritable then).
                    !self.inner.actors.has_actor(s)
                } else {
                    !self.inner.actors.is_running(s) && !live(holder, *expires)
                }
            })
            .map(|(s, _, _)| s.clone())
            .collect();
        for s in self.inner.ledger.sessions_with_open_prompts().await? {
            let held = leases.iter().any(|(l, holder, expires)| {
                l == &s
                    && if holder == &self.inner.holder {
                        self.inner.actors.has_actor(&s)
                    } else {
                        live(holder, *expires)
                    }
            });
            if !held && !self.inner.actors.is_running(&s) && !out.contains(&s) {
                out.push(s);
            }
        }
        // Only sessions this host works in: the others are for hosts whose
        // directory holds them.
        if self.admission().root.is_some() {
            let mut mine = Vec::with_capacity(out.len());
            for s in out {
                if let Ok(info) = self.inner.ledger.session(&s).await
                    && self.admits_session(&info).is_ok()
                {
                    mine.push(s);
                }
            }
            out = mine;
        }
        Ok((out, leases, now))
    }

    /// Take over orphaned sessions for as long as this runs (a server runs
    /// it in a task of its own): each is run here with [`Core::run`], once
    /// at a time, unless another host is quicker.
    pub async fn take_over_orphans(&self) {
        let (wake, mut woken) = mpsc::unbounded_channel::<()>();
        let retry: Arc<Mutex<HashMap<SessionId, (Instant, Duration)>>> = Default::default();
        // One task per holder on this machine, waiting for its exit.
        let mut exits: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
        let backstop = self.inner.options.lease_ttl.max(LEAST_WAIT);
        let mut notices = self.bus().subscribe_notices();
        loop {
            let next = match self.sweep(&wake, &retry, &mut exits).await {
                Ok(next) => next.clamp(LEAST_WAIT, backstop),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the runner leases");
                    RETRY_FIRST
                }
            };
            let deadline = tokio::time::Instant::now() + next;
            loop {
                tokio::select! {
                    _ = woken.recv() => break,
                    () = tokio::time::sleep_until(deadline) => break,
                    notice = notices.recv() => match notice {
                        Ok(Notice::Stranded { session_id }) => {
                            // Tried again once its actor is gone and a second
                            // has passed (the ledger may have room by then).
                            let mut retry = retry.lock().unwrap_or_else(|p| p.into_inner());
                            if let std::collections::hash_map::Entry::Vacant(slot) =
                                retry.entry(session_id)
                            {
                                slot.insert((Instant::now() + RETRY_FIRST, RETRY_FIRST));
                                wake_after(&wake, RETRY_FIRST);
                            }
                        }
                        // Nothing else here makes an orphan; a missed
                        // Stranded notice waits for the backstop.
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
            // Whatever else woke meanwhile is answered by the same look.
            while woken.try_recv().is_ok() {}
        }
    }

    /// Run every orphan that is due; how long until a lease another process
    /// holds expires, or a retry is due, whichever is first.
    async fn sweep(
        &self,
        wake: &mpsc::UnboundedSender<()>,
        retry: &Arc<Mutex<HashMap<SessionId, (Instant, Duration)>>>,
        exits: &mut HashMap<String, tokio::task::AbortHandle>,
    ) -> Result<Duration> {
        let lock = |r: &Mutex<HashMap<SessionId, (Instant, Duration)>>| {
            r.lock().unwrap_or_else(|p| p.into_inner()).clone()
        };
        let (orphans, leases, now) = self.orphans().await?;
        for s in orphans {
            let due = lock(retry)
                .get(&s)
                .is_none_or(|(at, _)| *at <= Instant::now());
            if !due {
                continue;
            }
            let (core, retry, wake) = (self.clone(), retry.clone(), wake.clone());
            tokio::spawn(async move {
                tracing::info!(session = %s, "taking over a session whose runner died");
                let result = core.run(&s).await;
                let mut retry = retry.lock().unwrap_or_else(|p| p.into_inner());
                match result {
                    // Another host was quicker: it runs the session.
                    Ok(_) | Err(CoreError::SessionBusy { .. }) => {
                        retry.remove(&s);
                    }
                    Err(e) => {
                        let wait = retry
                            .get(&s)
                            .map_or(RETRY_FIRST, |(_, w)| (*w * 2).min(RETRY_MOST));
                        tracing::warn!(session = %s, error = %e, "could not take over; trying again in {wait:?}");
                        retry.insert(s, (Instant::now() + wait, wait));
                        drop(retry);
                        // The look that runs it again is due then.
                        wake_after(&wake, wait);
                    }
                }
            });
        }
        let mut next = Duration::MAX;
        let mut holders = std::collections::HashSet::new();
        for (_, h, expires) in &leases {
            if *h == self.inner.holder {
                continue;
            }
            if *expires > now {
                next = next.min(Duration::from_millis((expires - now) as u64));
            }
            holders.insert(h.clone());
        }
        exits.retain(|h, task| {
            let keep = holders.contains(h) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for h in holders {
            if exits.contains_key(&h) {
                continue;
            }
            if let Some(exit) = holder::exit(&h) {
                let wake = wake.clone();
                let task = tokio::spawn(async move {
                    exit.await;
                    let _ = wake.send(());
                });
                exits.insert(h, task.abort_handle());
            }
        }
        let soonest_retry = lock(retry)
            .values()
            .map(|(at, _)| at.saturating_duration_since(Instant::now()))
            .min();
        Ok(soonest_retry.map_or(next, |r| r.min(next)))
    }
}

/// Wake the takeover's loop after `wait`.
fn wake_after(wake: &mpsc::UnboundedSender<()>, wait: Duration) {
    let wake = wake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let _ = wake.send(());
    });
}
