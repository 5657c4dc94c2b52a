//! `warden serve`: OpenCode's server protocol over warden's agent core, so
//! OpenCode's own clients (`opencode run --attach`, the `opencode attach`
//! TUI, the `@opencode-ai/sdk`) drive warden's model, tools, sandbox and
//! ledger.
//!
//! Where to start reading: [`router`] (every route, the auth and CORS
//! layers, the body limit and the JSON fallbacks), then `session.rs`
//! (sessions, messages, prompts, aborts), `permission.rs`, `event.rs` (the
//! two event streams), `catalog.rs` (what the clients read at start-up:
//! agents, providers, config, paths) and `auth.rs`. The OpenAPI document at
//! `/doc` is generated from the handlers' annotations and the protocol
//! types' schemas.

mod auth;
mod catalog;
mod delivery;
mod error;
mod event;
pub mod listen;
mod permission;
mod routes;
mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::{Json, Router};
use serde_json::Value;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_core::Core;
use warden_protocol::ModelRef;

pub use error::{ApiError, ErrorBody};

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Required on every request when set: HTTP Basic with user
    /// [`username`](Self::username) and this password (what OpenCode's
    /// clients send from `OPENCODE_SERVER_PASSWORD`), `Authorization: Bearer
    /// TOKEN`, or `?token=TOKEN`.
    pub token: Option<String>,
    /// The Basic-auth user name (OpenCode's default: `opencode`).
    pub username: String,
    /// The working directory of sessions created without one, and the root
    /// every session's directory must be inside.
    pub directory: PathBuf,
    /// Where the ledger lives, for `GET /path`.
    pub data_dir: PathBuf,
    /// The config file in use, if any, for `GET /path`.
    pub config_path: Option<PathBuf>,
    /// The model of prompts that name none (before the agent's and the config's).
    pub model: Option<ModelRef>,
    /// What `GET /plugin` answers: one object per plugin.
    pub plugins: Vec<Value>,
    /// Browser origins allowed to call the API (CORS), e.g. `https://app.example`.
    pub cors: Vec<String>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: None,
            username: "opencode".into(),
            directory: PathBuf::from("."),
            data_dir: PathBuf::from("."),
            config_path: None,
            model: None,
            plugins: Vec::new(),
            cors: Vec::new(),
            body_limit: 1 << 20,
        }
    }
}

pub(crate) struct Inner {
    pub core: Core,
    pub options: ServerOptions,
    /// When the server started (ms), the time of the one project it serves.
    pub started: i64,
    /// The open event streams, flushed before an answer goes out.
    pub deliveries: delivery::Deliveries,
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

impl AppState {
    /// A session this server serves: in the ledger and working inside the
    /// server's directory (the ledger may hold other hosts' and other
    /// commands' sessions); otherwise a 404.
    pub(crate) async fn session(
        &self,
        id: &warden_protocol::SessionId,
    ) -> Result<warden_protocol::SessionInfo, ApiError> {
        let session = self.core.ledger().session(id).await?;
        self.core.admits_session(&session)?;
        Ok(session)
    }

    /// Whether this server serves `session` (see [`AppState::session`]).
    pub(crate) fn serves(&self, session: &warden_protocol::SessionInfo) -> bool {
        self.core.admits_session(session).is_ok()
    }

    fn allows_origin(&self, origin: &str) -> bool {
        self.options
            .cors
            .iter()
            .any(|o| o.trim_end_matches('/') == origin)
    }

    /// The model a prompt naming none gets: the server's, else the default
    /// agent's, else the config's. `None` when nothing names one.
    pub(crate) fn default_model(&self) -> Option<ModelRef> {
        let agents = self.core.agents();
        self.options
            .model
            .clone()
            .or_else(|| {
                agents
                    .get(agents.default_name())
                    .ok()
                    .and_then(|a| a.model.clone())
            })
            .or_else(|| {
                self.core
                    .config()
                    .model
                    .as_deref()
                    .and_then(|m| warden_llm::Models::parse(m).ok())
            })
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "warden", description = "The warden agent host, speaking OpenCode's server protocol: sessions, messages with parts, prompts, aborts, permission asks, the event streams, and the catalogue OpenCode's clients read at start-up."),
    tags(
        (name = "session", description = "Sessions, their messages, prompts and aborts"),
        (name = "permission", description = "Permission asks waiting for an answer"),
        (name = "event", description = "The live event streams"),
        (name = "catalog", description = "Agents, providers and models, config, paths: what clients read at start-up"),
        (name = "plugin", description = "Loaded plugins and their grants"),
        (name = "server", description = "Health")
    )
)]
struct ApiDoc;

/// The whole API.
pub fn router(core: Core, options: ServerOptions) -> Router {
    let body_limit = options.body_limit;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let state = AppState(Arc::new(Inner {
        core,
        options,
        started,
        deliveries: Default::default(),
    }));
    let (api, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(routes::health))
        .routes(routes!(routes::global_health))
        .routes(routes!(routes::plugins))
        .routes(routes!(session::list, session::create))
        .routes(routes!(session::statuses))
        .routes(routes!(session::get, session::delete))
        .routes(routes!(session::messages, session::prompt))
        .routes(routes!(session::prompt_async))
        .routes(routes!(session::abort))
        .routes(routes!(session::todo))
        .routes(routes!(session::diff))
        .routes(routes!(session::children))
        .routes(routes!(permission::pending))
        .routes(routes!(permission::reply))
        .routes(routes!(permission::reply_in_session))
        .routes(routes!(event::events))
        .routes(routes!(event::global_events))
        .routes(routes!(catalog::config))
        .routes(routes!(catalog::config_providers))
        .routes(routes!(catalog::providers))
        .routes(routes!(catalog::provider_auth))
        .routes(routes!(catalog::agents))
        .routes(routes!(catalog::commands))
        .routes(routes!(catalog::path))
        .routes(routes!(catalog::project_current))
        .routes(routes!(catalog::projects))
        .routes(routes!(catalog::project_directories))
        .routes(routes!(catalog::vcs))
        .routes(routes!(catalog::formatter))
        .routes(routes!(catalog::lsp))
        .routes(routes!(catalog::mcp))
        .routes(routes!(catalog::capabilities))
        .routes(routes!(catalog::console))
        .routes(routes!(catalog::resources))
        .routes(routes!(catalog::workspaces))
        .routes(routes!(catalog::workspace_status))
        .routes(routes!(catalog::location))
        .routes(routes!(catalog::api_list))
        .split_for_parts();
    let doc = Arc::new(doc);
    // MCP clients (streamable HTTP): warden's tools, each call checked like a session's.
    let mcp = warden_mcp::http_service(
        state.core.clone(),
        state.options.directory.clone(),
        state.options.token.is_some(),
    );
    // Under `/warden/`: OpenCode's clients read `GET /mcp` as the MCP servers' status.
    let api = api.nest_service("/warden/mcp", mcp);
    api.route(
        "/doc",
        axum::routing::get(move || async move { Json(doc.as_ref().clone()) }),
    )
    .fallback(|uri: axum::http::Uri| async move {
        tracing::debug!(%uri, "no such endpoint");
        ApiError::not_found(format!(
            "no such endpoint {}; GET /doc lists them",
            uri.path()
        ))
    })
    .method_not_allowed_fallback(|| async {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method; GET /doc lists them",
        )
    })
    .layer(DefaultBodyLimit::max(body_limit))
    .layer(middleware::from_fn_with_state(
        state.clone(),
        auth::authenticate,
    ))
    .layer(middleware::from_fn_with_state(state.clone(), auth::cors))
    .with_state(state)
}

/// Whether binding to `addr` needs a token: anything but loopback does.
pub fn needs_token(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}
