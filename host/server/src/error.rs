//! Errors as the API answers them: a status and a JSON body
//! `{"error": {"code": "...", "message": "..."}}`, never a bare text.

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use warden_core::CoreError;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong, for programs (`code`) and people (`message`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `not_found`, `bad_request`, `busy`, `unauthorized`, `too_large`,
    /// `ledger_unavailable`, `overloaded`, `internal`, ...
    pub code: &'static str,
    pub message: String,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if matches!(
            self.status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
        ) {
            // The body was refused unread, so this connection cannot carry
            // another request: say so, or a client that pools connections
            // sends its next request down one the server is closing.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        let message = e.to_string();
        match e {
            CoreError::SessionNotFound(_) => Self::not_found(message),
            // Outside the server's directory: as if it did not exist, and
            // without naming where it works.
            CoreError::NotHere { session, .. } => {
                Self::not_found(format!("no session {session} in this server's directory"))
            }
            CoreError::SessionBusy { .. } => Self::new(StatusCode::CONFLICT, "busy", message),
            CoreError::NoModel => Self::bad_request(
                "no model chosen: name one in the request (\"model\": {\"providerID\", \"modelID\"}), or give the server a default model (its --model option or \"model\" in its config)",
            ),
            CoreError::Ledger(warden_core::LedgerError::Fenced { .. }) => {
                Self::new(StatusCode::CONFLICT, "busy", message)
            }
            CoreError::Model { .. }
            | CoreError::Config(_)
            | CoreError::UnknownAgent { .. }
            | CoreError::NoUserMessage(_) => Self::bad_request(message),
            CoreError::Cancelled => Self::new(StatusCode::CONFLICT, "cancelled", message),
            // The run failed on the host that ran it; its words as recorded.
            CoreError::PromptFailed(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "prompt_failed", message)
            }
            CoreError::Provider(_) => Self::new(StatusCode::BAD_GATEWAY, "provider", message),
            // A full disk, a read-only ledger, a database server gone: the
            // request may work later, once an operator has seen to it.
            CoreError::Ledger(warden_core::LedgerError::Unavailable(_)) => {
                tracing::error!("{message}");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ledger_unavailable",
                    message,
                )
            }
            CoreError::Ledger(_) | CoreError::Internal(_) => {
                tracing::error!("{message}");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
            }
        }
    }
}

impl ApiError {
    /// A body that did not arrive in time (see `listen.rs`): 408.
    fn body_timed_out(r: &(dyn std::error::Error + 'static)) -> Option<ApiError> {
        crate::listen::is_body_timeout(r).then(|| {
            let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(r);
            let mut message = r.to_string();
            while let Some(e) = cur {
                if e.is::<crate::listen::BodyTimedOut>() {
                    message = e.to_string();
                }
                cur = e.source();
            }
            Self::new(StatusCode::REQUEST_TIMEOUT, "timeout", message)
        })
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        if let Some(timed_out) = Self::body_timed_out(&r) {
            return timed_out;
        }
        match r {
            JsonRejection::MissingJsonContentType(_) => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with content-type: application/json",
            ),
            JsonRejection::BytesRejection(b) if b.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Self::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!(
                        "the body is larger than the server accepts ({})",
                        b.body_text()
                    ),
                )
            }
            JsonRejection::JsonSyntaxError(e) => {
                Self::bad_request(format!("the body is not valid JSON: {}", e.body_text()))
            }
            JsonRejection::JsonDataError(e) => {
                Self::bad_request(format!("the body does not fit: {}", e.body_text()))
            }
            other => Self::bad_request(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::bad_request(format!("the query string does not fit: {}", r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        Self::bad_request(format!("the path does not fit: {}", r.body_text()))
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        if let Some(timed_out) = Self::body_timed_out(&r) {
            return timed_out;
        }
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "the body is larger than the server accepts ({})",
                    r.body_text()
                ),
            )
        } else {
            Self::bad_request(r.body_text())
        }
    }
}
