//! Questions to whoever is attached (a terminal, an HTTP client).
//!
//! A front end that can answer calls [`Permissions::attach`] (every session)
//! or [`Permissions::attach_to`] (one session) and keeps the guard while it
//! listens for `permission.asked` events; it answers with
//! [`Permissions::reply`]. With nobody attached for the session, a question
//! is a denial: the host never waits for an answer that cannot come.
//!
//! Every question ends, and ends with a `permission.replied` event: answered,
//! refused when its deadline passes (`ask_timeout_ms`, default 5 minutes),
//! when its session is aborted, or when the last front end that could answer
//! it leaves. [`Answer::refusal`] says which, in a sentence the model is shown.
//!
//! **Across hosts.** When the ledger relays events between hosts (its bus
//! has a relay, see `bus.rs`) and the process serves clients
//! ([`Permissions::answer_from_other_hosts`], which `warden serve` calls), a
//! front end on another host may answer, so a question waits for its
//! deadline even with nobody attached here. (A `warden run` on a shared
//! ledger keeps refusing at once what nobody here can answer.) Asks
//! relayed from other hosts are kept (until their `permission.replied`
//! arrives) and listed by [`Permissions::pending`]; [`Permissions::reply`]
//! to one of them sends the answer to the asking host, which applies it as
//! its own. An answer to an ask already settled is an error on the host
//! that knows it settled (it no longer lists it); one that crosses the
//! settling on its way (sent before this host saw the `permission.replied`)
//! is ignored by the asking host, with a line in its log.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use warden_protocol::{Action, Event, PermissionReply, PermissionRequest, Rule, SessionId};

use crate::bus::{Elsewhere, RelayedAnswer};
use crate::ledger::{Ledger, id};

/// How long a question waits for an answer when the config names no deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

/// Why a question was refused without a person saying `reject`, or that one did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nobody was attached for the session when it was asked.
    Nobody,
    /// Someone answered `reject`.
    Rejected,
    /// Nobody answered before the deadline.
    TimedOut(Duration),
    /// The last front end that could answer left while it waited.
    WatcherLeft,
    /// The session was aborted while it waited.
    Aborted,
}

impl Refusal {
    /// Whether this answer stops the session's loop: a person said no, or
    /// nobody said yes (nobody attached, the deadline, the watcher left).
    /// An abort stops the session by itself.
    pub fn stops_loop(self) -> bool {
        !matches!(self, Refusal::Aborted)
    }
}

impl fmt::Display for Refusal {
    /// The end of a sentence that starts "needs approval and ...".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Nobody => write!(
                f,
                "nobody was attached to give it; allow it in the config to run unattended"
            ),
            Refusal::Rejected => write!(f, "the user rejected it"),
            Refusal::TimedOut(d) => {
                let ms = d.as_millis();
                let within = if ms % 1000 == 0 {
                    format!("{} s", ms / 1000)
                } else {
                    format!("{ms} ms")
                };
                write!(
                    f,
                    "nobody answered within {within} (ask_timeout_ms), so it was refused"
                )
            }
            Refusal::WatcherLeft => write!(
                f,
                "the user who could answer disconnected before answering, so it was refused"
            ),
            Refusal::Aborted => write!(f, "the session was aborted while it waited"),
        }
    }
}

/// What came of a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub reply: PermissionReply,
    /// Set exactly when `reply` is `Reject`.
    pub refusal: Option<Refusal>,
}

impl Answer {
    fn given(reply: PermissionReply) -> Answer {
        Answer {
            reply,
            refusal: (reply == PermissionReply::Reject).then_some(Refusal::Rejected),
        }
    }

    fn refused(why: Refusal) -> Answer {
        Answer {
            reply: PermissionReply::Reject,
            refusal: Some(why),
        }
    }
}

struct Pending {
    request: PermissionRequest,
    tx: oneshot::Sender<Answer>,
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
    /// Other hosts' questions waiting for an answer (from relayed events).
    elsewhere: HashMap<String, PermissionRequest>,
}

impl State {
    fn attached(&self, session: &SessionId) -> bool {
        self.everywhere > 0 || self.per_session.get(session).is_some_and(|n| *n > 0)
    }
}

struct Inner {
    ledger: Ledger,
    state: Mutex<State>,
    deadline: Duration,
    /// Whether front ends on other hosts count as able to answer.
    others_answer: std::sync::atomic::AtomicBool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether someone may answer: someone attached here, or (on a ledger
    /// shared by serving hosts) anyone on another host.
    fn can_answer(&self, state: &State, session: &SessionId) -> bool {
        state.attached(session)
            || (self
                .others_answer
                .load(std::sync::atomic::Ordering::Relaxed)
                && self.ledger.bus().is_relayed())
    }

    /// Settle a question that is still pending with a refusal: its asker
    /// wakes with the reason, and the refusal is on the bus. Nothing when it
    /// was already settled.
    fn settle(&self, request_id: &str, why: Refusal) -> bool {
        let Some(p) = self.lock().pending.remove(request_id) else {
            return false;
        };
        self.refused(p, why);
        true
    }

    fn refused(&self, p: Pending, why: Refusal) {
        let bus = self.ledger.bus();
        bus.publish(Event::PermissionReplied {
            session_id: p.request.session_id.clone(),
            request_id: p.request.id.clone(),
            reply: PermissionReply::Reject,
        });
        if matches!(why, Refusal::TimedOut(_) | Refusal::WatcherLeft) {
            bus.publish(Event::SessionWarning {
                session_id: p.request.session_id.clone(),
                message: format!(
                    "the question {} (`{}` on `{}`) was refused: {why}",
                    p.request.id,
                    p.request.permission,
                    p.request.patterns.join(" ")
                ),
            });
        }
        let _ = p.tx.send(Answer::refused(why));
    }
}

/// The session rules an "always" answer adds: only a literal permission and
/// literal patterns become rules; a glob here would cover more than the
/// question was about.
fn literal_rules(request: &PermissionRequest, action: Action) -> Vec<Rule> {
    if !super::policy::is_literal(&request.permission) {
        return Vec::new();
    }
    request
        .always
        .iter()
        .filter(|pattern| super::policy::is_literal(pattern))
        .map(|pattern| Rule {
            permission: request.permission.clone(),
            pattern: pattern.clone(),
            action,
        })
        .collect()
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
            let mut state = self.inner.lock();
            match &self.session {
                None => state.everywhere = state.everywhere.saturating_sub(1),
                Some(s) => {
                    if let Some(n) = state.per_session.get_mut(s) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            state.per_session.remove(s);
                        }
                    }
                }
            }
            let gone: Vec<String> = state
                .pending
                .iter()
                .filter(|(_, p)| !self.inner.can_answer(&state, &p.request.session_id))
                .map(|(id, _)| id.clone())
                .collect();
            gone.iter()
                .filter_map(|id| state.pending.remove(id))
                .collect()
        };
        for p in orphaned {
            self.inner.refused(p, Refusal::WatcherLeft);
        }
    }
}

/// Settles a question when its asker goes away without an answer (its call
/// was dropped, e.g. by a timeout), so no question outlives its asker.
struct Forget<'a> {
    permissions: &'a Permissions,
    id: String,
    why: Refusal,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.permissions.inner.settle(&self.id, self.why);
    }
}

impl Permissions {
    /// Questions wait [`DEFAULT_DEADLINE`] for an answer.
    pub fn new(ledger: Ledger) -> Self {
        Self::with_deadline(ledger, DEFAULT_DEADLINE)
    }

    /// Questions wait at most `deadline` for an answer.
    pub fn with_deadline(ledger: Ledger, deadline: Duration) -> Self {
        let relayed = ledger.bus().is_relayed();
        let permissions = Permissions {
            inner: Arc::new(Inner {
                ledger,
                state: Mutex::new(State::default()),
                deadline,
                others_answer: Default::default(),
            }),
        };
        if relayed && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(follow_elsewhere(Arc::downgrade(&permissions.inner)));
        }
        permissions
    }

    /// Count front ends on other hosts sharing the ledger as able to
    /// answer (when it relays events between hosts): a question then waits
    /// for its deadline, not refused at once, when nobody here is attached.
    pub fn answer_from_other_hosts(&self) {
        self.inner
            .others_answer
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long a question waits for an answer.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
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
        self.inner.can_answer(&self.lock(), session)
    }

    /// Ask and wait for the answer. See [`Permissions::ask_why`].
    pub async fn ask(
        &self,
        request: PermissionRequest,
        cancel: &CancellationToken,
    ) -> PermissionReply {
        self.ask_why(request, cancel).await.reply
    }

    /// Ask and wait for the answer, and say why it was refused when it was.
    /// Refused at once when nobody can answer for the session; refused with a
    /// `permission.replied` event when the deadline passes, when `cancel`
    /// fires (the session was aborted) and when the last front end that could
    /// answer leaves.
    pub async fn ask_why(
        &self,
        mut request: PermissionRequest,
        cancel: &CancellationToken,
    ) -> Answer {
        if request.id.is_empty() {
            request.id = id::ascending("per");
        }
        let bus = self.inner.ledger.bus().clone();
        let session_id = request.session_id.clone();
        let request_id = request.id.clone();
        let (tx, rx) = oneshot::channel();
        let waiting = {
            let mut state = self.lock();
            let answerable = self.inner.can_answer(&state, &session_id);
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
            return Answer::refused(Refusal::Nobody);
        }
        // A call dropped while it waits (its task aborted) settles the question too.
        let _forget = Forget {
            permissions: self,
            id: request_id.clone(),
            why: Refusal::Aborted,
        };
        bus.publish(Event::PermissionAsked { request });
        let deadline = self.inner.deadline;
        let mut rx = rx;
        let why = tokio::select! {
            r = &mut rx => return r.unwrap_or(Answer::refused(Refusal::WatcherLeft)),
            _ = cancel.cancelled() => Refusal::Aborted,
            _ = tokio::time::sleep(deadline) => Refusal::TimedOut(deadline),
        };
        if self.inner.settle(&request_id, why) {
            Answer::refused(why)
        } else {
            // Answered in the same instant: the answer stands.
            rx.try_recv().unwrap_or(Answer::refused(why))
        }
    }

    /// Answer a pending question. `Always` also adds session rules allowing
    /// the request's `always` patterns, and settles other pending questions
    /// of the session that those rules now allow.
    pub async fn reply(&self, request_id: &str, reply: PermissionReply) -> Result<(), String> {
        let (local, elsewhere) = {
            let mut state = self.lock();
            match state.pending.remove(request_id) {
                Some(p) => (Some(p), None),
                None => (None, state.elsewhere.remove(request_id)),
            }
        };
        let p = match (local, elsewhere) {
            (Some(p), _) => p,
            (None, Some(asked)) => {
                // Another host asked: it applies the answer and says so.
                let answer = RelayedAnswer {
                    session_id: asked.session_id,
                    request_id: request_id.to_string(),
                    reply,
                };
                if !self.inner.ledger.bus().send_answer(answer) {
                    return Err(format!(
                        "the question {request_id} was asked on another host, and this host no longer reaches the others"
                    ));
                }
                return Ok(());
            }
            (None, None) => return Err(format!("no pending permission request {request_id}")),
        };
        let session_id = p.request.session_id.clone();
        if p.tx.is_closed() {
            // The asker is gone (its call ended): a late answer grants nothing.
            return Err(format!("the question {request_id} is no longer waiting"));
        }
        // The rules an `always` adds exist before the asker goes on.
        if reply == PermissionReply::Always {
            let added = literal_rules(&p.request, Action::Allow);
            self.allow_for_session(&session_id, added).await?;
        }
        // Published before the asker wakes, so the answer is on the bus before
        // anything the answer lets happen.
        self.inner.ledger.bus().publish(Event::PermissionReplied {
            session_id: session_id.clone(),
            request_id: request_id.to_string(),
            reply,
        });
        let _ = p.tx.send(Answer::given(reply));
        Ok(())
    }

    /// Refuse a pending question and every later one like it in this
    /// session: literal deny rules for the request's `always` patterns are
    /// added to the session's rules before the asker wakes (the refusal an
    /// editor's "reject always" means). Globs are not turned into rules, as
    /// for `Always`.
    pub async fn reject_always(&self, request_id: &str) -> Result<(), String> {
        let request = self
            .lock()
            .pending
            .get(request_id)
            .map(|p| p.request.clone());
        if let Some(request) = request {
            let denied = literal_rules(&request, Action::Deny);
            if !denied.is_empty() {
                self.inner
                    .ledger
                    .update_session_permission(&request.session_id, |rules| rules.extend(denied))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        self.reply(request_id, PermissionReply::Reject).await
    }

    /// Settle a pending question as one nobody could answer: the front end
    /// that was asked has no way to ask its user (its client refused the
    /// request, or does not implement it). The asker is told what it is told
    /// when nobody is attached, never that the call was allowed. `false`
    /// when the question was no longer pending.
    pub fn unanswerable(&self, request_id: &str) -> bool {
        self.inner.settle(request_id, Refusal::Nobody)
    }

    async fn allow_for_session(
        &self,
        session_id: &SessionId,
        added: Vec<Rule>,
    ) -> Result<(), String> {
        let session = self
            .inner
            .ledger
            .update_session_permission(session_id, |rules| rules.extend(added))
            .await
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
            // Boxed: `reply` may call back here (for `Always`; never for `Once`).
            Box::pin(self.reply(&id, PermissionReply::Once)).await?;
        }
        Ok(())
    }

    /// Questions waiting for an answer, optionally of one session: this
    /// host's and (on a shared ledger) the other hosts'.
    pub fn pending(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let state = self.lock();
        let mut out: Vec<PermissionRequest> = state
            .pending
            .values()
            .map(|p| &p.request)
            .chain(state.elsewhere.values())
            .filter(|r| session.is_none_or(|s| &r.session_id == s))
            .cloned()
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }
}

/// Keep other hosts' questions and apply the answers they send to this
/// host's, while the question service lives.
async fn follow_elsewhere(inner: std::sync::Weak<Inner>) {
    let mut arrivals = match inner.upgrade() {
        Some(inner) => inner.ledger.bus().subscribe_elsewhere(),
        None => return,
    };
    loop {
        let arrival = match arrivals.recv().await {
            Ok(a) => a,
            // Missed some: the asks it knows may be stale until they settle.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    "missed {n} events from other hosts; their asks listed here may be stale"
                );
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match &*arrival {
            Elsewhere::Event { event, .. } => match &**event {
                Event::PermissionAsked { request } => {
                    inner
                        .lock()
                        .elsewhere
                        .insert(request.id.clone(), request.clone());
                }
                Event::PermissionReplied { request_id, .. } => {
                    inner.lock().elsewhere.remove(request_id);
                }
                _ => {}
            },
            Elsewhere::Answer(answer) => {
                if !inner.lock().pending.contains_key(&answer.request_id) {
                    // Not ours, or settled already: the first answer stands.
                    continue;
                }
                let permissions = Permissions { inner };
                if let Err(e) = permissions.reply(&answer.request_id, answer.reply).await {
                    tracing::warn!("an answer from another host was not applied: {e}");
                }
            }
        }
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
        let s = ledger.create_session("/w", "t").await.unwrap();
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
        let s = ledger.create_session("/w", "t").await.unwrap();
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
        p.reply(&id, PermissionReply::Always).await.unwrap();
        assert_eq!(asker.await.unwrap(), PermissionReply::Always);
        let session = ledger.session(&s.id).await.unwrap();
        assert_eq!(
            session.permission,
            vec![Rule {
                permission: "edit".into(),
                pattern: "a.txt".into(),
                action: Action::Allow
            }]
        );
        assert!(
            p.reply(&id, PermissionReply::Once).await.is_err(),
            "answered questions are gone"
        );
    }

    #[tokio::test]
    async fn a_front_end_for_one_session_answers_only_that_session() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let a = ledger.create_session("/w", "a").await.unwrap();
        let b = ledger.create_session("/w", "b").await.unwrap();
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
        let a = ledger.create_session("/w", "a").await.unwrap();
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
        p.reply(&id, PermissionReply::Once).await.unwrap();
        assert_eq!(asker.await.unwrap(), PermissionReply::Once);
        drop(one);
    }

    #[tokio::test]
    async fn a_question_nobody_answers_is_refused_at_its_deadline() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").await.unwrap();
        let p = Permissions::with_deadline(ledger.clone(), Duration::from_millis(30));
        let _guard = p.attach();
        let mut events = ledger.bus().subscribe();
        let answer = p.ask_why(request(&s.id), &CancellationToken::new()).await;
        assert_eq!(
            answer,
            Answer {
                reply: PermissionReply::Reject,
                refusal: Some(Refusal::TimedOut(Duration::from_millis(30)))
            }
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
        match &*events.recv().await.unwrap() {
            Event::SessionWarning { message, .. } => assert!(
                message.ends_with(
                    "(`edit` on `a.txt`) was refused: nobody answered within 30 ms (ask_timeout_ms), so it was refused"
                ),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(p.pending(None).is_empty());
    }

    #[tokio::test]
    async fn an_abort_settles_a_waiting_question_with_an_event() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").await.unwrap();
        let p = Permissions::new(ledger.clone());
        let _guard = p.attach();
        let mut events = ledger.bus().subscribe();
        let cancel = CancellationToken::new();
        let asker = {
            let (p, s, cancel) = (p.clone(), s.id.clone(), cancel.clone());
            tokio::spawn(async move { p.ask_why(request(&s), &cancel).await })
        };
        while !matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionAsked { .. }
        ) {}
        cancel.cancel();
        assert_eq!(asker.await.unwrap().refusal, Some(Refusal::Aborted));
        assert!(matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionReplied {
                reply: PermissionReply::Reject,
                ..
            }
        ));
        assert!(p.pending(None).is_empty());
    }

    #[tokio::test]
    async fn a_watcher_leaving_settles_its_questions_with_an_event_and_a_reason() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").await.unwrap();
        let p = Permissions::new(ledger.clone());
        let guard = p.attach_to(&s.id);
        let mut events = ledger.bus().subscribe();
        let asker = {
            let (p, s) = (p.clone(), s.id.clone());
            tokio::spawn(async move { p.ask_why(request(&s), &CancellationToken::new()).await })
        };
        while !matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionAsked { .. }
        ) {}
        drop(guard);
        assert_eq!(asker.await.unwrap().refusal, Some(Refusal::WatcherLeft));
        assert!(matches!(
            &*events.recv().await.unwrap(),
            Event::PermissionReplied {
                reply: PermissionReply::Reject,
                ..
            }
        ));
        assert!(matches!(
            &*events.recv().await.unwrap(),
            Event::SessionWarning { .. }
        ));
    }

    #[tokio::test]
    async fn a_question_asked_with_nobody_attached_says_so() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").await.unwrap();
        let p = Permissions::new(ledger.clone());
        let answer = p.ask_why(request(&s.id), &CancellationToken::new()).await;
        assert_eq!(answer.refusal, Some(Refusal::Nobody));
        assert_eq!(
            answer.refusal.unwrap().to_string(),
            "nobody was attached to give it; allow it in the config to run unattended"
        );
    }
}
