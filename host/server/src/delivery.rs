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
//! A stream whose client stopped reading never acknowledges. It holds an
//! answer at most [`STALL`] once: then it is marked stalled and no answer
//! waits for it again until its connection takes a message (its client
//! reads on).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use warden_protocol::SessionId;

/// How long an answer waits for a stream that does not acknowledge.
pub const STALL: Duration = Duration::from_secs(2);

/// A stream's side: the flush requests it acknowledges.
pub(crate) struct Flushes {
    pub rx: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    stalled: Arc<AtomicBool>,
    _registration: Registration,
}

impl Flushes {
    /// The stream's connection took a message: its client reads, so
    /// answers wait for it again.
    pub fn acknowledged(&self) {
        self.stalled.store(false, Ordering::Relaxed);
    }
}

struct Entry {
    /// The session the stream watches, or all of them.
    filter: Option<SessionId>,
    tx: mpsc::UnboundedSender<oneshot::Sender<()>>,
    stalled: Arc<AtomicBool>,
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
        let (tx, rx) = mpsc::unbounded_channel();
        let stalled = Arc::new(AtomicBool::new(false));
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                Entry {
                    filter,
                    tx,
                    stalled: stalled.clone(),
                },
            );
        Flushes {
            rx,
            stalled,
            _registration: Registration {
                id,
                streams: self.streams.clone(),
            },
        }
    }

    /// Wait until every stream watching `session` has sent what was
    /// published before this call (streams marked stalled excepted; one
    /// that does not answer within [`STALL`] is marked so).
    pub async fn flush(&self, session: &SessionId) {
        let waits: Vec<(oneshot::Receiver<()>, Arc<AtomicBool>)> = {
            let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams
                .values()
                .filter(|e| e.filter.as_ref().is_none_or(|f| f == session))
                .filter(|e| !e.stalled.load(Ordering::Relaxed))
                .filter_map(|e| {
                    let (done, wait) = oneshot::channel();
                    e.tx.send(done).ok().map(|_| (wait, e.stalled.clone()))
                })
                .collect()
        };
        if waits.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + STALL;
        for (wait, stalled) in waits {
            // A stream that ended meanwhile drops its request: done.
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                stalled.store(true, Ordering::Relaxed);
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
        assert!(!all.stalled.load(Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_does_not_answer_holds_one_flush_then_none() {
        let d = Deliveries::default();
        let stuck = d.register(Some(sid("a")));
        let started = tokio::time::Instant::now();
        d.flush(&sid("a")).await;
        assert_eq!(started.elapsed(), STALL);
        assert!(stuck.stalled.load(Ordering::Relaxed));
        let again = tokio::time::Instant::now();
        d.flush(&sid("a")).await;
        assert_eq!(
            again.elapsed(),
            Duration::ZERO,
            "a stalled stream is not waited for"
        );
        stuck.acknowledged();
        assert!(!stuck.stalled.load(Ordering::Relaxed));
        drop(stuck);
        d.flush(&sid("a")).await; // gone: nothing to wait for
    }
}
