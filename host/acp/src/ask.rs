//! Permission questions as `session/request_permission`.
//!
//! While a prompt runs, its connection is attached to the session like a
//! terminal or an HTTP client: a question the rules turn into `ask` is
//! sent to the editor with the protocol's four options, and the answer
//! goes through the same broker as every other front end's:
//!
//! - allow once → `once`;
//! - allow always → `always`: literal allow rules for the session, only
//!   for the question's literal patterns (offered only when there is one);
//! - reject once → `reject`;
//! - reject always → `reject`, and literal deny rules for the session.
//!
//! An editor that cannot ask (it answers with an error, an option warden
//! did not offer, or an unreadable answer) gets what an unattended session
//! gets: the call is refused as one nobody could approve. A `cancelled`
//! outcome (the prompt was cancelled) is a refusal too.

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SessionId, SessionNotification, SessionUpdate, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields,
};
use warden_core::Core;
use warden_core::permission::policy::is_literal;
use warden_protocol::{PermissionReply, PermissionRequest};

use crate::rpc::Peer;

const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";
const REJECT_ALWAYS: &str = "reject_always";

/// What "always" would cover: the question's literal patterns.
fn remembered(request: &PermissionRequest) -> Vec<&str> {
    if !is_literal(&request.permission) {
        return Vec::new();
    }
    request
        .always
        .iter()
        .filter(|p| is_literal(p))
        .map(String::as_str)
        .collect()
}

/// The options offered for a question.
pub fn options(request: &PermissionRequest) -> Vec<PermissionOption> {
    let mut out = vec![PermissionOption::new(
        ALLOW_ONCE,
        "Allow once",
        PermissionOptionKind::AllowOnce,
    )];
    let always = remembered(request);
    if !always.is_empty() {
        let what = format!("`{}` on {}", request.permission, always.join(", "));
        out.push(PermissionOption::new(
            ALLOW_ALWAYS,
            format!("Always allow {what} in this session"),
            PermissionOptionKind::AllowAlways,
        ));
        out.push(PermissionOption::new(
            REJECT_ONCE,
            "Reject",
            PermissionOptionKind::RejectOnce,
        ));
        out.push(PermissionOption::new(
            REJECT_ALWAYS,
            format!("Always reject {what} in this session"),
            PermissionOptionKind::RejectAlways,
        ));
    } else {
        out.push(PermissionOption::new(
            REJECT_ONCE,
            "Reject",
            PermissionOptionKind::RejectOnce,
        ));
    }
    out
}

/// Ask the editor and hand its answer to the broker. A question of no tool
/// call was shown as a call of its own (`synthetic`); it ends with the answer.
pub async fn ask(
    peer: Peer,
    core: Core,
    request: PermissionRequest,
    call: ToolCallUpdate,
    synthetic: bool,
) {
    let call_id = call.tool_call_id.clone();
    let params = RequestPermissionRequest::new(
        SessionId::new(request.session_id.0.as_str()),
        call,
        options(&request),
    );
    let answer = peer.request("session/request_permission", params).await;
    let permissions = core.permissions();
    let chosen = match answer {
        Ok(value) => match serde_json::from_value::<RequestPermissionResponse>(value) {
            Ok(response) => match response.outcome {
                RequestPermissionOutcome::Cancelled => Some(REJECT_ONCE.to_string()),
                RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
                _ => None,
            },
            Err(e) => {
                tracing::warn!(error = %e, "the ACP client's permission answer is unreadable");
                None
            }
        },
        Err(e) => {
            tracing::warn!(code = i32::from(e.code), message = %e.message,
                "the ACP client could not ask about a permission");
            None
        }
    };
    let offered = options(&request);
    let reply = |r: PermissionReply| permissions.reply(&request.id, r);
    let settled = match chosen.as_deref() {
        Some(id) if offered.iter().any(|o| o.option_id.0.as_ref() == id) => match id {
            ALLOW_ONCE => reply(PermissionReply::Once).await.map(|()| true),
            ALLOW_ALWAYS => reply(PermissionReply::Always).await.map(|()| true),
            REJECT_ALWAYS => permissions.reject_always(&request.id).await.map(|()| false),
            _ => reply(PermissionReply::Reject).await.map(|()| false),
        },
        other => {
            if let Some(id) = other {
                tracing::warn!(option = %id, "the ACP client chose an option warden did not offer");
            }
            permissions.unanswerable(&request.id);
            Ok(false)
        }
    };
    let allowed = match settled {
        Ok(allowed) => allowed,
        Err(e) => {
            // Settled meanwhile (the prompt was cancelled, the deadline passed).
            tracing::debug!(error = %e, "a permission answer came too late");
            false
        }
    };
    if synthetic {
        let status = if allowed {
            ToolCallStatus::Completed
        } else {
            ToolCallStatus::Failed
        };
        peer.notify(
            "session/update",
            SessionNotification::new(
                SessionId::new(request.session_id.0.as_str()),
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id,
                    ToolCallUpdateFields::new().status(status),
                )),
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(permission: &str, always: &[&str]) -> PermissionRequest {
        serde_json::from_value(
            json!({"id": "per_1", "sessionID": "ses_1", "permission": permission,
            "patterns": always, "always": always, "metadata": {}}),
        )
        .unwrap()
    }

    fn kinds(r: &PermissionRequest) -> Vec<String> {
        options(r)
            .iter()
            .map(|o| {
                serde_json::to_value(o.kind)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn always_is_offered_only_for_what_a_literal_rule_can_remember() {
        assert_eq!(
            kinds(&request("read", &["notes.txt"])),
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
        assert_eq!(
            kinds(&request("read", &["src/*"])),
            ["allow_once", "reject_once"]
        );
        assert_eq!(
            kinds(&request("re*d", &["a.txt"])),
            ["allow_once", "reject_once"]
        );
        let labels: Vec<String> = options(&request("edit", &["a.txt", "b/*"]))
            .iter()
            .map(|o| o.name.clone())
            .collect();
        assert_eq!(labels[1], "Always allow `edit` on a.txt in this session");
    }
}
