//! A ledger backend that counts: it hands every call on to the real one
//! and records when each ended and whether it wrote, so a bench (or a
//! test) can say how many transactions (and reads) a window really held,
//! instead of inferring them from the events the bus carried.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::phase::{Phase, PhaseKind};
use crate::store::{HolderIsDead, PermissionChange, Replay, Result, SessionExport, StepWrite};
use crate::{
    AuditEntry, Fence, LeaseHeld, PartEvent, PromptState, QueuedPrompt, Store, TimelineRow,
};
use async_trait::async_trait;
use warden_protocol::{
    MessageId, MessageInfo, MessageWithParts, Millis, Part, SessionId, SessionInfo,
};

/// One store call: when it began and ended, what it was, whether it wrote.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub started: Instant,
    pub ended: Instant,
    pub name: &'static str,
    pub wrote: bool,
}

/// The real backend, counted.
pub struct Counted {
    inner: Arc<dyn Store>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Counted {
    pub fn new(inner: Arc<dyn Store>) -> (Arc<Counted>, Arc<Mutex<Vec<Call>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        (
            Arc::new(Counted {
                inner,
                calls: calls.clone(),
            }),
            calls,
        )
    }

    fn note<T>(
        &self,
        name: &'static str,
        wrote: bool,
        started: Instant,
        out: Result<T>,
    ) -> Result<T> {
        let call = Call {
            started,
            ended: Instant::now(),
            name,
            wrote,
        };
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
        out
    }
}

/// Hand a call on to the real backend and note it: `write!(self, name,
/// expr)` for a transaction that writes, `read!` for one that does not.
macro_rules! write {
    ($self:ident, $name:literal, $call:expr) => {{
        let started = Instant::now();
        let out = $call.await;
        $self.note($name, true, started, out)
    }};
}
macro_rules! read {
    ($self:ident, $name:literal, $call:expr) => {{
        let started = Instant::now();
        let out = $call.await;
        $self.note($name, false, started, out)
    }};
}

#[async_trait]
impl Store for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn outbox(&self) -> Option<Arc<dyn crate::outbox::Outbox>> {
        self.inner.outbox()
    }
    fn watch_writes(&self) -> Option<crate::watch::Writes> {
        self.inner.watch_writes()
    }
    async fn replay(&self, after: i64, session: Option<&SessionId>) -> Result<Option<Replay>> {
        read!(self, "replay", self.inner.replay(after, session))
    }
    async fn create_session(&self, info: &SessionInfo) -> Result<()> {
        write!(self, "create_session", self.inner.create_session(info))
    }
    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        read!(self, "session", self.inner.session(id))
    }
    async fn sessions(&self) -> Result<Vec<SessionInfo>> {
        read!(self, "sessions", self.inner.sessions())
    }
    async fn update_permission(
        &self,
        id: &SessionId,
        fence: Option<&Fence>,
        change: PermissionChange,
    ) -> Result<Option<SessionInfo>> {
        write!(
            self,
            "update_permission",
            self.inner.update_permission(id, fence, change)
        )
    }
    async fn delete_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        write!(self, "delete_session", self.inner.delete_session(id, fence))
    }
    async fn touch_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        write!(self, "touch_session", self.inner.touch_session(id, fence))
    }
    async fn put_message(&self, info: &MessageInfo, fence: Option<&Fence>) -> Result<bool> {
        write!(self, "put_message", self.inner.put_message(info, fence))
    }
    async fn put_part(
        &self,
        part: &Part,
        timeline: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        write!(
            self,
            "put_part",
            self.inner.put_part(part, timeline, audit, fence)
        )
    }
    async fn write_step(&self, step: &StepWrite<'_>, fence: Option<&Fence>) -> Result<bool> {
        write!(self, "write_step", self.inner.write_step(step, fence))
    }
    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        read!(self, "messages", self.inner.messages(session))
    }
    async fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>> {
        read!(self, "part_events", self.inner.part_events(session))
    }
    async fn audit(
        &self,
        session: &SessionId,
        entries: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        write!(self, "audit", self.inner.audit(session, entries, fence))
    }
    async fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>> {
        read!(self, "audit_trail", self.inner.audit_trail(session))
    }
    async fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
        fence: Option<&Fence>,
    ) -> Result<()> {
        write!(
            self,
            "mark_phases",
            self.inner.mark_phases(session, message, marks, fence)
        )
    }
    async fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        read!(self, "phases", self.inner.phases(session))
    }
    async fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: Arc<HolderIsDead>,
    ) -> Result<std::result::Result<Fence, LeaseHeld>> {
        write!(
            self,
            "acquire_lease",
            self.inner
                .acquire_lease(session, holder, ttl_ms, holder_is_dead)
        )
    }
    async fn renew_lease(&self, session: &SessionId, fence: &Fence, ttl_ms: i64) -> Result<bool> {
        write!(
            self,
            "renew_lease",
            self.inner.renew_lease(session, fence, ttl_ms)
        )
    }
    async fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        write!(
            self,
            "release_lease",
            self.inner.release_lease(session, fence)
        )
    }
    async fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>> {
        read!(self, "leases", self.inner.leases())
    }
    async fn lease(&self, session: &SessionId) -> Result<Option<(String, i64)>> {
        read!(self, "lease", self.inner.lease(session))
    }
    async fn check_fence(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        read!(self, "check_fence", self.inner.check_fence(session, fence))
    }
    async fn enqueue_prompt(&self, session: &SessionId, body: &str) -> Result<i64> {
        write!(
            self,
            "enqueue_prompt",
            self.inner.enqueue_prompt(session, body)
        )
    }
    async fn open_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
        read!(self, "open_prompts", self.inner.open_prompts(session))
    }
    async fn queued_prompt(&self, number: i64) -> Result<Option<QueuedPrompt>> {
        read!(self, "queued_prompt", self.inner.queued_prompt(number))
    }
    async fn take_prompt(
        &self,
        session: &SessionId,
        number: i64,
        message: &MessageId,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        write!(
            self,
            "take_prompt",
            self.inner.take_prompt(session, number, message, fence)
        )
    }
    async fn settle_prompt(
        &self,
        session: &SessionId,
        number: i64,
        state: &PromptState,
        fence: Option<&Fence>,
    ) -> Result<()> {
        write!(
            self,
            "settle_prompt",
            self.inner.settle_prompt(session, number, state, fence)
        )
    }
    async fn sessions_with_open_prompts(&self) -> Result<Vec<SessionId>> {
        read!(
            self,
            "sessions_with_open_prompts",
            self.inner.sessions_with_open_prompts()
        )
    }
    async fn checkpoint(&self) -> Result<()> {
        write!(self, "checkpoint", self.inner.checkpoint())
    }
    async fn export_session(&self, id: &SessionId) -> Result<Option<SessionExport>> {
        read!(self, "export_session", self.inner.export_session(id))
    }
    async fn import_session(&self, export: &SessionExport) -> Result<bool> {
        write!(self, "import_session", self.inner.import_session(export))
    }
}

/// How many times each name occurs in `names`, most first (then by name).
pub fn tally(names: &[&'static str]) -> Vec<(&'static str, usize)> {
    let mut by_name: Vec<(&'static str, usize)> = Vec::new();
    for n in names {
        match by_name.iter_mut().find(|(m, _)| m == n) {
            Some((_, count)) => *count += 1,
            None => by_name.push((n, 1)),
        }
    }
    by_name.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_name
}

/// The calls that ended inside `(start, end]`: (writes, reads), with the
/// writes' names.
pub fn within(calls: &[Call], start: Instant, end: Instant) -> (Vec<&'static str>, usize) {
    let inside = calls.iter().filter(|c| c.ended > start && c.ended <= end);
    let (writes, reads): (Vec<&Call>, Vec<&Call>) = inside.partition(|c| c.wrote);
    (writes.iter().map(|c| c.name).collect(), reads.len())
}

/// Where the writes that ended inside `start..=end` spent the window: the
/// time the backend took for them (each from when it began, or from
/// `start` if it began before), and when the last of them ended.
pub fn write_time(calls: &[Call], start: Instant, end: Instant) -> (Duration, Option<Instant>) {
    let writes = calls
        .iter()
        .filter(|c| c.wrote && c.ended > start && c.ended <= end);
    writes.fold((Duration::ZERO, None), |(spent, last), c| {
        (
            spent + c.ended.saturating_duration_since(c.started.max(start)),
            Some(last.map_or(c.ended, |l: Instant| l.max(c.ended))),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: Instant, from_us: u64, to_us: u64, wrote: bool) -> Call {
        Call {
            started: start + Duration::from_micros(from_us),
            ended: start + Duration::from_micros(to_us),
            name: "put_part",
            wrote,
        }
    }

    #[test]
    fn a_windows_write_time_counts_its_writes_only_from_its_start() {
        let t = Instant::now();
        let w = |us| t + Duration::from_micros(us);
        let calls = [
            // Began before the window: counted from the window's start.
            call(t, 0, 30, true),
            // A read inside: not a write.
            call(t, 40, 50, false),
            call(t, 60, 100, true),
            // Ended after the window: not in it.
            call(t, 110, 200, true),
        ];
        let (spent, last) = write_time(&calls, w(10), w(150));
        assert_eq!(spent, Duration::from_micros(20 + 40));
        assert_eq!(last, Some(w(100)));
        assert_eq!(
            within(&calls, w(10), w(150)),
            (vec!["put_part", "put_part"], 1)
        );
    }

    #[test]
    fn a_window_without_writes_spent_nothing_on_them() {
        let t = Instant::now();
        let calls = [call(t, 0, 5, false)];
        let (spent, last) = write_time(&calls, t, t + Duration::from_micros(10));
        assert_eq!((spent, last), (Duration::ZERO, None));
    }
}
