//! The in-process event bus. Every ledger write and status change is
//! published here; front ends subscribe. Publishing never blocks: a
//! subscriber that falls more than the buffer behind is told how many events
//! it missed (and can re-read current state from the ledger).

use std::sync::Arc;

use tokio::sync::broadcast;
use warden_protocol::Event;

/// Events kept for slow subscribers before they start missing some.
pub const CAPACITY: usize = 8192;

/// A cloneable handle to the bus.
#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Bus { tx }
    }

    /// Publish an event to every current subscriber.
    pub fn publish(&self, event: Event) {
        // No subscribers is fine: nobody is watching.
        let _ = self.tx.send(Arc::new(event));
    }

    /// How many published events some subscriber has not received yet.
    pub fn unread(&self) -> usize {
        self.tx.len()
    }

    /// Receive every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}
