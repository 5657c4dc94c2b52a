//! Permission rules and questions, as stored and as sent over the bus.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{CallId, MessageId, SessionId};

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// One rule: for `permission` (a tool id, `doom_loop`, ...; glob) and
/// `pattern` (derived from the call's arguments; glob), do `action`.
/// Among the rules that match, the last one wins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rule {
    pub permission: String,
    pub pattern: String,
    pub action: Action,
}

/// A question for whoever is attached (OpenCode's `permission.asked`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermissionRequest {
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    pub permission: String,
    pub patterns: Vec<String>,
    /// Patterns an `always` answer would allow from now on.
    pub always: Vec<String>,
    /// What the question is about (tool, arguments, reason).
    pub metadata: Value,
    /// The tool call asking, when a tool call asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<PermissionTool>,
}

/// Which tool call a question is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermissionTool {
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    #[serde(rename = "callID")]
    pub call_id: CallId,
}

impl PermissionRequest {
    /// The call id, when a tool call asks.
    pub fn call_id(&self) -> Option<&str> {
        self.tool.as_ref().map(|t| t.call_id.as_str())
    }
}

/// An answer to a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PermissionReply {
    /// Allow this once.
    Once,
    /// Allow this and the same patterns for the rest of the session.
    Always,
    /// Refuse.
    Reject,
}
