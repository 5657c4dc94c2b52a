//! What each session published since its prompt was accepted, for a
//! client that subscribes late.
//!
//! A client such as `opencode run --attach` opens its event stream and
//! sends its prompt at the same moment, on two connections; a model that
//! answers within milliseconds has the whole session over before the
//! stream is registered. So the bus keeps, per session, the events since
//! its prompt was accepted ([`Recent::begin`]) and hands them to every new
//! subscriber together with its live channel, under one lock with
//! publishing, so each event reaches a subscriber exactly once: in the
//! snapshot, or live.
//!
//! Bounded: a part or message updated many times (text streaming) is kept
//! once, as its latest version; a session keeps at most [`MAX_EVENTS`]
//! (past that the oldest go, counted, and a late subscriber is told it
//! missed them); at most [`MAX_SESSIONS`] sessions are kept, and a
//! session's log is dropped [`RETAIN`] after it went idle.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_protocol::{Event, SessionId, SessionStatus};

/// The most events one session's log keeps (after coalescing).
pub const MAX_EVENTS: usize = 2048;
/// The most sessions with a log.
pub const MAX_SESSIONS: usize = 64;
/// How long a log is kept after its session went idle.
pub const RETAIN: Duration = Duration::from_secs(60);

/// One session's events for a late subscriber.
#[derive(Debug, Clone)]
pub struct Replay {
    pub session: SessionId,
    /// Events of the session that were dropped from the front of its log.
    pub dropped: usize,
    /// In publishing order, each with its relay number when it has one.
    /// A coalesced part update carries the whole part; its `delta` is only
    /// the last one, so a reader must take the part, not the delta.
    pub events: Vec<(Option<i64>, Arc<Event>)>,
}

/// What an entry replaces: its later version makes it obsolete.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Part(String),
    Message(String),
}

fn key(event: &Event) -> Option<Key> {
    match event {
        Event::PartUpdated { part, .. } => Some(Key::Part(part.id.to_string())),
        Event::MessageUpdated { info } => Some(Key::Message(info.id().to_string())),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Log {
    /// By order of arrival.
    entries: BTreeMap<u64, (Option<i64>, Arc<Event>)>,
    /// Where each coalesced entry is.
    latest: HashMap<Key, u64>,
    next: u64,
    dropped: usize,
    /// When the session went idle, if it did since it began.
    idle_since: Option<Instant>,
    begun: Option<Instant>,
}

impl Log {
    fn push(&mut self, seq: Option<i64>, event: &Arc<Event>) {
        let at = self.next;
        self.next += 1;
        if let Some(k) = key(event)
            && let Some(old) = self.latest.insert(k, at)
        {
            self.entries.remove(&old);
        }
        self.entries.insert(at, (seq, event.clone()));
        while self.entries.len() > MAX_EVENTS {
            if let Some((_, (_, gone))) = self.entries.pop_first() {
                if let Some(k) = key(&gone) {
                    self.latest.remove(&k);
                }
                self.dropped += 1;
            }
        }
        if let Event::SessionStatus { status, .. } = event.as_ref() {
            self.idle_since = match status {
                SessionStatus::Idle => Some(Instant::now()),
                _ => None,
            };
        }
    }

    fn expired(&self, now: Instant) -> bool {
        self.idle_since
            .is_some_and(|t| now.saturating_duration_since(t) > RETAIN)
    }
}

/// Every session's log.
#[derive(Debug, Default)]
pub struct Recent {
    logs: HashMap<SessionId, Log>,
}

impl Recent {
    /// A prompt of `session` was accepted (or its run began): keep its
    /// events from now on. A log of an earlier prompt that has ended is
    /// started afresh; one still running goes on (queued prompts).
    pub fn begin(&mut self, session: &SessionId) {
        let now = Instant::now();
        self.logs.retain(|_, log| !log.expired(now));
        if let Some(log) = self.logs.get_mut(session) {
            if log.idle_since.is_some() {
                *log = Log::default();
                log.begun = Some(now);
            }
            return;
        }
        if self.logs.len() >= MAX_SESSIONS {
            // The one idle longest, else the one begun first.
            let oldest = self
                .logs
                .iter()
                .min_by_key(|(_, l)| (l.idle_since.is_none(), l.idle_since.or(l.begun)))
                .map(|(s, _)| s.clone());
            if let Some(s) = oldest {
                self.logs.remove(&s);
            }
        }
        self.logs.insert(
            session.clone(),
            Log {
                begun: Some(now),
                ..Log::default()
            },
        );
    }

    /// An event was published: kept if its session has a log.
    pub fn push(&mut self, seq: Option<i64>, event: &Arc<Event>) {
        if let Some(log) = self.logs.get_mut(event.session_id()) {
            log.push(seq, event);
        }
    }

    /// The logs a new subscriber gets: one session's, or every one's.
    pub fn snapshot(&self, only: Option<&SessionId>) -> Vec<Replay> {
        let now = Instant::now();
        let mut out: Vec<(Option<Instant>, Replay)> = self
            .logs
            .iter()
            .filter(|(s, log)| only.is_none_or(|o| o == *s) && !log.expired(now))
            .map(|(s, log)| {
                (
                    log.begun,
                    Replay {
                        session: s.clone(),
                        dropped: log.dropped,
                        events: log.entries.values().cloned().collect(),
                    },
                )
            })
            .collect();
        out.sort_by_key(|(begun, _)| *begun);
        out.into_iter().map(|(_, r)| r).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::{MessageId, Part, PartBody};

    fn sid(s: &str) -> SessionId {
        SessionId(s.into())
    }

    fn text(session: &str, part: &str, text: &str) -> Arc<Event> {
        Arc::new(Event::PartUpdated {
            part: Part {
                id: part.to_string().into(),
                session_id: sid(session),
                message_id: MessageId("msg_1".into()),
                body: PartBody::Text {
                    text: text.into(),
                    synthetic: false,
                    time: None,
                    ignored: false,
                },
            },
            delta: Some(text.chars().last().unwrap().to_string()),
        })
    }

    fn status(session: &str, status: SessionStatus) -> Arc<Event> {
        Arc::new(Event::SessionStatus {
            session_id: sid(session),
            status,
        })
    }

    fn texts(r: &Replay) -> Vec<String> {
        r.events
            .iter()
            .map(|(_, e)| match e.as_ref() {
                Event::PartUpdated { part, .. } => match &part.body {
                    PartBody::Text { text, .. } => format!("{}={text}", part.id),
                    _ => String::new(),
                },
                Event::SessionStatus { status, .. } => format!("status={status:?}"),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn a_session_is_kept_from_its_prompt_each_part_at_its_latest() {
        let mut r = Recent::default();
        r.push(None, &text("a", "p0", "before")); // no prompt yet: not kept
        r.begin(&sid("a"));
        r.push(None, &status("a", SessionStatus::Busy));
        for t in ["H", "He", "Hel"] {
            r.push(None, &text("a", "p1", t));
        }
        r.push(None, &text("b", "q1", "other")); // not prompted
        r.push(None, &text("a", "p2", "x"));
        r.push(None, &text("a", "p1", "Hello"));
        r.push(None, &status("a", SessionStatus::Idle));
        let all = r.snapshot(None);
        assert_eq!(all.len(), 1);
        assert_eq!(
            texts(&all[0]),
            ["status=Busy", "p2=x", "p1=Hello", "status=Idle"]
        );
        assert!(r.snapshot(Some(&sid("b"))).is_empty());
        // The next prompt starts afresh: the earlier one had ended.
        r.begin(&sid("a"));
        assert!(r.snapshot(None)[0].events.is_empty());
    }

    #[test]
    fn a_log_is_bounded_and_counts_what_it_dropped() {
        let mut r = Recent::default();
        r.begin(&sid("a"));
        for i in 0..MAX_EVENTS + 10 {
            r.push(None, &text("a", &format!("p{i}"), "t"));
        }
        let snap = r.snapshot(None);
        assert_eq!(snap[0].events.len(), MAX_EVENTS);
        assert_eq!(snap[0].dropped, 10);
        for i in 0..MAX_SESSIONS + 5 {
            r.begin(&sid(&format!("s{i}")));
        }
        assert_eq!(r.logs.len(), MAX_SESSIONS);
    }
}
