//! Permission questions as MCP elicitations.
//!
//! A client that declared the elicitation capability is attached to its
//! connection's session like a terminal: a question the rules turn into
//! `ask` is sent to it as a form with one optional switch ("always"), and
//! its answer (accept / decline / cancel) is the reply. A client without
//! the capability is not attached, so an `ask` is a denial whose message
//! says nobody could approve it.

use rmcp::Peer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::RoleServer;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use warden_core::Core;
use warden_core::permission::AttachGuard;
use warden_protocol::{Event, PermissionReply, PermissionRequest, SessionId};

/// Answers one session's questions through its MCP client until dropped.
pub struct Bridge {
    _attached: AttachGuard,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Bridge {
    pub fn start(core: Core, session: SessionId, peer: Peer<RoleServer>) -> Bridge {
        // Listen before attaching, so no question is asked unheard.
        let mut events = core.bus().subscribe();
        let attached = core.permissions().attach_to(&session);
        let task = tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(e) => e,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                let Event::PermissionAsked { request } = &*event else {
                    continue;
                };
                if request.session_id != session {
                    continue;
                }
                let (core, peer, request) = (core.clone(), peer.clone(), request.clone());
                tokio::spawn(async move {
                    let reply = elicit(&peer, &request).await;
                    // A question already settled (cancelled, or allowed by an
                    // `always` meanwhile) has nothing left to answer.
                    let _ = core.permissions().reply(&request.id, reply).await;
                });
            }
        });
        Bridge {
            _attached: attached,
            task,
        }
    }
}

/// Ask the client; anything but an accepted form is a rejection.
async fn elicit(peer: &Peer<RoleServer>, request: &PermissionRequest) -> PermissionReply {
    let schema = json!({
        "type": "object",
        "properties": {
            "always": {
                "type": "boolean",
                "title": "Always allow this for the rest of the connection",
                "default": false
            }
        }
    });
    let Ok(schema) = serde_json::from_value::<ElicitationSchema>(schema) else {
        return PermissionReply::Reject;
    };
    let message = format!(
        "warden asks: allow `{}` on {}?{}",
        request.permission,
        request.patterns.join(", "),
        request
            .metadata
            .get("tool")
            .and_then(Value::as_str)
            .map(|t| format!(" (tool {t})"))
            .unwrap_or_default()
    );
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    };
    match peer.create_elicitation(params).await {
        Ok(result) => match result.action {
            ElicitationAction::Accept => {
                let always = result
                    .content
                    .as_ref()
                    .and_then(|c| c.get("always"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if always {
                    PermissionReply::Always
                } else {
                    PermissionReply::Once
                }
            }
            _ => PermissionReply::Reject,
        },
        Err(e) => {
            tracing::warn!(error = %e, "the MCP client did not answer a permission question");
            PermissionReply::Reject
        }
    }
}
