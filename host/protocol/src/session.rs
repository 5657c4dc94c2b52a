//! Sessions and their status.

use serde::{Deserialize, Serialize};

use crate::permission::Rule;
use crate::{Millis, SessionId};

/// A session header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    pub id: SessionId,
    pub title: String,
    /// The working directory its tools see.
    pub directory: String,
    /// Rules added for this session (per-prompt tool toggles, `always` answers).
    #[serde(default)]
    pub permission: Vec<Rule>,
    pub created: Millis,
    pub updated: Millis,
}

/// What a session is doing. A session-level signal, separate from tool
/// parts: `idle` does not mean a tool completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SessionStatus {
    Idle,
    Busy,
    /// Waiting before retrying the model.
    Retry {
        attempt: u32,
        message: String,
        /// When the next attempt starts (ms since epoch).
        next: Millis,
    },
}
