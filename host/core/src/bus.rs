//! The in-process event bus. Every ledger write and status change is
//! published here; front ends subscribe. Publishing never blocks: a
//! subscriber that falls more than the buffer behind is told how many events
//! it missed (and can re-read current state from the ledger).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use warden_protocol::{Event, SessionId};

/// Events kept for slow subscribers before they start missing some.
pub const CAPACITY: usize = 8192;

/// A cloneable handle to the bus.
#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Event>>,
    /// A channel of its own for each session someone watches alone, so a
    /// watcher that lags is told how many of *its* session's events it
    /// missed, not how many of everyone's.
    sessions: Arc<Mutex<HashMap<SessionId, broadcast::Sender<Arc<Event>>>>>,
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
            sessions: Default::default(),
        }
    }

    /// Publish an event to every current subscriber.
    pub fn publish(&self, event: Event) {
        let event = Arc::new(event);
        {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
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
        }
        // No subscribers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }

    /// Receive every event of one session published from now on. Its lag
    /// count is of that session's events only.
    pub fn subscribe_session(&self, session: &SessionId) -> broadcast::Receiver<Arc<Event>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .entry(session.clone())
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe()
    }

    /// How many published events some subscriber has not received yet.
    pub fn unread(&self) -> usize {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .values()
            .map(|tx| tx.len())
            .fold(self.tx.len(), usize::max)
    }

    /// Receive every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
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
