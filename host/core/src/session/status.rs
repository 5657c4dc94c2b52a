//! Session status (busy / retry / idle): a session-level signal, published
//! on the bus when it changes. It says nothing about any one tool call.

use std::collections::HashMap;
use std::sync::Mutex;

use warden_protocol::{Event, SessionId, SessionStatus};

use crate::bus::Bus;

/// The current status of every session this process runs.
pub struct StatusBoard {
    bus: Bus,
    current: Mutex<HashMap<SessionId, SessionStatus>>,
}

impl StatusBoard {
    pub fn new(bus: Bus) -> Self {
        StatusBoard {
            bus,
            current: Mutex::new(HashMap::new()),
        }
    }

    /// Set a session's status; publishes only when it changes.
    pub fn set(&self, session: &SessionId, status: SessionStatus) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let changed = match &status {
            SessionStatus::Idle => current.remove(session).is_some(),
            other => current.insert(session.clone(), other.clone()).as_ref() != Some(other),
        };
        drop(current);
        if changed {
            self.bus.publish(Event::SessionStatus {
                session_id: session.clone(),
                status,
            });
        }
    }

    /// A session's status (idle when this process is not running it).
    pub fn get(&self, session: &SessionId) -> SessionStatus {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
            .unwrap_or(SessionStatus::Idle)
    }
}
