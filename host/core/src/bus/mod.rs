//! The in-process event bus. Every ledger write and status change is
//! published here; front ends subscribe. Publishing never blocks: a
//! subscriber that falls more than the buffer behind is told how many events
//! it missed (and can re-read current state from the ledger).
//!
//! **Across hosts.** A ledger shared by several hosts (PostgreSQL) connects
//! a relay to the bus ([`Bus::connect_relay`]; see [`crate::hosts::relay`]).
//! From then on every event published here with [`Bus::publish`] is also
//! handed to the relay, which sends it to the other hosts; events that
//! arrive from them are published with [`Bus::publish_relayed`], which
//! reaches this process's subscribers and the [`Bus::subscribe_elsewhere`]
//! channel but is never handed to the relay again. An answer to a question
//! another host asked travels the same way ([`Bus::send_answer`] out,
//! [`Bus::deliver_answer`] in), and so do the notices hosts wait on
//! ([`Bus::notify`] out and to this process's waiters, [`Bus::deliver_notice`]
//! in; see [`crate::hosts`]). The relay also hands back every host's
//! events, this one's included, with their numbers in its order
//! ([`Bus::subscribe_numbered`]): client streams read those, so a client
//! can resume from a number on any host. With no relay connected (SQLite, one
//! machine) nothing of this costs more than a check of an empty cell.

mod recent;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use recent::Replay;

use tokio::sync::{broadcast, mpsc};

use crate::hosts::Notice;
use warden_protocol::{Event, PermissionReply, SessionId};

/// Events kept for slow subscribers before they start missing some.
pub const CAPACITY: usize = 8192;
/// Notices kept for a waiter that has not read them yet.
const NOTICES: usize = 1024;

/// A cloneable handle to the bus.
#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Event>>,
    /// The session channels and the late subscribers' logs, under the one
    /// lock publishing takes.
    shared: Arc<Mutex<Shared>>,
    /// What goes to the other hosts, once a relay is connected.
    relay: Arc<OnceLock<mpsc::UnboundedSender<Outgoing>>>,
    /// What came from the other hosts, for the services that act on it
    /// (the question service keeps other hosts' asks and applies answers).
    elsewhere: broadcast::Sender<Arc<Elsewhere>>,
    /// Every host's events (this one's included) in the relay's order, each
    /// with its relay number, as they come back from the shared ledger: what
    /// a client stream reads when it may resume by number.
    ordered: broadcast::Sender<Arc<Numbered>>,
    /// Notices for the waiters of this process, from it or another host.
    notices: broadcast::Sender<Notice>,
    /// The lease epoch this process holds a session at, if any (set by the
    /// ledger): sent with each event to the relay, so other hosts can drop
    /// a stale runner's late events (see [`crate::hosts::relay`]).
    epochs: Arc<OnceLock<EpochOf>>,
}

#[derive(Default)]
struct Shared {
    /// A channel of its own for each session someone watches alone, so a
    /// watcher that lags is told how many of *its* session's events it
    /// missed, not how many of everyone's.
    sessions: HashMap<SessionId, broadcast::Sender<Arc<Event>>>,
    /// What each prompted session published, for late subscribers.
    recent: recent::Recent,
}

/// Says at which lease epoch this process holds a session, if it does.
pub type EpochOf = Arc<dyn Fn(&SessionId) -> Option<i64> + Send + Sync>;

/// An event with its relay number (its place in the order of all hosts').
#[derive(Debug, Clone)]
pub struct Numbered {
    pub seq: i64,
    pub event: Arc<Event>,
}

/// An answer given on one host to a question another host asked.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RelayedAnswer {
    pub session_id: SessionId,
    pub request_id: String,
    pub reply: PermissionReply,
}

/// What this host hands its relay to send to the others.
#[derive(Debug)]
pub enum Outgoing {
    /// An event, with the lease epoch its session was held at when it was
    /// published here (`None`: not held by this process).
    Event(Arc<Event>, Option<i64>),
    Answer(RelayedAnswer),
    Notice(Notice),
    /// Answered once everything handed on before it is appended.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// What arrived from another host.
#[derive(Debug, Clone)]
pub enum Elsewhere {
    /// An event, with the relay's number for it (its order among all hosts'
    /// relayed events).
    Event {
        seq: i64,
        event: Arc<Event>,
    },
    Answer(RelayedAnswer),
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Bus {
            tx,
            shared: Default::default(),
            relay: Default::default(),
            elsewhere: broadcast::channel(CAPACITY).0,
            ordered: broadcast::channel(CAPACITY).0,
            notices: broadcast::channel(NOTICES).0,
            epochs: Default::default(),
        }
    }

    /// Tell the bus how to find the lease epoch of a session (once; the
    /// ledger does it when it is made on this bus).
    pub fn tag_epochs(&self, epoch_of: EpochOf) {
        let _ = self.epochs.set(epoch_of);
    }

    /// Publish an event of this process to every current subscriber (and,
    /// when a relay is connected, to the other hosts).
    pub fn publish(&self, event: Event) {
        let event = Arc::new(event);
        if let Some(relay) = self.relay.get() {
            // A relay that stopped (its runtime ended) takes nothing: fine.
            let epoch = self.epochs.get().and_then(|f| f(event.session_id()));
            let _ = relay.send(Outgoing::Event(event.clone(), epoch));
        }
        self.deliver(event);
    }

    /// Publish an event that came from another host (relay number `seq`):
    /// to this process's subscribers only, never back to the relay.
    pub fn publish_relayed(&self, event: Event, seq: i64) {
        let event = Arc::new(event);
        let _ = self.elsewhere.send(Arc::new(Elsewhere::Event {
            seq,
            event: event.clone(),
        }));
        self.publish_numbered(seq, event.clone());
        self.deliver(event);
    }

    /// Hand on an event with its relay number, to the streams that read
    /// every host's events in the relay's order ([`Bus::subscribe_numbered`]).
    /// The relay calls it for this host's own events too, as they come back.
    pub fn publish_numbered(&self, seq: i64, event: Arc<Event>) {
        let mut shared = self.lock();
        shared.recent.push(Some(seq), &event);
        let _ = self.ordered.send(Arc::new(Numbered { seq, event }));
    }

    /// Receive every host's events in the relay's order from now on.
    pub fn subscribe_numbered(&self) -> broadcast::Receiver<Arc<Numbered>> {
        self.ordered.subscribe()
    }

    /// [`Bus::subscribe_numbered`], with what prompted sessions (or
    /// `only` that one) published before: each event is in the replay or
    /// comes on the channel, never both and never neither.
    pub fn subscribe_numbered_late(
        &self,
        only: Option<&SessionId>,
    ) -> (broadcast::Receiver<Arc<Numbered>>, Vec<Replay>) {
        let shared = self.lock();
        (self.ordered.subscribe(), shared.recent.snapshot(only))
    }

    /// A prompt of `session` was accepted, or its run began: what it
    /// publishes from now on is kept for subscribers that come late (see
    /// [`recent`]).
    pub fn record(&self, session: &SessionId) {
        self.lock().recent.begin(session);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connect the relay: from now on what this process publishes is also
    /// sent to the receiver returned. `None` when one is connected already.
    pub fn connect_relay(&self) -> Option<mpsc::UnboundedReceiver<Outgoing>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.relay.set(tx).ok()?;
        Some(rx)
    }

    /// Whether a relay connects this process to other hosts.
    pub fn is_relayed(&self) -> bool {
        self.relay.get().is_some()
    }

    /// Wait (at most `limit`) until the relay has appended everything this
    /// process published before: a runner does before it gives a session
    /// up, so the notices of its last writes are out before another host
    /// may take over. At once when no relay is connected.
    pub async fn flush_relay(&self, limit: std::time::Duration) {
        let Some(relay) = self.relay.get() else {
            return;
        };
        let (done, flushed) = tokio::sync::oneshot::channel();
        if relay.send(Outgoing::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
    }

    /// Send an answer to a question another host asked; `false` when no
    /// relay is connected (there is no other host to send it to).
    pub fn send_answer(&self, answer: RelayedAnswer) -> bool {
        match self.relay.get() {
            Some(relay) => relay.send(Outgoing::Answer(answer)).is_ok(),
            None => false,
        }
    }

    /// Hand an answer that came from another host to this process's
    /// question service.
    pub fn deliver_answer(&self, answer: RelayedAnswer) {
        let _ = self.elsewhere.send(Arc::new(Elsewhere::Answer(answer)));
    }

    /// Tell this process's waiters and (through the relay) every other
    /// host's. Never blocks; nobody listening is fine.
    pub fn notify(&self, notice: Notice) {
        if let Some(relay) = self.relay.get() {
            let _ = relay.send(Outgoing::Notice(notice.clone()));
        }
        let _ = self.notices.send(notice);
    }

    /// Hand a notice that came from another host to this process's waiters.
    pub fn deliver_notice(&self, notice: Notice) {
        let _ = self.notices.send(notice);
    }

    /// Receive the notices sent from now on, this host's and relayed ones.
    /// A receiver that lags is told so, and should look at what it waits
    /// for again.
    pub fn subscribe_notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Receive what arrives from other hosts from now on.
    pub fn subscribe_elsewhere(&self) -> broadcast::Receiver<Arc<Elsewhere>> {
        self.elsewhere.subscribe()
    }

    fn deliver(&self, event: Arc<Event>) {
        let mut shared = self.lock();
        // Streams on a shared ledger read the numbered events: those are
        // the ones kept for them.
        if !self.is_relayed() {
            shared.recent.push(None, &event);
        }
        let sessions = &mut shared.sessions;
        if !sessions.is_empty() {
            let id = event.session_id();
            if let Some(tx) = sessions.get(id) {
                if tx.receiver_count() == 0 {
                    sessions.remove(id);
                } else {
                    let _ = tx.send(event.clone());
                }
            }
        }
        // No subscribers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }

    /// Receive every event of one session published from now on. Its lag
    /// count is of that session's events only.
    pub fn subscribe_session(&self, session: &SessionId) -> broadcast::Receiver<Arc<Event>> {
        Self::session_channel(&mut self.lock(), session)
    }

    fn session_channel(
        shared: &mut Shared,
        session: &SessionId,
    ) -> broadcast::Receiver<Arc<Event>> {
        shared
            .sessions
            .entry(session.clone())
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe()
    }

    /// Receive every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// [`Bus::subscribe`] (or [`Bus::subscribe_session`] for `only`), with
    /// what prompted sessions published before, for a client that
    /// subscribes just after it prompted: each event is in the replay or
    /// comes on the channel, never both and never neither.
    pub fn subscribe_late(
        &self,
        only: Option<&SessionId>,
    ) -> (broadcast::Receiver<Arc<Event>>, Vec<Replay>) {
        let mut shared = self.lock();
        let rx = match only {
            Some(s) => Self::session_channel(&mut shared, s),
            None => self.tx.subscribe(),
        };
        let replay = shared.recent.snapshot(only);
        (rx, replay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    fn warning(session: &str) -> Event {
        Event::SessionWarning {
            session_id: SessionId(session.into()),
            message: String::new(),
        }
    }

    #[test]
    fn a_session_watcher_counts_only_its_own_missed_events() {
        let bus = Bus::new();
        let mut mine = bus.subscribe_session(&SessionId("a".into()));
        let mut all = bus.subscribe();
        // Each of a's events comes with two of b's.
        for _ in 0..CAPACITY + 5 {
            bus.publish(warning("a"));
            bus.publish(warning("b"));
            bus.publish(warning("b"));
        }
        assert_eq!(mine.try_recv(), Err(TryRecvError::Lagged(5)));
        assert_eq!(
            all.try_recv(),
            Err(TryRecvError::Lagged(2 * CAPACITY as u64 + 15)),
            "everyone's count would have said three times as many"
        );
        let first = mine.try_recv().unwrap();
        assert_eq!(first.session_id().as_str(), "a");
    }
}
