//! An answer goes out after its session's events have gone out.
//!
//! `POST /session/{id}/message` answers when the session's run ends. A
//! client that prints the run from its event stream and exits on the
//! answer (`opencode run --attach` does) would lose whatever its stream
//! had not yet sent: the stream serialises and filters each event after it
//! was published. So before answering, the handler *flushes* the event
//! streams that watch the session ([`Deliveries::flush`]): each one is
//! asked, on a channel of its own, to acknowledge once it has handed every
//! event published before the request to the connection, and the answer
//! waits for those acknowledgements. Nothing is polled and no time is
//! waited out when the streams keep up.
//!
//! **A stream that is behind is never waited for.** Each stream notes when
//! it handed its connection a message and has not been asked for the next
//! since: a connection that does not ask within [`BEHIND`] cannot write (its
//! client does not read), and a flush skips that stream; it sends the
//! session's events in order when its client reads again, or falls more
//! than the bus keeps behind and is told it lagged. A stream that was
//! keeping up when asked holds an answer at most [`WAIT`], once: then it is
//! not asked again for [`SKIP_AFTER_STALL`].
//!
//! **Then the answer leaves [`SETTLE`] after the last message** an
//! acknowledging stream sent (at once if that was longer ago).
//! An acknowledgement says the events were handed to their connection,
//! not that the client has read them: the client reads the answer and the
//! events on two connections, and one that exits on the answer (as
//! `opencode run --attach` does, with `process.exit()`) loses events
//! that reached it in the same moment but that it had not parsed yet.
//! Under load that happened about once in twenty runs; with the events
//! [`SETTLE`] ahead it did not happen in fifty. Only an answer whose
//! session a stream watches, and that stream sent something in the last
//! [`SETTLE`], pays it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use warden_protocol::SessionId;

/// A connection that has not asked for its stream's next message for this
/// long is behind: its answers do not wait for it.
pub const BEHIND: Duration = Duration::from_millis(20);
/// The longest an answer waits for the streams it asked.
pub const WAIT: Duration = Duration::from_millis(200);
/// A stream that did not acknowledge within [`WAIT`] is not asked again for this long.
pub const SKIP_AFTER_STALL: Duration = Duration::from_secs(10);
/// How far ahead of an answer the events it follows leave, so that a
/// client reading both has read the events first.
pub const SETTLE: Duration = Duration::from_millis(30);
/// Flush requests a stream may have waiting; past that it is not asked.
const PENDING_FLUSHES: usize = 8;

/// Milliseconds since the first call in this process, never 0.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// What a flush reads of a stream, and the stream writes.
#[derive(Default)]
struct Progress {
    /// When the stream handed its connection a message not yet followed by
    /// a request for the next; 0 while the connection is asking.
    handed_at: AtomicU64,
    /// Until when flushes skip the stream (it held one to [`WAIT`]).
    skip_until: AtomicU64,
    /// When the stream last handed its connection a message.
    sent_at: AtomicU64,
}

impl Progress {
    fn behind(&self, now: u64) -> bool {
        let handed = self.handed_at.load(Ordering::Acquire);
        (handed != 0 && now.saturating_sub(handed) >= BEHIND.as_millis() as u64)
            || now < self.skip_until.load(Ordering::Relaxed)
    }
}

/// A stream's side: the flush requests it acknowledges.
pub(crate) struct Flushes {
    pub rx: mpsc::Receiver<oneshot::Sender<()>>,
    progress: Arc<Progress>,
    _registration: Registration,
}

impl Flushes {
    /// The connection asks for the next message: it took the last one.
    pub fn asked(&self) {
        self.progress.handed_at.store(0, Ordering::Release);
    }

    /// A message goes to the connection.
    pub fn handed(&self) {
        let now = now_ms();
        self.progress.handed_at.store(now, Ordering::Release);
        self.progress.sent_at.store(now, Ordering::Release);
    }
}

struct Entry {
    /// The session the stream watches, or all of them.
    filter: Option<SessionId>,
    tx: mpsc::Sender<oneshot::Sender<()>>,
    progress: Arc<Progress>,
}

/// Every open event stream of this server.
#[derive(Default)]
pub(crate) struct Deliveries {
    streams: Arc<Mutex<HashMap<u64, Entry>>>,
    next: AtomicU64,
}

/// Takes the stream off the list when it ends.
struct Registration {
    id: u64,
    streams: Arc<Mutex<HashMap<u64, Entry>>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Deliveries {
    /// A new stream watching `filter` (or every session).
    pub fn register(&self, filter: Option<SessionId>) -> Flushes {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(PENDING_FLUSHES);
        let progress = Arc::new(Progress::default());
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                Entry {
                    filter,
                    tx,
                    progress: progress.clone(),
                },
            );
        Flushes {
            rx,
            progress,
            _registration: Registration {
                id,
                streams: self.streams.clone(),
            },
        }
    }

    /// Wait until every stream watching `session` that keeps up has sent
    /// what was published before this call; streams that are behind are
    /// not asked, and none is waited for longer than [`WAIT`].
    pub async fn flush(&self, session: &SessionId) {
        let now = now_ms();
        let waits: Vec<(oneshot::Receiver<()>, Arc<Progress>)> = {
            let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams
                .values()
                .filter(|e| e.filter.as_ref().is_none_or(|f| f == session))
                .filter(|e| !e.progress.behind(now))
                .filter_map(|e| {
                    let (done, wait) = oneshot::channel();
                    e.tx.try_send(done).ok().map(|_| (wait, e.progress.clone()))
                })
                .collect()
        };
        if waits.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        // When the last of the acknowledging streams sent its last message.
        let mut sent: Option<u64> = None;
        for (wait, progress) in waits {
            match tokio::time::timeout_at(deadline, wait).await {
                Ok(Ok(())) => {
                    let at = progress.sent_at.load(Ordering::Acquire);
                    sent = Some(sent.map_or(at, |s| s.max(at)));
                }
                // The stream ended meanwhile and dropped its request.
                Ok(Err(_)) => {}
                Err(_) => progress.skip_until.store(
                    now_ms() + SKIP_AFTER_STALL.as_millis() as u64,
                    Ordering::Relaxed,
                ),
            }
        }
        // The answer leaves SETTLE after that message; a stream that sent
        // nothing lately (its client read it long ago) costs nothing.
        if let Some(at) = sent.filter(|at| *at > 0) {
            let ready = at + SETTLE.as_millis() as u64;
            let now = now_ms();
            if ready > now {
                tokio::time::sleep(Duration::from_millis(ready - now)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId(s.into())
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_leaves_settle_after_the_events_a_stream_sent() {
        let d = Deliveries::default();
        let mut watching = d.register(Some(sid("a")));
        let answering = tokio::spawn(async move {
            let done = watching.rx.recv().await.unwrap();
            // It sends the session's last events, then acknowledges.
            watching.handed();
            watching.asked();
            done.send(()).unwrap();
            watching
        });
        let started = tokio::time::Instant::now();
        d.flush(&sid("a")).await;
        // (Paused time moves only when waited on: all of the wait is SETTLE.)
        let waited = started.elapsed();
        assert!(
            waited <= SETTLE && waited + Duration::from_millis(5) >= SETTLE,
            "{waited:?}"
        );
        let watching = answering.await.unwrap();
        // A session no stream watches is answered at once.
        let again = tokio::time::Instant::now();
        d.flush(&sid("b")).await;
        assert_eq!(again.elapsed(), Duration::ZERO);
        // Nor does a stream that ended before it acknowledged hold one.
        let (tx, mut rx) = mpsc::channel(1);
        drop(watching);
        let ending = d.register(Some(sid("c")));
        let ended = tokio::spawn(async move {
            let mut ending = ending;
            let request = ending.rx.recv().await.unwrap();
            drop(request);
            tx.send(()).await.unwrap();
        });
        let third = tokio::time::Instant::now();
        d.flush(&sid("c")).await;
        rx.recv().await.unwrap();
        ended.await.unwrap();
        assert_eq!(third.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_flush_waits_for_the_streams_of_its_session_only() {
        let d = Deliveries::default();
        let mut all = d.register(None);
        let _other = d.register(Some(sid("b"))); // never answers: not asked
        let answering = tokio::spawn(async move {
            let done = all.rx.recv().await.unwrap();
            done.send(()).unwrap();
            all
        });
        d.flush(&sid("a")).await;
        let all = answering.await.unwrap();
        assert!(!all.progress.behind(now_ms()));
    }

    #[tokio::test]
    async fn a_stream_whose_connection_does_not_ask_is_not_waited_for() {
        let d = Deliveries::default();
        let stuck = d.register(Some(sid("a")));
        stuck.handed();
        // Its connection does not ask for the next message for BEHIND.
        std::thread::sleep(BEHIND + Duration::from_millis(5));
        let started = std::time::Instant::now();
        d.flush(&sid("a")).await;
        assert!(started.elapsed() < WAIT, "a stream behind is not asked");
        assert!(stuck.rx.is_empty(), "nor sent a request");
        // Its connection asks again: it keeps up, and is asked.
        stuck.asked();
        assert!(!stuck.progress.behind(now_ms()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_does_not_answer_holds_one_flush_then_none_for_a_while() {
        let d = Deliveries::default();
        let stuck = d.register(Some(sid("a")));
        let started = tokio::time::Instant::now();
        d.flush(&sid("a")).await;
        assert_eq!(started.elapsed(), WAIT);
        assert!(stuck.progress.behind(now_ms()), "skipped for a while");
        let again = tokio::time::Instant::now();
        d.flush(&sid("a")).await;
        assert_eq!(
            again.elapsed(),
            Duration::ZERO,
            "a stalled stream is not waited for"
        );
        drop(stuck);
        d.flush(&sid("a")).await; // gone: nothing to wait for
    }
}
