//! Who drives a session from outside: the front end a person uses (an
//! editor over ACP), named in the audit trail of every call its sessions
//! make. The MCP server writes its own `caller` row (each MCP call is a
//! request of the client's); a session's loop makes calls on a prompt's
//! behalf, so the boundary writes the row for it while the front end has
//! the session open ([`Callers::open`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use warden_protocol::SessionId;

/// Each session's open callers: a guard's id and the name it gave.
type Open = HashMap<SessionId, Vec<(u64, String)>>;

/// The front ends with sessions open in this process. Cheap to clone.
#[derive(Clone, Default)]
pub struct Callers {
    open: Arc<Mutex<Open>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

/// Keeps a caller named for a session until dropped.
pub struct CallerGuard {
    callers: Callers,
    session: SessionId,
    id: u64,
}

impl Drop for CallerGuard {
    fn drop(&mut self) {
        let mut open = self.callers.lock();
        if let Some(list) = open.get_mut(&self.session) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                open.remove(&self.session);
            }
        }
    }
}

impl Callers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Name `who` (e.g. `acp:Zed 0.190.1`) as a caller of `session`'s calls
    /// until the guard drops.
    pub fn open(&self, session: &SessionId, who: impl Into<String>) -> CallerGuard {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock()
            .entry(session.clone())
            .or_default()
            .push((id, who.into()));
        CallerGuard {
            callers: self.clone(),
            session: session.clone(),
            id,
        }
    }

    /// Who has the session open now, the first to open it first; several
    /// are joined with `, `. `None` when no front end named itself.
    pub fn of(&self, session: &SessionId) -> Option<String> {
        let open = self.lock();
        let list = open.get(session)?;
        let mut names: Vec<&str> = Vec::new();
        for (_, name) in list {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        Some(names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_is_named_while_its_guard_lives() {
        let callers = Callers::default();
        let s = SessionId("ses_1".into());
        assert_eq!(callers.of(&s), None);
        let zed = callers.open(&s, "acp:Zed 1.0");
        let again = callers.open(&s, "acp:Zed 1.0");
        let other = callers.open(&s, "acp:nvim 0.3");
        assert_eq!(callers.of(&s).as_deref(), Some("acp:Zed 1.0, acp:nvim 0.3"));
        drop(zed);
        assert_eq!(callers.of(&s).as_deref(), Some("acp:Zed 1.0, acp:nvim 0.3"));
        drop(other);
        assert_eq!(callers.of(&s).as_deref(), Some("acp:Zed 1.0"));
        drop(again);
        assert_eq!(callers.of(&s), None);
    }
}
