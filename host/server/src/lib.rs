//! `warden serve`: the HTTP API and live event stream over the agent core,
//! the way OpenCode's clients talk to `opencode serve`.
//!
//! Where to start reading: [`router`] (every route, the auth layer, the body
//! limit and the JSON fallbacks), then `routes.rs` (REST) and `event.rs`
//! (SSE). The OpenAPI document at `/doc` is generated from the handlers'
//! annotations and the protocol types' schemas.

mod error;
mod event;
mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::Value;
use subtle::ConstantTimeEq;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_core::Core;

pub use error::{ApiError, ErrorBody};

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Required on every request when set: `Authorization: Bearer TOKEN`
    /// (or `?token=TOKEN`, for EventSource clients that cannot set headers).
    pub token: Option<String>,
    /// The working directory of sessions created without one, and the root
    /// every session's directory must be inside.
    pub directory: PathBuf,
    /// What `GET /plugin` answers: one object per plugin.
    pub plugins: Vec<Value>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Let HTTP clients choose `scripted:PATH` models (a cassette names a
    /// file it appends to, so this is for tests and demos, not exposure).
    pub allow_scripted: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: None,
            directory: PathBuf::from("."),
            plugins: Vec::new(),
            body_limit: 1 << 20,
            allow_scripted: false,
        }
    }
}

pub(crate) struct Inner {
    pub core: Core,
    pub options: ServerOptions,
}

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "warden", description = "The warden agent host: sessions, prompts, the live event stream, permission asks."),
    tags(
        (name = "session", description = "Sessions, their messages, prompts and aborts"),
        (name = "permission", description = "Permission asks waiting for an answer"),
        (name = "event", description = "The live event stream"),
        (name = "plugin", description = "Loaded plugins and their grants"),
        (name = "server", description = "Health")
    )
)]
struct ApiDoc;

/// The whole API.
pub fn router(core: Core, options: ServerOptions) -> Router {
    let body_limit = options.body_limit;
    let state = AppState(Arc::new(Inner { core, options }));
    let (api, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(routes::health))
        .routes(routes!(routes::list_sessions, routes::create_session))
        .routes(routes!(routes::get_session, routes::delete_session))
        .routes(routes!(routes::messages, routes::prompt))
        .routes(routes!(routes::prompt_async))
        .routes(routes!(routes::abort))
        .routes(routes!(routes::pending_permissions))
        .routes(routes!(routes::reply_permission))
        .routes(routes!(routes::plugins))
        .routes(routes!(event::events))
        .split_for_parts();
    let doc = Arc::new(doc);
    // MCP clients (streamable HTTP): warden's tools, each call checked like a session's.
    let mcp = warden_mcp::http_service(
        state.core.clone(),
        state.options.directory.clone(),
        state.options.token.is_some(),
    );
    let api = api.nest_service("/mcp", mcp);
    api.route(
        "/doc",
        axum::routing::get(move || async move { Json(doc.as_ref().clone()) }),
    )
    .fallback(|| async { ApiError::not_found("no such endpoint; GET /doc lists them") })
    .method_not_allowed_fallback(|| async {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method; GET /doc lists them",
        )
    })
    .layer(DefaultBodyLimit::max(body_limit))
    .layer(middleware::from_fn_with_state(state.clone(), authenticate))
    .with_state(state)
}

/// Refuse requests without the token, when one is set; without one, refuse
/// requests not addressed to this machine by name (a web page that rebinds
/// its own domain to 127.0.0.1 must not reach the API).
async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(token) = &state.options.token else {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin = request
            .headers()
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok());
        if !is_loopback_host(host) || origin.is_some_and(|o| !is_loopback_origin(o)) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "without a token this server only answers requests addressed to localhost; start it with --token to serve other names",
            )
            .into_response();
        }
        return next.run(request).await;
    };
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let from_query = request
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
    let given = from_header.or(from_query).unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send the server's token: Authorization: Bearer TOKEN",
        )
        .into_response()
    }
}

/// `localhost`, `127.0.0.1` or `[::1]`, with any port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

fn is_loopback_origin(origin: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(scheme, host)| matches!(scheme, "http" | "https") && is_loopback_host(host))
}

/// Whether binding to `addr` needs a token: anything but loopback does.
pub fn needs_token(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass_without_a_token() {
        for ok in [
            "localhost",
            "localhost:4096",
            "127.0.0.1:80",
            "[::1]:4096",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:4096",
            "127.0.0.1.nip.io",
            "10.0.0.1:4096",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://localhost:3000"));
        assert!(!is_loopback_origin("https://evil.example"));
        assert!(!is_loopback_origin("null"));
    }
}
