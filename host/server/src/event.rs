//! `GET /event`: every bus event as Server-Sent Events, optionally for one
//! session. The bus never waits for a client: a client that falls more than
//! its buffer behind is sent a `server.lagged` event saying how many events
//! it missed (the REST endpoints have the current state). A connected client
//! counts as someone who can answer permission asks.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;
use warden_protocol::SessionId;

use crate::AppState;

/// Which events to stream.
#[derive(Deserialize, IntoParams)]
pub struct EventQuery {
    /// Only this session's events.
    pub session: Option<String>,
}

/// The event stream. Each SSE event's name is the bus event's `type`
/// (`part.updated`, `session.status`, `permission.asked`, ...) and its data
/// the event as JSON; the first is `server.connected`.
#[utoipa::path(get, path = "/event", tag = "event", params(EventQuery),
    responses((status = 200, description = "text/event-stream of bus events", content_type = "text/event-stream")))]
pub async fn events(
    State(state): State<AppState>,
    crate::routes::ApiQuery(q): crate::routes::ApiQuery<EventQuery>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let rx = state.core.bus().subscribe();
    let filter = q.session.map(SessionId);
    // A client watching one session answers that session's questions only.
    let attached = match &filter {
        Some(session) => state.core.permissions().attach_to(session),
        None => state.core.permissions().attach(),
    };
    let hello = SseEvent::default()
        .event("server.connected")
        .data(serde_json::json!({"type": "server.connected", "session": filter}).to_string());
    let first = futures::stream::once(async move { Ok(hello) });
    let rest = futures::stream::unfold(
        (rx, attached, filter),
        |(mut rx, attached, filter)| async move {
            loop {
                match rx.recv().await {
                    Ok(event) => {
                        if filter.as_ref().is_some_and(|s| event.session_id() != s) {
                            continue;
                        }
                        let data = serde_json::to_string(&*event).unwrap_or_else(|_| "{}".into());
                        let name = serde_json::to_value(&*event)
                            .ok()
                            .and_then(|v| {
                                v.get("type").and_then(|t| t.as_str()).map(str::to_string)
                            })
                            .unwrap_or_else(|| "event".into());
                        return Some((
                            Ok(SseEvent::default().event(name).data(data)),
                            (rx, attached, filter),
                        ));
                    }
                    Err(RecvError::Lagged(missed)) => {
                        let data = serde_json::json!({"type": "server.lagged", "missed": missed})
                            .to_string();
                        return Some((
                            Ok(SseEvent::default().event("server.lagged").data(data)),
                            (rx, attached, filter),
                        ));
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(futures::StreamExt::chain(first, rest))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
