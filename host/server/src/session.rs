//! Sessions, their messages, prompts and aborts, in OpenCode's shapes:
//! prompts are `{"parts": [{"type": "text", "text": …}], "agent", "model":
//! {"providerID", "modelID"}}`, answers are `{"info", "parts"}`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use warden_core::PromptInput;
use warden_protocol::{MessageWithParts, ModelRef, Rule, SessionId, SessionInfo, SessionStatus};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::routes::{ApiBytes, ApiJson, ApiPath, ApiQuery, Location};

/// A session and what it is doing now (`status` is warden's addition).
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

/// Which sessions to list.
#[derive(Deserialize, IntoParams, Default)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only sessions updated at or after this time (ms since the epoch).
    pub start: Option<i64>,
    /// Only sessions whose title contains this (case-insensitive).
    pub search: Option<String>,
    /// At most this many, the most recently updated first.
    pub limit: Option<usize>,
}

/// Every session, the most recently updated first.
#[utoipa::path(get, path = "/session", tag = "session", params(ListQuery, Location),
    responses((status = 200, description = "the sessions", body = [SessionView])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    let mut sessions = state.core.ledger().sessions().await?;
    sessions.retain(|s| state.serves(s));
    sessions.sort_by_key(|s| std::cmp::Reverse(s.time.updated));
    let search = q.search.map(|s| s.to_lowercase());
    let out = sessions
        .into_iter()
        .filter(|s| q.start.is_none_or(|t| s.time.updated >= t))
        .filter(|s| {
            search
                .as_ref()
                .is_none_or(|t| s.title.to_lowercase().contains(t))
        })
        .take(q.limit.unwrap_or(usize::MAX))
        .map(|s| view(&state, s))
        .collect();
    Ok(Json(out))
}

/// A model as OpenCode's clients name it.
#[derive(Deserialize, Serialize, ToSchema, Clone)]
#[serde(deny_unknown_fields)]
pub struct ModelInput {
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// `modelID` (prompts) or `id` (session creation), as OpenCode sends them.
    #[serde(rename = "modelID", alias = "id")]
    pub model_id: String,
    /// OpenCode's model variant; warden's models have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl ModelInput {
    fn model(&self) -> Result<ModelRef, ApiError> {
        if self.variant.as_deref().is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::bad_request(
                "warden's models have no variants; leave model.variant out",
            ));
        }
        Ok(ModelRef {
            provider: self.provider_id.clone(),
            model: self.model_id.clone(),
        })
    }
}

/// A new session.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// The working directory its tools see (default: the `directory` query,
    /// else the server's); must be inside the server's directory.
    #[serde(default)]
    pub directory: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    /// Rules for this session (OpenCode's ruleset): deny and ask rules only;
    /// they tighten the config's, never widen them.
    #[serde(default)]
    pub permission: Vec<Rule>,
    /// The agent the client means to use; checked, and named again in each prompt.
    #[serde(default)]
    pub agent: Option<String>,
    /// The model the client means to use; checked, and named again in each prompt.
    #[serde(default)]
    pub model: Option<ModelInput>,
    /// OpenCode's child sessions; warden has none, so this must be absent.
    #[serde(default, rename = "parentID")]
    pub parent_id: Option<String>,
    /// OpenCode's workspace id; warden has none, so this must be absent.
    #[serde(default, rename = "workspaceID")]
    pub workspace_id: Option<String>,
}

#[utoipa::path(post, path = "/session", tag = "session", params(Location), request_body = CreateSession,
    responses((status = 200, description = "the new session", body = SessionView),
        (status = 400, description = "a bad body or directory", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<Location>,
    ApiBytes(body): ApiBytes,
) -> Result<Json<SessionView>, ApiError> {
    // The body is optional: `POST /session` with none makes a default session.
    let body: CreateSession = if body.iter().all(u8::is_ascii_whitespace) {
        CreateSession::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body does not fit: {e}")))?
    };
    if body.parent_id.is_some() {
        return Err(ApiError::bad_request(
            "warden has no child sessions; leave parentID out",
        ));
    }
    if body.workspace_id.is_some() {
        return Err(ApiError::bad_request(
            "warden has no workspaces; leave workspaceID out",
        ));
    }
    // A client may tighten the operator's rules for its session, never
    // widen them: deny and ask rules only, and no hook switches.
    warden_core::permission::policy::check_client_rules(&body.permission)
        .map_err(ApiError::bad_request)?;
    if let Some(agent) = &body.agent {
        state.core.agents().get(agent)?;
    }
    if let Some(m) = &body.model {
        check_model(&state, &m.model()?)?;
    }
    let root = std::fs::canonicalize(&state.options.directory).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the server's directory: {e}"),
        )
    })?;
    let dir = match body.directory.or(q.directory) {
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
    let mut session = state.core.create_session(&dir, &title).await?;
    if !body.permission.is_empty() {
        session = state
            .core
            .ledger()
            .set_session_permission(&session.id, &body.permission)
            .await?;
    }
    Ok(Json(view(&state, session)))
}

/// What every busy or retrying session is doing; idle ones are left out.
#[utoipa::path(get, path = "/session/status", tag = "session", params(Location),
    responses((status = 200, description = "session id → status, for sessions that are not idle", body = BTreeMap<String, SessionStatus>)))]
pub async fn statuses(
    State(state): State<AppState>,
) -> Result<Json<BTreeMap<String, SessionStatus>>, ApiError> {
    let mut out = BTreeMap::new();
    for s in state.core.ledger().sessions().await? {
        if !state.serves(&s) {
            continue;
        }
        let status = state.core.status(&s.id);
        if status != SessionStatus::Idle {
            out.insert(s.id.0, status);
        }
    }
    Ok(Json(out))
}

#[utoipa::path(get, path = "/session/{sessionID}", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "the session", body = SessionView), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionView>, ApiError> {
    let session = state.session(&SessionId(id)).await?;
    Ok(Json(view(&state, session)))
}

#[utoipa::path(delete, path = "/session/{sessionID}", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "deleted", body = bool), (status = 404, description = "no such session", body = ErrorBody),
        (status = 409, description = "the session is running", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<bool>, ApiError> {
    let id = SessionId(id);
    state.session(&id).await?;
    state.core.delete_session(&id).await?;
    Ok(Json(true))
}

/// How many messages to return.
#[derive(Deserialize, IntoParams, Default)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// Only the last this many.
    pub limit: Option<usize>,
}

#[utoipa::path(get, path = "/session/{sessionID}/message", tag = "session", params(("sessionID" = String, Path), MessagesQuery, Location),
    responses((status = 200, description = "the messages with their parts, oldest first", body = [MessageWithParts]),
        (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn messages(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<MessagesQuery>,
) -> Result<Json<Vec<MessageWithParts>>, ApiError> {
    let id = SessionId(id);
    state.session(&id).await?;
    let mut all = state.core.ledger().messages(&id).await?;
    if let Some(n) = q.limit {
        let skip = all.len().saturating_sub(n);
        all.drain(..skip);
    }
    Ok(Json(all))
}

/// One part of a prompt. warden takes text parts.
#[derive(Deserialize, ToSchema)]
pub struct PartInput {
    /// `text`; other kinds (`file`, `agent`, `subtask`) are refused.
    #[serde(rename = "type")]
    pub kind: String,
    /// Other fields of OpenCode's text parts (`id`, `synthetic`, ...) are
    /// accepted and not used.
    #[serde(default)]
    pub text: Option<String>,
}

/// A prompt.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PromptBody {
    pub parts: Vec<PartInput>,
    #[serde(default)]
    pub agent: Option<String>,
    /// `{"providerID", "modelID"}`; a `scripted` provider's model is a cassette path.
    #[serde(default)]
    pub model: Option<ModelInput>,
    /// Per-prompt tool switches, kept as session rules.
    #[serde(default)]
    pub tools: BTreeMap<String, bool>,
    /// Only record the message.
    #[serde(default)]
    pub no_reply: bool,
}

/// The host's own rule for models (see `warden_core::session::admission`),
/// so a prompt is judged the same here and on whichever host runs it.
fn check_model(state: &AppState, model: &ModelRef) -> Result<(), ApiError> {
    Ok(state.core.admits_model(model)?)
}

async fn prompt_input(
    state: &AppState,
    id: SessionId,
    body: PromptBody,
) -> Result<PromptInput, ApiError> {
    state.session(&id).await?;
    let mut texts = Vec::new();
    for (i, p) in body.parts.iter().enumerate() {
        match (p.kind.as_str(), &p.text) {
            ("text", Some(t)) => texts.push(t.as_str()),
            ("text", None) => {
                return Err(ApiError::bad_request(format!(
                    "parts[{i}] is a text part without text"
                )));
            }
            (other, _) => {
                return Err(ApiError::bad_request(format!(
                    "parts[{i}] is a {other:?} part; warden takes text parts only"
                )));
            }
        }
    }
    let text = texts.join("\n\n");
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the prompt has no text: send parts: [{\"type\": \"text\", \"text\": \"...\"}]",
        ));
    }
    let model = match &body.model {
        Some(m) => Some(m.model()?),
        None => state.default_model(),
    };
    if let Some(m) = &model {
        check_model(state, m)?;
    }
    // Check the model now, so a bad one is a 400 and not a failed run.
    let model = state
        .core
        .choose_model(model.as_ref(), body.agent.as_deref(), Some(&id))
        .await?;
    Ok(PromptInput {
        session_id: id,
        text,
        agent: body.agent,
        model: Some(model),
        tools: body.tools,
        no_reply: body.no_reply,
    })
}

/// Send a prompt and wait for the answer. Prompts to one session queue in
/// arrival order, whichever host sharing the ledger accepted them; each
/// gets its own answer.
#[utoipa::path(post, path = "/session/{sessionID}/message", tag = "session", params(("sessionID" = String, Path), Location), request_body = PromptBody,
    responses((status = 200, description = "the last assistant message (or the user message with noReply)", body = MessageWithParts),
        (status = 400, description = "a bad prompt", body = ErrorBody), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn prompt(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Json<MessageWithParts>, ApiError> {
    let input = prompt_input(&state, SessionId(id), body).await?;
    let session = input.session_id.clone();
    let answer = state.core.prompt(input).await?;
    // The run's events go out before its answer (see `delivery.rs`).
    state.deliveries.flush(&session).await;
    Ok(Json(answer))
}

/// Queue a prompt and return at once; follow it on the event stream. A 204
/// means the prompt is in the ledger: it is answered even if this host
/// stops, by the next host to run the session.
#[utoipa::path(post, path = "/session/{sessionID}/prompt_async", tag = "session", params(("sessionID" = String, Path), Location), request_body = PromptBody,
    responses((status = 204, description = "accepted; the answer comes on the event stream"),
        (status = 400, description = "a bad prompt", body = ErrorBody), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn prompt_async(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<StatusCode, ApiError> {
    let input = prompt_input(&state, SessionId(id), body).await?;
    let number = state.core.accept(&input).await?;
    let core = state.core.clone();
    tokio::spawn(async move {
        if let Err(e) = core.answer(&input.session_id, number).await {
            tracing::warn!(error = %e, "a background prompt failed");
        }
    });
    Ok(StatusCode::NO_CONTENT)
}

/// Cancel the session's run: the model stream and running guest calls stop
/// and their tool parts end as interrupted errors. `true` when a run was
/// cancelled.
#[utoipa::path(post, path = "/session/{sessionID}/abort", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "whether a run was cancelled", body = bool), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn abort(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<bool>, ApiError> {
    let id = SessionId(id);
    state.session(&id).await?;
    Ok(Json(state.core.cancel(&id)))
}

/// The session's to-do list. warden's agents keep none, so it is empty.
#[utoipa::path(get, path = "/session/{sessionID}/todo", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "always empty: warden keeps no to-do lists", body = [Object]), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn todo(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<Value>>, ApiError> {
    state.session(&SessionId(id)).await?;
    Ok(Json(Vec::new()))
}

/// The files the session changed. warden takes no snapshots, so it is empty.
#[utoipa::path(get, path = "/session/{sessionID}/diff", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "always empty: warden takes no file snapshots", body = [Object]), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn diff(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<Value>>, ApiError> {
    state.session(&SessionId(id)).await?;
    Ok(Json(Vec::new()))
}

/// Child sessions. warden has none.
#[utoipa::path(get, path = "/session/{sessionID}/children", tag = "session", params(("sessionID" = String, Path), Location),
    responses((status = 200, description = "always empty: warden has no child sessions", body = [SessionView]), (status = 404, description = "no such session", body = ErrorBody)))]
pub async fn children(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    state.session(&SessionId(id)).await?;
    Ok(Json(Vec::new()))
}
