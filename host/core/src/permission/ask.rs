//! Questions to whoever is attached (a terminal, an HTTP client).
//!
//! A front end that can answer calls [`Permissions::attach`] (every session)
//! or [`Permissions::attach_to`] (one session) and keeps the guard while it
//! listens for `permission.asked` events; it answers with
//! [`Permissions::reply`]. With nobody attached for the session, a question
//! is a denial: the host never waits for an answer that cannot come.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use warden_protocol::{Action, Event, PermissionReply, PermissionRequest, Rule, SessionId};

use crate::ledger::{Ledger, id};

struct Pending {
    request: PermissionRequest,
    tx: oneshot::Sender<PermissionReply>,
}

/// Who can answer, and what waits for an answer: one lock, so a question is
/// never left waiting by a front end that leaves while it is being asked.
#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// Front ends that answer for every session.
    everywhere: usize,
    /// Front ends that answer for one session.
    per_session: HashMap<SessionId, usize>,
}

impl State {
    fn can_answer(&self, session: &SessionId) -> bool {
        self.everywhere > 0 || self.per_session.get(session).is_some_and(|n| *n > 0)
    }
}

struct Inner {
    ledger: Ledger,
    state: Mutex<State>,
}

/// The question service. Cheap to clone.
#[derive(Clone)]
pub struct Permissions {
    inner: Arc<Inner>,
}

/// Keeps a front end counted as attached until dropped.
pub struct AttachGuard {
    inner: Arc<Inner>,
    session: Option<SessionId>,
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        // Questions nobody is left to answer are refused now, not left waiting.
        let orphaned: Vec<Pending> = {
            let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
            match &self.session {
                None => state.everywhere -= 1,
                Some(s) => {
                    if let Some(n) = state.per_session.get_mut(s) {
                        *n -= 1;
                        if *n == 0 {
                            state.per_session.remove(s);
                        }
                    }
                }
            }
            let gone: Vec<String> = state
                .pending
                .iter()
                .filter(|(_, p)| !state.can_answer(&p.request.session_id))
                .map(|(id, _)| id.clone())
                .collect();
            gone.iter()
                .filter_map(|id| state.pending.remove(id))
                .collect()
        };
        for p in orphaned {
            let _ = p.tx.send(PermissionReply::Reject);
            self.inner.ledger.bus().publish(Event::PermissionReplied {
                session_id: p.request.session_id.clone(),
                request_id: p.request.id.clone(),
                reply: PermissionReply::Reject,
            });
        }
    }
}

/// Removes a question from the pending list when its asker goes away
/// (answered, cancelled, or dropped with a call that timed out).
struct Forget<'a> {
    permissions: &'a Permissions,
    id: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.permissions.lock().pending.remove(&self.id);
    }
}

impl Permissions {
    pub fn new(ledger: Ledger) -> Self {
        Permissions {
            inner: Arc::new(Inner {
                ledger,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Count the caller as someone who answers questions of every session,
    /// until the guard drops.
    pub fn attach(&self) -> AttachGuard {
        self.lock().everywhere += 1;
        AttachGuard {
            inner: self.inner.clone(),
            session: None,
        }
    }

    /// Count the caller as someone who answers questions of one session
    /// (a client watching only that session's events), until the guard drops.
    pub fn attach_to(&self, session: &SessionId) -> AttachGuard {
        *self.lock().per_session.entry(session.clone()).or_default() += 1;
        AttachGuard {
            inner: self.inner.clone(),
            session: Some(session.clone()),
        }
    }

    /// Whether anyone can answer a question of this session.
    pub fn can_answer(&self, session: &SessionId) -> bool {
        self.lock().can_answer(session)
    }

    /// Ask and wait for the answer. `Reject` at once when nobody can answer
    /// for the session, and when `cancel` fires.
    pub async fn ask(
        &self,
        mut request: PermissionRequest,
        cancel: &CancellationToken,
    ) -> PermissionReply {
        if request.id.is_empty() {
            request.id = id::ascending("per");
        }
        let bus = self.inner.ledger.bus().clone();
        let session_id = request.session_id.clone();
        let request_id = request.id.clone();
        let (tx, rx) = oneshot::channel();
        let waiting = {
            let mut state = self.lock();
            let answerable = state.can_answer(&session_id);
            if answerable {
                state.pending.insert(
                    request.id.clone(),
                    Pending {
                        request: request.clone(),
                        tx,
                    },
                );
            }
            answerable
        };
        if !waiting {
            bus.publish(Event::PermissionAsked { request });
            bus.publish(Event::PermissionReplied {
                session_id,
                request_id,
                reply: PermissionReply::Reject,
            });
            return PermissionReply::Reject;
        }
        let _forget = Forget {
            permissions: self,
            id: request_id,
        };
        bus.publish(Event::PermissionAsked { request });
        tokio::select! {
            r = rx => r.unwrap_or(PermissionReply::Reject),
            _ = cancel.cancelled() => PermissionReply::Reject,
        }
    }

    /// Answer a pending question. `Always` also adds session rules allowing
    /// the request's `always` patterns, and settles other pending questions
    /// of the session that those rules now allow.
    pub fn reply(&self, request_id: &str, reply: PermissionReply) -> Result<(), String> {
        let Some(p) = self.lock().pending.remove(request_id) else {
            return Err(format!("no pending permission request {request_id}"));
        };
        let session_id = p.request.session_id.clone();
        if p.tx.is_closed() {
            // The asker is gone (its call ended): a late answer grants nothing.
            return Err(format!("the question {request_id} is no longer waiting"));
        }
        // The rules an `always` adds exist before the asker goes on.
        if reply == PermissionReply::Always {
            // Only literal patterns become rules; a glob here would allow more
            // than the question was about.
            let added: Vec<Rule> = p
                .request
                .always
                .iter()
                .filter(|pattern| !pattern.contains(['*', '?']))
                .map(|pattern| Rule {
                    permission: p.request.permission.clone(),
                    pattern: pattern.clone(),
                    action: Action::Allow,
                })
                .collect();
            self.allow_for_session(&session_id, added)?;
        }
        // Published before the asker wakes, so the answer is on the bus before
        // anything the answer lets happen.
        self.inner.ledger.bus().publish(Event::PermissionReplied {
            session_id: session_id.clone(),
            request_id: request_id.to_string(),
            reply,
        });
        let _ = p.tx.send(reply);
        Ok(())
    }

    fn allow_for_session(&self, session_id: &SessionId, added: Vec<Rule>) -> Result<(), String> {
        let session = self
            .inner
            .ledger
            .update_session_permission(session_id, |rules| rules.extend(added))
            .map_err(|e| e.to_string())?;
        let settled: Vec<String> = self
            .lock()
            .pending
            .values()
            .filter(|q| &q.request.session_id == session_id)
            .filter(|q| {
                super::evaluate_all(
                    &q.request.permission,
                    &q.request.patterns,
                    &[&session.permission],
                )
                .action
                    == Action::Allow
            })
            .map(|q| q.request.id.clone())
            .collect();
        for id in settled {
            self.reply(&id, PermissionReply::Once)?;
        }
        Ok(())
    }

    /// Questions waiting for an answer, optionally of one session.
    pub fn pending(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let mut out: Vec<PermissionRequest> = self
            .lock()
            .pending
            .values()
            .filter(|p| session.is_none_or(|s| &p.request.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;
    use serde_json::json;

    fn request(session: &SessionId) -> PermissionRequest {
        PermissionRequest {
            id: String::new(),
            session_id: session.clone(),
            permission: "edit".into(),
            patterns: vec!["a.txt".into()],
            always: vec!["a.txt".into()],
            metadata: json!({}),
            tool: None,
        }
    }

    #[tokio::test]
    async fn nobody_attached_means_reject() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").unwrap();
        let p = Permissions::new(ledger.clone());
        let mut events = ledger.bus().subscribe();
        assert_eq!(
            p.ask(request(&s.id), &CancellationToken::new()).await,
            PermissionReply::Reject
        );
        assert!(matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionAsked { .. }
        ));
        assert!(matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionReplied {
                reply: PermissionReply::Reject,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn an_attached_answer_is_delivered_and_always_adds_a_rule() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").unwrap();
        let p = Permissions::new(ledger.clone());
        let _guard = p.attach();
        let mut events = ledger.bus().subscribe();
        let asker = {
            let p = p.clone();
            let s = s.id.clone();
            tokio::spawn(async move { p.ask(request(&s), &CancellationToken::new()).await })
        };
        let id = loop {
            if let Event::PermissionAsked { request } = &*events.recv().await.unwrap() {
                break request.id.clone();
            }
        };
        assert_eq!(p.pending(Some(&s.id)).len(), 1);
        p.reply(&id, PermissionReply::Always).unwrap();
        assert_eq!(asker.await.unwrap(), PermissionReply::Always);
        let session = ledger.session(&s.id).unwrap();
        assert_eq!(
            session.permission,
            vec![Rule {
                permission: "edit".into(),
                pattern: "a.txt".into(),
                action: Action::Allow
            }]
        );
        assert!(
            p.reply(&id, PermissionReply::Once).is_err(),
            "answered questions are gone"
        );
    }

    #[tokio::test]
    async fn a_front_end_for_one_session_answers_only_that_session() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let a = ledger.create_session("/w", "a").unwrap();
        let b = ledger.create_session("/w", "b").unwrap();
        let p = Permissions::new(ledger.clone());
        let guard = p.attach_to(&a.id);
        assert!(p.can_answer(&a.id));
        assert!(!p.can_answer(&b.id));
        // Nobody watches b: its question is refused without waiting.
        assert_eq!(
            p.ask(request(&b.id), &CancellationToken::new()).await,
            PermissionReply::Reject
        );
        assert!(p.pending(None).is_empty());

        // a's question waits, and is refused when its only watcher leaves.
        let mut events = ledger.bus().subscribe();
        let asker = {
            let p = p.clone();
            let a = a.id.clone();
            tokio::spawn(async move { p.ask(request(&a), &CancellationToken::new()).await })
        };
        while !matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionAsked { .. }
        ) {}
        assert_eq!(p.pending(Some(&a.id)).len(), 1);
        drop(guard);
        assert_eq!(asker.await.unwrap(), PermissionReply::Reject);
        assert!(p.pending(None).is_empty());
        assert!(!p.can_answer(&a.id));
    }

    #[tokio::test]
    async fn leaving_keeps_questions_someone_else_can_still_answer() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let a = ledger.create_session("/w", "a").unwrap();
        let p = Permissions::new(ledger.clone());
        let everywhere = p.attach();
        let one = p.attach_to(&a.id);
        let mut events = ledger.bus().subscribe();
        let asker = {
            let p = p.clone();
            let a = a.id.clone();
            tokio::spawn(async move { p.ask(request(&a), &CancellationToken::new()).await })
        };
        let id = loop {
            if let Event::PermissionAsked { request } = &*events.recv().await.unwrap() {
                break request.id.clone();
            }
        };
        drop(everywhere);
        assert_eq!(
            p.pending(None).len(),
            1,
            "the session's own watcher is still there"
        );
        p.reply(&id, PermissionReply::Once).unwrap();
        assert_eq!(asker.await.unwrap(), PermissionReply::Once);
        drop(one);
    }
}
