//! The extractors every handler uses (answering malformed input with the
//! JSON error body) and the small server endpoints.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::ApiError;

/// `Json` whose rejections answer with the API's JSON error body.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// `Path`, answering malformed paths with the JSON error body.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// `Query`, answering malformed query strings with the JSON error body.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// A raw body, answering one over the limit with the JSON error body.
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        axum::body::Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(ApiError::from)
    }
}

/// The query every OpenCode client may add: the directory (and workspace)
/// it works in. warden serves one directory tree; `directory` picks where
/// a new session works.
#[derive(Deserialize, IntoParams, Default)]
#[into_params(parameter_in = Query)]
pub struct Location {
    /// The client's working directory.
    pub directory: Option<String>,
    /// OpenCode's workspace id; warden has none and ignores it.
    #[expect(dead_code, reason = "described in /doc; warden has no workspaces")]
    pub workspace: Option<String>,
}

/// Liveness and version.
#[derive(Serialize, ToSchema)]
pub struct Health {
    pub ok: bool,
    pub version: &'static str,
}

#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, description = "the server is up", body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// OpenCode's health answer.
#[derive(Serialize, ToSchema)]
pub struct GlobalHealth {
    pub healthy: bool,
    pub version: &'static str,
}

#[utoipa::path(get, path = "/global/health", tag = "server",
    responses((status = 200, description = "the server is up (OpenCode's shape)", body = GlobalHealth)))]
pub async fn global_health() -> Json<GlobalHealth> {
    Json(GlobalHealth {
        healthy: true,
        version: env!("CARGO_PKG_VERSION"),
    })
}

#[utoipa::path(get, path = "/plugin", tag = "plugin",
    responses((status = 200, description = "each plugin's tools or hooks, hash and grants", body = [Object])))]
pub async fn plugins(State(state): State<AppState>) -> Json<Vec<Value>> {
    Json(state.options.plugins.clone())
}
