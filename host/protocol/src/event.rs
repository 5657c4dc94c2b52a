//! What the in-process bus publishes. Front ends (terminal, JSON lines, SSE)
//! only consume these.
//!
//! On the wire an event is OpenCode's envelope: `{"id", "type",
//! "properties"}`, with OpenCode's event names (`message.part.updated`,
//! `session.status`, `permission.asked`, ...) and property names
//! (`sessionID`, `info`, `part`, `requestID`, ...). [`Event::kind`] and
//! [`Event::properties`] give the last two; [`Envelope`] adds the id.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::{MessageError, MessageInfo};
use crate::part::Part;
use crate::permission::{PermissionReply, PermissionRequest};
use crate::session::{SessionInfo, SessionStatus};
use crate::{MessageId, SessionId};

/// One bus event. Serde gives it a private form (not the envelope), in
/// which the PostgreSQL relay carries it between hosts and reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    SessionCreated {
        session: SessionInfo,
    },
    SessionUpdated {
        session: SessionInfo,
    },
    SessionStatus {
        session_id: SessionId,
        status: SessionStatus,
    },
    /// A loop ended with something worth a look (e.g. interrupted tool
    /// calls). warden's own: OpenCode has no such event.
    SessionWarning {
        session_id: SessionId,
        message: String,
    },
    SessionError {
        session_id: SessionId,
        message_id: Option<MessageId>,
        error: MessageError,
    },
    MessageUpdated {
        info: MessageInfo,
    },
    /// A part was written. `delta` carries the text appended, for streaming.
    PartUpdated {
        part: Part,
        delta: Option<String>,
    },
    PermissionAsked {
        request: PermissionRequest,
    },
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

    /// OpenCode's name for the event: its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionCreated { .. } => "session.created",
            Event::SessionUpdated { .. } => "session.updated",
            Event::SessionStatus { .. } => "session.status",
            Event::SessionWarning { .. } => "session.warning",
            Event::SessionError { .. } => "session.error",
            Event::MessageUpdated { .. } => "message.updated",
            Event::PartUpdated { .. } => "message.part.updated",
            Event::PermissionAsked { .. } => "permission.asked",
            Event::PermissionReplied { .. } => "permission.replied",
        }
    }

    /// The event's `properties`, as OpenCode names them.
    pub fn properties(&self) -> Value {
        let sid = self.session_id();
        match self {
            Event::SessionCreated { session } | Event::SessionUpdated { session } => {
                json!({"sessionID": sid, "info": session})
            }
            Event::SessionStatus { status, .. } => json!({"sessionID": sid, "status": status}),
            Event::SessionWarning { message, .. } => json!({"sessionID": sid, "message": message}),
            Event::SessionError {
                message_id, error, ..
            } => {
                let mut v = json!({"sessionID": sid, "error": error});
                if let Some(m) = message_id {
                    v["messageID"] = json!(m);
                }
                v
            }
            Event::MessageUpdated { info } => json!({"sessionID": sid, "info": info}),
            Event::PartUpdated { part, delta } => {
                let mut v = json!({"sessionID": sid, "part": part});
                if let Some(d) = delta {
                    v["delta"] = json!(d);
                }
                v
            }
            Event::PermissionAsked { request } => json!(request),
            Event::PermissionReplied {
                request_id, reply, ..
            } => json!({"sessionID": sid, "requestID": request_id, "reply": reply}),
        }
    }

    /// The event in its envelope, with the id the sender gives it.
    pub fn envelope(&self, id: String) -> Envelope {
        Envelope {
            id,
            kind: self.kind().to_string(),
            properties: self.properties(),
        }
    }
}

/// An event as OpenCode's clients read it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Envelope {
    /// `evt_…`, unique per sender and increasing.
    pub id: String,
    /// `session.created`, `session.updated`, `session.status`, `session.idle`,
    /// `session.error`, `session.warning`, `message.updated`,
    /// `message.part.updated`, `permission.asked`, `permission.replied`,
    /// `server.connected`, `server.lagged`.
    #[serde(rename = "type")]
    pub kind: String,
    pub properties: Value,
}

impl Envelope {
    /// An event with no bus counterpart (`server.connected`, `session.idle`, ...).
    pub fn new(id: String, kind: &str, properties: Value) -> Self {
        Envelope {
            id,
            kind: kind.to_string(),
            properties,
        }
    }
}

/// A fresh event id: `evt_`, the milliseconds since the epoch and a
/// counter of this process, both zero-padded hex, so the ids one process
/// gives out sort in the order it gave them.
pub fn next_event_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!("evt_{ms:012x}{n:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionStatus;

    #[test]
    fn events_go_out_in_opencodes_envelope() {
        let e = Event::SessionStatus {
            session_id: "ses_1".into(),
            status: SessionStatus::Busy,
        };
        assert_eq!(
            serde_json::to_value(e.envelope("evt_1".into())).unwrap(),
            json!({"id": "evt_1", "type": "session.status",
                   "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}})
        );
        let r = Event::PermissionReplied {
            session_id: "ses_1".into(),
            request_id: "per_1".into(),
            reply: PermissionReply::Once,
        };
        assert_eq!(
            r.properties(),
            json!({"sessionID": "ses_1", "requestID": "per_1", "reply": "once"})
        );
    }

    #[test]
    fn event_ids_increase() {
        let a = next_event_id();
        let b = next_event_id();
        assert!(a < b, "{a} {b}");
        assert!(a.starts_with("evt_"));
    }
}
