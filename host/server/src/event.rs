//! The live event streams, as Server-Sent Events in OpenCode's envelope
//! `{"id", "type", "properties"}`:
//!
//! - `GET /event` sends the envelopes themselves (optionally for one
//!   session, `?session=ID`, warden's addition);
//! - `GET /global/event` wraps each as `{"directory", "payload"}`, the
//!   directory being the session's, as the TUI reads them.
//!
//! The first event is `server.connected`; a session's `session.status` idle
//! is followed by `session.idle`, as OpenCode sends. The bus never waits for
//! a client: one that falls more than its buffer behind is sent
//! `server.lagged` with how many events it missed (of its session, when it
//! watches one; the REST endpoints have
//! the current state). A connected client counts as someone who can answer
//! permission asks.
//!
//! **On a ledger shared by hosts** (PostgreSQL; the bus has a relay) a
//! stream reads every host's events in the relay's order, each SSE message
//! carrying its relay number as its SSE `id` (a `session.idle` shares its
//! status's). A client that reconnects with `Last-Event-ID: N` first gets
//! the events past N from the relay's outbox, then the live ones, none
//! twice: that works as far back as the outbox keeps (the newest 100 000
//! events of all hosts); from further back it is sent `server.lagged`
//! first. A stream that falls behind reads the missed events from the
//! outbox too, instead of being told it lagged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;
use warden_core::bus::Numbered;
use warden_protocol::{Envelope, Event, SessionId, SessionStatus, next_event_id};

use crate::AppState;
use crate::routes::ApiQuery;

/// Which events to stream.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Only this session's events (warden's addition).
    pub session: Option<String>,
}

/// How a stream wraps each envelope.
#[derive(Clone, Copy, PartialEq)]
enum Wrap {
    /// The envelope as it is (`/event`).
    Bare,
    /// `{"directory", "payload"}` (`/global/event`).
    Global,
}

/// The event stream. Each SSE message's data is one envelope.
#[utoipa::path(get, path = "/event", tag = "event", params(EventQuery, crate::routes::Location),
    responses((status = 200, description = "text/event-stream; each message's data is an event envelope", content_type = "text/event-stream", body = Envelope),
        (status = 404, description = "no such session", body = crate::error::ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, crate::error::ApiError> {
    let session = q.session.map(SessionId);
    if let Some(id) = &session {
        // Like every other route: an unknown session (or one outside the
        // server's directory) is a 404, not a silent stream.
        state.session(id).await?;
    }
    Ok(stream(state, session, Wrap::Bare, last_event_id(&headers)).await)
}

/// The relay number a reconnecting client last saw (`Last-Event-ID`), when
/// it is one.
fn last_event_id(headers: &HeaderMap) -> Option<i64> {
    headers
        .get("last-event-id")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 0)
}

/// Every event of every session, each wrapped with its session's directory.
#[utoipa::path(get, path = "/global/event", tag = "event",
    responses((status = 200, description = "text/event-stream; each message's data is {\"directory\", \"payload\": envelope}", content_type = "text/event-stream", body = Object)))]
pub async fn global_events(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    stream(state, None, Wrap::Global, last_event_id(&headers)).await
}

/// Where a stream's events come from.
enum Source {
    /// This process's bus (a ledger of one machine).
    Local(tokio::sync::broadcast::Receiver<std::sync::Arc<Event>>),
    /// Every host's events in the relay's order; `last` is the number of
    /// the last one sent.
    Numbered {
        rx: tokio::sync::broadcast::Receiver<std::sync::Arc<Numbered>>,
        last: i64,
    },
}

struct Watch {
    rx: Source,
    _attached: warden_core::permission::AttachGuard,
    filter: Option<SessionId>,
    wrap: Wrap,
    state: AppState,
    /// Each session's directory, looked up once; `None` for a session this
    /// server does not serve (outside its directory), whose events it
    /// does not pass on.
    dirs: HashMap<SessionId, Option<String>>,
    /// Messages ready to go before the next bus event.
    queued: std::collections::VecDeque<SseEvent>,
    /// Events published before the stream began, of sessions prompted
    /// since (see `warden_core::bus`): sent first, one at a time.
    late: std::collections::VecDeque<(Option<i64>, Arc<Event>)>,
    /// Answers waiting for this stream to send what was published before
    /// they asked (see `delivery.rs`), and where their requests come.
    flushes: crate::delivery::Flushes,
    acks: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Watch {
    async fn directory(&mut self, session: &SessionId) -> Option<String> {
        if let Some(d) = self.dirs.get(session) {
            return d.clone();
        }
        let info = self.state.core.ledger().session(session).await.ok()?;
        self.learn(&info);
        self.dirs.get(session).cloned().flatten()
    }

    /// Note a session's directory, and whether this server serves it.
    fn learn(&mut self, info: &warden_protocol::SessionInfo) {
        let served = self.state.serves(info).then(|| info.directory.clone());
        self.dirs.insert(info.id.clone(), served);
    }

    /// Whether this server serves the session an event is about. A session
    /// that is gone (deleted) counts as served when it was before.
    async fn served(&mut self, event: &Event) -> bool {
        if let Event::SessionCreated { session } | Event::SessionUpdated { session } = event {
            self.learn(session);
        }
        let id = event.session_id();
        match self.dirs.get(id) {
            Some(d) => d.is_some(),
            None => self.directory(id).await.is_some(),
        }
    }

    async fn message(&mut self, envelope: Envelope, session: Option<&SessionId>) -> SseEvent {
        self.message_numbered(envelope, session, None).await
    }

    async fn message_numbered(
        &mut self,
        envelope: Envelope,
        session: Option<&SessionId>,
        seq: Option<i64>,
    ) -> SseEvent {
        let data = match self.wrap {
            Wrap::Bare => serde_json::to_value(&envelope).unwrap_or(Value::Null),
            Wrap::Global => {
                let mut v = json!({"payload": envelope});
                let directory = match session {
                    Some(s) => self.directory(s).await,
                    None => None,
                };
                if let Some(d) = directory {
                    v["directory"] = json!(d);
                }
                v
            }
        };
        let message = SseEvent::default().data(data.to_string());
        match seq {
            Some(n) => message.id(n.to_string()),
            None => message,
        }
    }

    /// Queue one event (and the `session.idle` after an idle status).
    async fn queue(&mut self, event: &Event, seq: Option<i64>) {
        let session = event.session_id().clone();
        if self.filter.as_ref().is_some_and(|s| &session != s) || !self.served(event).await {
            return;
        }
        let m = self
            .message_numbered(event.envelope(next_event_id()), Some(&session), seq)
            .await;
        self.queued.push_back(m);
        if let Event::SessionStatus {
            status: SessionStatus::Idle,
            ..
        } = event
        {
            let idle = Envelope::new(
                next_event_id(),
                "session.idle",
                json!({"sessionID": session}),
            );
            let m = self.message_numbered(idle, Some(&session), seq).await;
            self.queued.push_back(m);
        }
    }

    /// Queue the events past `after` from the relay's outbox (a client that
    /// resumes, or a stream that fell behind); the number of the last one.
    /// From further back than the outbox keeps, `server.lagged` first.
    async fn replay(&mut self, mut after: i64) -> i64 {
        let mut first = true;
        loop {
            let ledger = self.state.core.ledger().clone();
            let page = match ledger.replay(after, self.filter.as_ref()).await {
                Ok(Some(page)) => page,
                Ok(None) => return after,
                Err(e) => {
                    tracing::warn!("cannot read the relayed events past {after}: {e}");
                    return after;
                }
            };
            if first && page.oldest > after + 1 {
                let mut properties = json!({"missed": page.oldest - after - 1, "pruned": true});
                if let Some(s) = &self.filter {
                    properties["sessionID"] = json!(s);
                }
                let lagged = Envelope::new(next_event_id(), "server.lagged", properties);
                let m = self.message(lagged, None).await;
                self.queued.push_back(m);
            }
            first = false;
            for (seq, event) in &page.events {
                self.queue(event, Some(*seq)).await;
                after = *seq;
            }
            if !page.more {
                return after;
            }
        }
    }
}

/// What a stream waits for.
enum Next {
    Local(Result<Arc<Event>, RecvError>),
    Numbered(Result<Arc<Numbered>, RecvError>),
    /// An answer waits for what was published before it to go out.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Watch {
    /// One event of this process's bus; `false` when the bus is gone.
    async fn take_local(&mut self, received: Result<Arc<Event>, RecvError>) -> bool {
        match received {
            Ok(event) => self.queue(&event, None).await,
            Err(RecvError::Lagged(missed)) => {
                let mut properties = json!({"missed": missed});
                if let Some(s) = &self.filter {
                    properties["sessionID"] = json!(s);
                }
                let lagged = Envelope::new(next_event_id(), "server.lagged", properties);
                let m = self.message(lagged, None).await;
                self.queued.push_back(m);
            }
            Err(RecvError::Closed) => return false,
        }
        true
    }

    /// One numbered event of the relay; `false` when the bus is gone.
    async fn take_numbered(&mut self, received: Result<Arc<Numbered>, RecvError>) -> bool {
        let Source::Numbered { last, .. } = &mut self.rx else {
            return true;
        };
        match received {
            Ok(numbered) => {
                // Sent already (replayed, or read from the outbox on resuming).
                if numbered.seq > *last {
                    *last = numbered.seq;
                    self.queue(&numbered.event, Some(numbered.seq)).await;
                }
            }
            Err(RecvError::Lagged(_)) => {
                // Fell behind: read what was missed from the outbox.
                let after = *last;
                let read = self.replay(after).await;
                if let Source::Numbered { last, .. } = &mut self.rx {
                    *last = read;
                }
            }
            Err(RecvError::Closed) => return false,
        }
        true
    }

    /// Queue every event already in the channel. (On a shared ledger this
    /// host's own events come back through the relay: those not back yet
    /// follow the answer.)
    async fn drain(&mut self) {
        use tokio::sync::broadcast::error::TryRecvError;
        loop {
            let open = match &mut self.rx {
                Source::Local(rx) => match rx.try_recv() {
                    Ok(e) => self.take_local(Ok(e)).await,
                    Err(TryRecvError::Lagged(n)) => {
                        self.take_local(Err(RecvError::Lagged(n))).await
                    }
                    Err(TryRecvError::Empty | TryRecvError::Closed) => return,
                },
                Source::Numbered { rx, .. } => match rx.try_recv() {
                    Ok(e) => self.take_numbered(Ok(e)).await,
                    Err(TryRecvError::Lagged(n)) => {
                        self.take_numbered(Err(RecvError::Lagged(n))).await
                    }
                    Err(TryRecvError::Empty | TryRecvError::Closed) => return,
                },
            };
            if !open {
                return;
            }
        }
    }
}

async fn stream(
    state: AppState,
    filter: Option<SessionId>,
    wrap: Wrap,
    resume_after: Option<i64>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let bus = state.core.bus();
    // A client watching one session gets that session's channel, so a lag
    // it is told about counts its own session's events. On a shared
    // ledger it reads the numbered events of every host instead.
    // A client that subscribes just after it prompted (as `opencode run
    // --attach` does) gets what its session published before it came,
    // exactly once; one that resumes by number reads the outbox instead.
    let (rx, late) = if bus.is_relayed() {
        let (rx, late) = bus.subscribe_numbered_late(filter.as_ref());
        let late = if resume_after.is_some() {
            Vec::new()
        } else {
            late
        };
        let last = late
            .iter()
            .flat_map(|r| r.events.iter().filter_map(|(seq, _)| *seq))
            .max()
            .unwrap_or(0);
        (Source::Numbered { rx, last }, late)
    } else {
        let (rx, late) = bus.subscribe_late(filter.as_ref());
        (Source::Local(rx), late)
    };
    // A client watching one session answers that session's questions only.
    let attached = match &filter {
        Some(session) => state.core.permissions().attach_to(session),
        None => state.core.permissions().attach(),
    };
    let state_deliveries = state.deliveries.register(filter.clone());
    let mut watch = Watch {
        rx,
        _attached: attached,
        filter,
        wrap,
        state,
        dirs: HashMap::new(),
        queued: Default::default(),
        late: Default::default(),
        flushes: state_deliveries,
        acks: Vec::new(),
    };
    let hello = watch
        .message(
            Envelope::new(next_event_id(), "server.connected", json!({})),
            None,
        )
        .await;
    watch.queued.push_back(hello);
    for replay in late {
        if replay.dropped > 0 && watch.directory(&replay.session).await.is_some() {
            let lagged = Envelope::new(
                next_event_id(),
                "server.lagged",
                json!({"missed": replay.dropped, "sessionID": replay.session}),
            );
            let m = watch.message(lagged, None).await;
            watch.queued.push_back(m);
        }
        watch.late.extend(replay.events);
    }
    // Subscribed first, then the missed ones read: none falls between.
    if let (Some(after), Source::Numbered { .. }) = (resume_after, &watch.rx) {
        let last = watch.replay(after).await;
        if let Source::Numbered { last: l, .. } = &mut watch.rx {
            *l = last;
        }
    }
    let events = futures::stream::unfold(watch, |mut w| async move {
        // Asked for the next message: the connection took the last one.
        w.flushes.asked();
        loop {
            if let Some(m) = w.queued.pop_front() {
                w.flushes.handed();
                return Some((Ok(m), w));
            }
            // Polled again with nothing queued: everything yielded so far
            // was taken by the connection. Answers waiting for that go.
            if w.late.is_empty() && !w.acks.is_empty() {
                for done in w.acks.drain(..) {
                    let _ = done.send(());
                }
            }
            if let Some((seq, event)) = w.late.pop_front() {
                // A replayed part is its latest version: its delta is not
                // what the client has yet, so only the part is sent.
                let event = match event.as_ref() {
                    Event::PartUpdated {
                        part,
                        delta: Some(_),
                    } => Arc::new(Event::PartUpdated {
                        part: part.clone(),
                        delta: None,
                    }),
                    _ => event,
                };
                w.queue(&event, seq).await;
                continue;
            }
            let next = match &mut w.rx {
                Source::Local(rx) => tokio::select! {
                    biased;
                    r = rx.recv() => Next::Local(r),
                    Some(done) = w.flushes.rx.recv() => Next::Flush(done),
                },
                Source::Numbered { rx, .. } => tokio::select! {
                    biased;
                    r = rx.recv() => Next::Numbered(r),
                    Some(done) = w.flushes.rx.recv() => Next::Flush(done),
                },
            };
            match next {
                Next::Flush(done) => {
                    // Everything published before the request is in the
                    // channel: take it all now, and acknowledge once it
                    // has been sent.
                    w.drain().await;
                    w.acks.push(done);
                }
                Next::Local(received) => {
                    if !w.take_local(received).await {
                        return None;
                    }
                }
                Next::Numbered(received) => {
                    if !w.take_numbered(received).await {
                        return None;
                    }
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
