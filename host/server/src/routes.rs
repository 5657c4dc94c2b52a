//! The REST endpoints. Each handler's `#[utoipa::path]` is where the
//! OpenAPI document at `/doc` comes from.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use warden_core::PromptInput;
use warden_core::llm::Models;
use warden_protocol::{
    MessageWithParts, PermissionReply, PermissionRequest, SessionId, SessionInfo, SessionStatus,
};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};

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

/// Liveness and version.
#[derive(Serialize, ToSchema)]
pub struct Health {
    pub ok: bool,
    pub version: &'static str,
}

#[utoipa::path(get, path = "/health", tag = "server", responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// A session and what it is doing now.
#[derive(Serialize, ToSchema)]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionInfo,
    pub status: SessionStatus,
}

fn view(state: &AppState, session: SessionInfo) -> SessionView {
    let status = state.core.status(&session.id);
    SessionView { session, status }
}

#[utoipa::path(get, path = "/session", tag = "session", responses((status = 200, body = [SessionView])))]
pub async fn list_sessions(
    State(state): State<AppState>,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    let sessions = state.core.ledger().sessions()?;
    Ok(Json(
        sessions.into_iter().map(|s| view(&state, s)).collect(),
    ))
}

/// A new session.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// The working directory its tools see (default: the server's).
    #[serde(default)]
    pub directory: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
}

#[utoipa::path(post, path = "/session", tag = "session", request_body = CreateSession,
    responses((status = 201, body = SessionView), (status = 400, body = ErrorBody)))]
pub async fn create_session(
    State(state): State<AppState>,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    // The body is optional: `POST /session` with none makes a default session.
    let body: CreateSession = if body.iter().all(u8::is_ascii_whitespace) {
        CreateSession::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body does not fit: {e}")))?
    };
    let root = std::fs::canonicalize(&state.options.directory).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the server's directory: {e}"),
        )
    })?;
    let dir = match body.directory {
        Some(d) => {
            // Only inside the server's directory: a client must not pick what
            // the tools of its session may read and write on this machine.
            let dir = std::fs::canonicalize(&d).map_err(|e| {
                ApiError::bad_request(format!("the directory {d:?} cannot be used: {e}"))
            })?;
            if !dir.starts_with(&root) {
                return Err(ApiError::bad_request(format!(
                    "the directory {d:?} is outside the server's directory {}; start the server with --dir to serve it",
                    root.display()
                )));
            }
            dir
        }
        None => root,
    };
    let title = body.title.unwrap_or_else(|| "New session".into());
    let session = state.core.create_session(&dir, &title)?;
    Ok((StatusCode::CREATED, Json(view(&state, session))))
}

#[utoipa::path(get, path = "/session/{id}", tag = "session", params(("id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody)))]
pub async fn get_session(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionView>, ApiError> {
    let session = state.core.ledger().session(&SessionId(id))?;
    Ok(Json(view(&state, session)))
}

#[utoipa::path(delete, path = "/session/{id}", tag = "session", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete_session(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    state.core.delete_session(&SessionId(id))?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/session/{id}/message", tag = "session", params(("id" = String, Path)),
    responses((status = 200, body = [MessageWithParts]), (status = 404, body = ErrorBody)))]
pub async fn messages(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<MessageWithParts>>, ApiError> {
    let id = SessionId(id);
    state.core.ledger().session(&id)?;
    Ok(Json(state.core.ledger().messages(&id)?))
}

/// A prompt.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PromptBody {
    pub text: String,
    #[serde(default)]
    pub agent: Option<String>,
    /// `provider/model` or `scripted:PATH`.
    #[serde(default)]
    pub model: Option<String>,
    /// Per-prompt tool switches, kept as session rules.
    #[serde(default)]
    pub tools: BTreeMap<String, bool>,
    /// Only record the message.
    #[serde(default)]
    pub no_reply: bool,
}

fn prompt_input(
    state: &AppState,
    id: SessionId,
    body: PromptBody,
) -> Result<PromptInput, ApiError> {
    state.core.ledger().session(&id)?;
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request("text is empty"));
    }
    let model = match &body.model {
        Some(m) => Some(Models::parse(m)?),
        None => None,
    };
    if model.as_ref().is_some_and(|m| m.provider == "scripted") && !state.options.allow_scripted {
        return Err(ApiError::bad_request(
            "scripted models are off for HTTP clients; start the server with --allow-scripted to use cassettes",
        ));
    }
    // Check the model now, so a bad one is a 400 and not a failed run.
    let model = state
        .core
        .choose_model(model.as_ref(), body.agent.as_deref(), Some(&id))?;
    Ok(PromptInput {
        session_id: id,
        text: body.text,
        agent: body.agent,
        model: Some(model),
        tools: body.tools,
        no_reply: body.no_reply,
    })
}

/// Send a prompt and wait for the answer. Prompts to one session queue in
/// arrival order; each gets its own answer. 409 if another warden process
/// is running the session.
#[utoipa::path(post, path = "/session/{id}/message", tag = "session", params(("id" = String, Path)), request_body = PromptBody,
    responses((status = 200, description = "the last assistant message (or the user message with noReply)", body = MessageWithParts),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn prompt(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Json<MessageWithParts>, ApiError> {
    let input = prompt_input(&state, SessionId(id), body)?;
    Ok(Json(state.core.prompt(input).await?))
}

/// Accepted for a prompt that runs in the background.
#[derive(Serialize, ToSchema)]
pub struct Accepted {
    pub accepted: bool,
    pub session_id: SessionId,
}

/// Send a prompt and return at once; follow it on `/event`.
#[utoipa::path(post, path = "/session/{id}/prompt_async", tag = "session", params(("id" = String, Path)), request_body = PromptBody,
    responses((status = 202, body = Accepted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn prompt_async(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let session_id = SessionId(id);
    let input = prompt_input(&state, session_id.clone(), body)?;
    let core = state.core.clone();
    tokio::spawn(async move {
        if let Err(e) = core.prompt(input).await {
            tracing::warn!(error = %e, "a background prompt failed");
        }
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            accepted: true,
            session_id,
        }),
    ))
}

/// Whether a run was cancelled.
#[derive(Serialize, ToSchema)]
pub struct Aborted {
    pub aborted: bool,
}

/// Cancel the session's run: the model stream and running guest calls stop
/// and their tool parts end as interrupted errors.
#[utoipa::path(post, path = "/session/{id}/abort", tag = "session", params(("id" = String, Path)),
    responses((status = 200, body = Aborted), (status = 404, body = ErrorBody)))]
pub async fn abort(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Aborted>, ApiError> {
    let id = SessionId(id);
    state.core.ledger().session(&id)?;
    Ok(Json(Aborted {
        aborted: state.core.cancel(&id),
    }))
}

/// Which asks to list.
#[derive(Deserialize, IntoParams)]
pub struct PermissionQuery {
    /// Only this session's.
    pub session: Option<String>,
}

#[utoipa::path(get, path = "/permission", tag = "permission", params(PermissionQuery),
    responses((status = 200, body = [PermissionRequest])))]
pub async fn pending_permissions(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<PermissionQuery>,
) -> Json<Vec<PermissionRequest>> {
    let session = q.session.map(SessionId);
    Json(state.core.permissions().pending(session.as_ref()))
}

/// An answer to a permission ask.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    pub reply: PermissionReply,
}

/// Whether the answer was taken.
#[derive(Serialize, ToSchema)]
pub struct Replied {
    pub ok: bool,
}

#[utoipa::path(post, path = "/permission/{id}", tag = "permission", params(("id" = String, Path)), request_body = ReplyBody,
    responses((status = 200, body = Replied), (status = 404, body = ErrorBody)))]
pub async fn reply_permission(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ReplyBody>,
) -> Result<Json<Replied>, ApiError> {
    state
        .core
        .permissions()
        .reply(&id, body.reply)
        .map_err(ApiError::not_found)?;
    Ok(Json(Replied { ok: true }))
}

#[utoipa::path(get, path = "/plugin", tag = "plugin",
    responses((status = 200, description = "each plugin's tools or hooks, hash and grants", body = [Object])))]
pub async fn plugins(State(state): State<AppState>) -> Json<Vec<Value>> {
    Json(state.options.plugins.clone())
}
