//! The session actor: one task per session this process is working on.
//! Operations go in ([`Op`]: a prompt, a run); each gets its reply, and
//! everything else comes out as bus events. The actor takes the session's
//! runner lease when it has work, keeps it fresh, and gives it back when its
//! queue is empty, so across processes one runner per session holds, and in
//! this process prompts are answered one at a time in arrival order.
//!
//! A run that loses its lease (another process took the session over while
//! this one was paused past its expiry) is cancelled by the heartbeat, and
//! whatever it still tries to write is refused by the ledger's fence.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use warden_protocol::{MessageWithParts, SessionId, SessionStatus};

use super::{Core, prompt_queue, run_loop};
use crate::error::{CoreError, Result};
use crate::hosts::holder;
use crate::ledger::{Fence, LedgerError};

/// How long a runner waits for the relay to send its last notices before
/// it gives a session up.
const RELAY_FLUSH: Duration = Duration::from_secs(2);

/// What a caller asks of a session.
pub(crate) enum Op {
    /// Answer the session's queued prompts up to this one (see
    /// `prompt_queue.rs`) and reply with this one's answer.
    Prompt {
        number: i64,
        reply: oneshot::Sender<Result<MessageWithParts>>,
    },
    /// Run the loop (or join the run going on) and return the last
    /// assistant message.
    Run {
        reply: oneshot::Sender<Result<MessageWithParts>>,
    },
    /// Answer whatever prompts are queued; nobody waits on this.
    Drain,
}

/// What the actor shares with callers that do not queue: the cancel token
/// of the job it is doing, if any.
#[derive(Default)]
struct Shared {
    current: Mutex<Option<CancellationToken>>,
}

impl Shared {
    fn current(&self) -> std::sync::MutexGuard<'_, Option<CancellationToken>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Handle {
    ops: mpsc::UnboundedSender<Op>,
    shared: Arc<Shared>,
}

/// The actors of this process, one per session with work queued or going.
#[derive(Default)]
pub(crate) struct Actors {
    map: Mutex<HashMap<SessionId, Handle>>,
}

impl Actors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Handle>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `op` on the session's actor, starting one if there is none.
    pub(crate) fn send(&self, core: &Core, session: &SessionId, op: Op) {
        let mut map = self.lock();
        // Sent under the map's lock: an actor leaves the map (under the same
        // lock) only when its queue is empty, so no operation is lost.
        let op = match map.get(session) {
            Some(h) => match h.ops.send(op) {
                Ok(()) => return,
                Err(mpsc::error::SendError(op)) => op,
            },
            None => op,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        let _ = tx.send(op);
        map.insert(
            session.clone(),
            Handle {
                ops: tx,
                shared: shared.clone(),
            },
        );
        let actor = Actor {
            core: core.clone(),
            session: session.clone(),
            ops: rx,
            shared,
            lease: None,
        };
        tokio::spawn(actor.live());
    }

    /// Cancel the session's current job; `false` if it has none.
    pub(crate) fn cancel(&self, session: &SessionId) -> bool {
        let map = self.lock();
        let Some(h) = map.get(session) else {
            return false;
        };
        match h.shared.current().as_ref() {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether this process has an actor for the session (working on it, or
    /// about to take or give back its lease).
    pub(crate) fn has_actor(&self, session: &SessionId) -> bool {
        self.lock().contains_key(session)
    }

    /// Whether this process is working on the session now.
    pub(crate) fn is_running(&self, session: &SessionId) -> bool {
        self.lock()
            .get(session)
            .is_some_and(|h| h.shared.current().is_some())
    }
}

/// The lease while the actor holds it.
struct Held {
    fence: Fence,
    heartbeat: tokio::task::JoinHandle<()>,
    /// Set by the heartbeat when a renewal found the lease taken over.
    lost: Arc<std::sync::atomic::AtomicBool>,
}

struct Actor {
    core: Core,
    session: SessionId,
    ops: mpsc::UnboundedReceiver<Op>,
    shared: Arc<Shared>,
    lease: Option<Held>,
}

/// A job's reply channels: the caller that queued it and any `run` callers
/// that joined it while it ran.
type Replies = Vec<oneshot::Sender<Result<MessageWithParts>>>;

impl Actor {
    async fn live(mut self) {
        let mut queued: VecDeque<Op> = VecDeque::new();
        loop {
            let op = match queued.pop_front() {
                Some(op) => op,
                None => match self.ops.try_recv() {
                    Ok(op) => op,
                    Err(_) => {
                        // Nothing to do: give the lease back, then leave unless
                        // an operation came in meanwhile.
                        self.release().await;
                        let mut map = self.core.inner.actors.lock();
                        match self.ops.try_recv() {
                            Ok(op) => op,
                            Err(_) => {
                                map.remove(&self.session);
                                return;
                            }
                        }
                    }
                },
            };
            let (job, replies) = match op {
                Op::Prompt { number, reply } => (Job::Prompt(number), vec![reply]),
                Op::Run { reply } => (Job::Run, vec![reply]),
                Op::Drain => (Job::Drain, vec![]),
            };
            let (result, replies) = self.job(job, replies, &mut queued).await;
            if queued.is_empty() && self.ops.is_empty() {
                // Prompts other processes queued meanwhile are this runner's
                // to answer before it lets the session go. (Not after a
                // ledger error: the next runner, or a waiter, tries again.)
                let ledger_failed = matches!(
                    result,
                    Err(CoreError::Ledger(_)) | Err(CoreError::SessionBusy { .. })
                );
                if self.lease.is_some() && !ledger_failed && self.prompts_waiting().await {
                    queued.push_back(Op::Drain);
                } else {
                    // Nothing more to do: the lease goes back before the
                    // callers hear the answer, so one that exits as soon as
                    // it has it (`warden run`) leaves no lease behind. An
                    // operation that comes in after this takes it again.
                    // Other hosts get the notices of its last writes first.
                    if self.lease.is_some() {
                        self.core.bus().flush_relay(RELAY_FLUSH).await;
                    }
                    self.release().await;
                    if matches!(&result, Err(CoreError::Ledger(e)) if !matches!(e, LedgerError::Fenced { .. }))
                    {
                        // Its prompts stay queued (and maybe its lease, if
                        // the release failed too): the takeover tries again.
                        self.core
                            .bus()
                            .deliver_notice(crate::hosts::Notice::Stranded {
                                session_id: self.session.clone(),
                            });
                    }
                }
            }
            answer(replies, result);
        }
    }

    /// Do one job under the lease, letting `run` callers that arrive
    /// meanwhile join it and queueing everything else.
    async fn job(
        &mut self,
        job: Job,
        mut replies: Replies,
        queued: &mut VecDeque<Op>,
    ) -> (Result<MessageWithParts>, Replies) {
        // This host's own policy first: a session outside its root is not
        // its to run (another host's may be), so no lease is taken.
        let admitted = match self.core.admission().root {
            None => Ok(()),
            Some(_) => match self.core.inner.ledger.session(&self.session).await {
                Ok(info) => self.core.admits_session(&info),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = admitted {
            return (Err(e), replies);
        }
        if let Err(e) = self.hold().await {
            return (Err(e), replies);
        }
        let cancel = CancellationToken::new();
        *self.shared.current() = Some(cancel.clone());
        // A `run` that comes in meanwhile joins a run or a prompt's run.
        let joinable = !matches!(job, Job::Drain);
        let core = self.core.clone();
        let session = self.session.clone();
        let token = cancel.clone();
        let mut task = tokio::spawn(async move {
            let drained = match job {
                Job::Prompt(number) => {
                    prompt_queue::drain(&core, &session, Some(number), &token).await?
                }
                Job::Run => {
                    // A run taking the session over: clients on any host get
                    // the state its last runner left, whose last notices may
                    // never have left that runner's host.
                    core.inner.ledger.republish_latest(&session).await?;
                    prompt_queue::drain(&core, &session, None, &token).await?
                }
                Job::Drain => prompt_queue::drain(&core, &session, None, &token).await?,
            };
            match (drained, job) {
                (Some(answer), _) => Ok(answer),
                // Nothing was queued: run what the ledger holds (a session
                // resumed, or taken over mid-run).
                (None, Job::Run) => run_loop::run(&core.inner, &session, &token).await,
                (None, _) => Err(CoreError::NoUserMessage(session.clone())),
            }
        });
        let result = loop {
            tokio::select! {
                done = &mut task => break done.unwrap_or_else(|e| Err(CoreError::Internal(
                    format!("the session loop {}", if e.is_panic() { panic_text(e) } else { "was stopped".into() })
                ))),
                op = self.ops.recv() => match op {
                    Some(Op::Run { reply }) if joinable => replies.push(reply),
                    Some(op) => queued.push_back(op),
                    // Never: the map keeps a sender while the actor lives.
                    None => {}
                },
            }
        };
        *self.shared.current() = None;
        self.core
            .inner
            .status
            .set(&self.session, SessionStatus::Idle);
        if matches!(result, Err(CoreError::Ledger(LedgerError::Fenced { .. })))
            && let Some(held) = self.lease.take()
        {
            // Another process runs the session now; the next job asks again.
            held.heartbeat.abort();
            tracing::warn!(session = %self.session, "the runner lease was taken over; this run stopped");
        }
        (result, replies)
    }

    /// Take the lease unless it is held (and was not lost meanwhile), and
    /// keep it fresh.
    async fn hold(&mut self) -> Result<()> {
        if let Some(held) = &self.lease
            && !held.lost.load(std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(());
        }
        if let Some(held) = self.lease.take() {
            held.heartbeat.abort();
        }
        let inner = &self.core.inner;
        let ttl = inner.options.lease_ttl.as_millis() as i64;
        let fence = match inner
            .ledger
            .acquire_lease(&self.session, &inner.holder, ttl, holder::holder_is_dead)
            .await?
        {
            Ok(fence) => fence,
            Err(held) => {
                return Err(CoreError::SessionBusy {
                    session: self.session.clone(),
                    holder: held.holder,
                });
            }
        };
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let heartbeat = {
            let ledger = inner.ledger.clone();
            let session = self.session.clone();
            let fence = fence.clone();
            let shared = self.shared.clone();
            let lost = lost.clone();
            let every = (inner.options.lease_ttl / 3).max(Duration::from_millis(50));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    match ledger.renew_lease(&session, &fence, ttl).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(%session, "lost the runner lease to another process; stopping");
                            lost.store(true, std::sync::atomic::Ordering::SeqCst);
                            if let Some(token) = shared.current().as_ref() {
                                token.cancel();
                            }
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(%session, error = %e, "could not renew the runner lease")
                        }
                    }
                }
            })
        };
        self.lease = Some(Held {
            fence,
            heartbeat,
            lost,
        });
        Ok(())
    }

    /// Whether the session has prompts waiting in the queue.
    async fn prompts_waiting(&self) -> bool {
        match self.core.inner.ledger.open_prompts(&self.session).await {
            Ok(open) => !open.is_empty(),
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "could not read the prompt queue");
                false
            }
        }
    }

    async fn release(&mut self) {
        if let Some(held) = self.lease.take() {
            held.heartbeat.abort();
            if let Err(e) = self
                .core
                .inner
                .ledger
                .release_lease(&self.session, &held.fence)
                .await
            {
                tracing::warn!(session = %self.session, error = %e, "could not release the runner lease");
            }
        }
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        // The actor was dropped mid-job (its runtime is shutting down): give
        // the lease back from a task if the runtime still runs one. If it
        // does not, the lease stays until it expires, or until a process on
        // this machine sees that its holder is gone, as after a kill.
        if let Some(held) = self.lease.take() {
            held.heartbeat.abort();
            let ledger = self.core.inner.ledger.clone();
            let session = self.session.clone();
            ledger.forget_lease(&session, &held.fence);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = ledger.release_lease(&session, &held.fence).await;
                });
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Job {
    Prompt(i64),
    Run,
    Drain,
}

/// Send a job's result to its caller and to every caller that joined it.
fn answer(replies: Replies, result: Result<MessageWithParts>) {
    let mut replies = replies.into_iter();
    let first = replies.next();
    for joined in replies {
        let _ = joined.send(match &result {
            Ok(m) => Ok(m.clone()),
            Err(e) => Err(e.share()),
        });
    }
    if let Some(first) = first {
        let _ = first.send(result);
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let panic = e.into_panic();
    let what = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    format!("panicked: {what}")
}

/// Await an operation's reply.
pub(crate) async fn reply(
    rx: oneshot::Receiver<Result<MessageWithParts>>,
) -> Result<MessageWithParts> {
    rx.await
        .unwrap_or_else(|_| Err(CoreError::Internal("the session actor went away".into())))
}
