//! Permission asks waiting for an answer, and the answers, as OpenCode's
//! clients send them (`POST /permission/{requestID}/reply`, and the older
//! `POST /session/{sessionID}/permissions/{permissionID}`).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use warden_protocol::{PermissionReply, PermissionRequest, SessionId};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::routes::{ApiJson, ApiPath, ApiQuery};

/// Which asks to list.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PermissionQuery {
    /// Only this session's (warden's addition).
    pub session: Option<String>,
}

#[utoipa::path(get, path = "/permission", tag = "permission", params(PermissionQuery, crate::routes::Location),
    responses((status = 200, description = "the questions waiting for an answer", body = [PermissionRequest])))]
pub async fn pending(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<PermissionQuery>,
) -> Json<Vec<PermissionRequest>> {
    let session = q.session.map(SessionId);
    let mut out = Vec::new();
    for request in state.core.permissions().pending(session.as_ref()) {
        if state.session(&request.session_id).await.is_ok() {
            out.push(request);
        }
    }
    Json(out)
}

/// An answer to a permission ask.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    pub reply: PermissionReply,
    /// OpenCode's note for the model on a rejection. warden accepts it and
    /// does not pass it on: the model is told the call was refused.
    #[serde(default)]
    #[expect(dead_code, reason = "accepted from OpenCode's clients, not passed on")]
    pub message: Option<String>,
}

async fn answer(
    state: &AppState,
    id: &str,
    reply: PermissionReply,
) -> Result<Json<bool>, ApiError> {
    // Only the questions of sessions this server serves are its clients' to answer.
    let asked = state.core.permissions().pending(None);
    if let Some(request) = asked.iter().find(|p| p.id == id)
        && state.session(&request.session_id).await.is_err()
    {
        return Err(ApiError::not_found(format!(
            "no pending permission request {id}"
        )));
    }
    state
        .core
        .permissions()
        .reply(id, reply)
        .await
        .map_err(ApiError::not_found)?;
    Ok(Json(true))
}

#[utoipa::path(post, path = "/permission/{requestID}/reply", tag = "permission", params(("requestID" = String, Path)), request_body = ReplyBody,
    responses((status = 200, description = "the answer was taken", body = bool),
        (status = 400, description = "a bad body", body = ErrorBody), (status = 404, description = "no such question waiting", body = ErrorBody)))]
pub async fn reply(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ReplyBody>,
) -> Result<Json<bool>, ApiError> {
    answer(&state, &id, body.reply).await
}

/// OpenCode's older answer shape.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseBody {
    pub response: PermissionReply,
}

#[utoipa::path(post, path = "/session/{sessionID}/permissions/{permissionID}", tag = "permission",
    params(("sessionID" = String, Path), ("permissionID" = String, Path)), request_body = ResponseBody,
    responses((status = 200, description = "the answer was taken", body = bool),
        (status = 400, description = "a bad body", body = ErrorBody), (status = 404, description = "no such question waiting in that session", body = ErrorBody)))]
pub async fn reply_in_session(
    State(state): State<AppState>,
    ApiPath((session, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ResponseBody>,
) -> Result<Json<bool>, ApiError> {
    let session = SessionId(session);
    if !state
        .core
        .permissions()
        .pending(Some(&session))
        .iter()
        .any(|p| p.id == id)
    {
        return Err(ApiError::not_found(format!(
            "no pending permission request {id} in session {session}"
        )));
    }
    answer(&state, &id, body.response).await
}
