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

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;
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
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, crate::error::ApiError> {
    let session = q.session.map(SessionId);
    if let Some(id) = &session {
        // Like every other route: an unknown session is a 404, not a silent stream.
        state.core.ledger().session(id).await?;
    }
    Ok(stream(state, session, Wrap::Bare).await)
}

/// Every event of every session, each wrapped with its session's directory.
#[utoipa::path(get, path = "/global/event", tag = "event",
    responses((status = 200, description = "text/event-stream; each message's data is {\"directory\", \"payload\": envelope}", content_type = "text/event-stream", body = Object)))]
pub async fn global_events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    stream(state, None, Wrap::Global).await
}

struct Watch {
    rx: tokio::sync::broadcast::Receiver<std::sync::Arc<Event>>,
    _attached: warden_core::permission::AttachGuard,
    filter: Option<SessionId>,
    wrap: Wrap,
    state: AppState,
    /// Each session's directory, looked up once.
    dirs: HashMap<SessionId, String>,
    /// Messages ready to go before the next bus event.
    queued: std::collections::VecDeque<SseEvent>,
}

impl Watch {
    async fn directory(&mut self, session: &SessionId) -> Option<String> {
        if let Some(d) = self.dirs.get(session) {
            return Some(d.clone());
        }
        let d = self
            .state
            .core
            .ledger()
            .session(session)
            .await
            .ok()?
            .directory;
        self.dirs.insert(session.clone(), d.clone());
        Some(d)
    }

    async fn message(&mut self, envelope: Envelope, session: Option<&SessionId>) -> SseEvent {
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
        SseEvent::default().data(data.to_string())
    }
}

async fn stream(
    state: AppState,
    filter: Option<SessionId>,
    wrap: Wrap,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    // A client watching one session gets that session's channel, so a lag
    // it is told about counts its own session's events.
    let rx = match &filter {
        Some(session) => state.core.bus().subscribe_session(session),
        None => state.core.bus().subscribe(),
    };
    // A client watching one session answers that session's questions only.
    let attached = match &filter {
        Some(session) => state.core.permissions().attach_to(session),
        None => state.core.permissions().attach(),
    };
    let mut watch = Watch {
        rx,
        _attached: attached,
        filter,
        wrap,
        state,
        dirs: HashMap::new(),
        queued: Default::default(),
    };
    let hello = watch
        .message(
            Envelope::new(next_event_id(), "server.connected", json!({})),
            None,
        )
        .await;
    watch.queued.push_back(hello);
    let events = futures::stream::unfold(watch, |mut w| async move {
        loop {
            if let Some(m) = w.queued.pop_front() {
                return Some((Ok(m), w));
            }
            match w.rx.recv().await {
                Ok(event) => {
                    let session = event.session_id().clone();
                    if w.filter.as_ref().is_some_and(|s| &session != s) {
                        continue;
                    }
                    let m = w
                        .message(event.envelope(next_event_id()), Some(&session))
                        .await;
                    w.queued.push_back(m);
                    if let Event::SessionStatus {
                        status: SessionStatus::Idle,
                        ..
                    } = &*event
                    {
                        let idle = Envelope::new(
                            next_event_id(),
                            "session.idle",
                            json!({"sessionID": session}),
                        );
                        let m = w.message(idle, Some(&session)).await;
                        w.queued.push_back(m);
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    let mut properties = json!({"missed": missed});
                    if let Some(s) = &w.filter {
                        properties["sessionID"] = json!(s);
                    }
                    let lagged = Envelope::new(next_event_id(), "server.lagged", properties);
                    let m = w.message(lagged, None).await;
                    w.queued.push_back(m);
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
