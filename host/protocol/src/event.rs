//! What the in-process bus publishes. Front ends (terminal, JSON lines, SSE)
//! only consume these.

use serde::{Deserialize, Serialize};

use crate::message::{MessageError, MessageInfo};
use crate::part::Part;
use crate::permission::{PermissionReply, PermissionRequest};
use crate::session::{SessionInfo, SessionStatus};
use crate::{MessageId, SessionId};

/// One bus event, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "session.created")]
    SessionCreated { session: SessionInfo },
    #[serde(rename = "session.updated")]
    SessionUpdated { session: SessionInfo },
    #[serde(rename = "session.status")]
    SessionStatus {
        session_id: SessionId,
        status: SessionStatus,
    },
    /// A loop ended with something worth a look (e.g. interrupted tool calls).
    #[serde(rename = "session.warning")]
    SessionWarning {
        session_id: SessionId,
        message: String,
    },
    #[serde(rename = "session.error")]
    SessionError {
        session_id: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<MessageId>,
        error: MessageError,
    },
    #[serde(rename = "message.updated")]
    MessageUpdated { info: MessageInfo },
    /// A part was written. `delta` carries the text appended, for streaming.
    #[serde(rename = "part.updated")]
    PartUpdated {
        part: Part,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delta: Option<String>,
    },
    #[serde(rename = "permission.asked")]
    PermissionAsked { request: PermissionRequest },
    #[serde(rename = "permission.replied")]
    PermissionReplied {
        session_id: SessionId,
        request_id: String,
        reply: PermissionReply,
    },
}

impl Event {
    /// The session the event is about.
    pub fn session_id(&self) -> &SessionId {
        match self {
            Event::SessionCreated { session } | Event::SessionUpdated { session } => &session.id,
            Event::SessionStatus { session_id, .. }
            | Event::SessionWarning { session_id, .. }
            | Event::SessionError { session_id, .. }
            | Event::PermissionReplied { session_id, .. } => session_id,
            Event::MessageUpdated { info } => info.session_id(),
            Event::PartUpdated { part, .. } => &part.session_id,
            Event::PermissionAsked { request } => &request.session_id,
        }
    }
}
