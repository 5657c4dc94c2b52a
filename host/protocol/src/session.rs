//! Sessions and their status.

use serde::{Deserialize, Serialize};

use crate::permission::Rule;
use crate::{Millis, SessionId};

/// A session header, in OpenCode's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    pub id: SessionId,
    /// A short name for people; warden uses the id.
    pub slug: String,
    /// warden keeps no projects: every session is in OpenCode's `global` one.
    #[serde(rename = "projectID")]
    pub project_id: String,
    pub title: String,
    /// The working directory its tools see.
    pub directory: String,
    /// The warden version serving it.
    pub version: String,
    /// Rules added for this session (per-prompt tool toggles, `always` answers).
    #[serde(default)]
    pub permission: Vec<Rule>,
    pub time: SessionTime,
}

/// When a session was created and last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionTime {
    pub created: Millis,
    pub updated: Millis,
}

impl SessionInfo {
    /// The project every warden session belongs to.
    pub const PROJECT: &'static str = "global";

    /// A header from what the ledger keeps.
    pub fn new(
        id: SessionId,
        title: String,
        directory: String,
        permission: Vec<Rule>,
        time: SessionTime,
    ) -> Self {
        SessionInfo {
            slug: id.0.clone(),
            id,
            project_id: Self::PROJECT.into(),
            title,
            directory,
            version: env!("CARGO_PKG_VERSION").into(),
            permission,
            time,
        }
    }
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
