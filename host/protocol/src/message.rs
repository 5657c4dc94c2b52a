//! Messages: an `info` header and ordered parts.

use serde::{Deserialize, Serialize};

use crate::part::Part;
use crate::{FinishReason, MessageId, Millis, SessionId};

/// Which provider and model answer a message (OpenCode's `providerID` /
/// `modelID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelRef {
    /// `scripted`, `openai`, `anthropic`, or a provider named in the config.
    #[serde(rename = "providerID")]
    pub provider: String,
    /// The model id at that provider (for `scripted`, the cassette path).
    #[serde(rename = "modelID")]
    pub model: String,
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.provider == "scripted" {
            write!(f, "scripted:{}", self.model)
        } else {
            write!(f, "{}/{}", self.provider, self.model)
        }
    }
}

/// Token counts of a step or a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub reasoning: u64,
    #[serde(default)]
    pub cache: CacheTokens,
}

/// Prompt-cache token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CacheTokens {
    pub read: u64,
    pub write: u64,
}

impl Tokens {
    /// Everything that occupied the context window.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.cache.read + self.cache.write
    }
}

/// Why an assistant message failed: OpenCode's `{"name", "data"}` errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "name", content = "data")]
pub enum MessageError {
    /// The provider refused or failed, and retrying did not help (or could not).
    #[serde(rename = "APIError")]
    Provider {
        message: String,
        #[serde(
            default,
            rename = "statusCode",
            skip_serializing_if = "Option::is_none"
        )]
        status: Option<u16>,
    },
    /// The conversation no longer fits the model's context.
    #[serde(rename = "ContextOverflowError")]
    ContextOverflow { message: String },
    /// Someone cancelled the session while the model was answering.
    #[serde(rename = "MessageAbortedError")]
    Aborted { message: String },
    /// The process running the step stopped before it ended (found on
    /// resume). OpenCode has no such error; its clients show it as an
    /// unknown one with its message.
    #[serde(rename = "MessageInterruptedError")]
    Interrupted { message: String },
    /// The loop stopped before the model answered, and says why: a person
    /// rejected a call's question (or nobody approved it), the model kept
    /// repeating a refused call, or the agent used all its steps. OpenCode
    /// has no such error; its clients show it with its message.
    #[serde(rename = "MessageStoppedError")]
    Stopped { message: String },
}

impl MessageError {
    /// The text of the error.
    pub fn message(&self) -> &str {
        match self {
            MessageError::Provider { message, .. }
            | MessageError::ContextOverflow { message }
            | MessageError::Aborted { message }
            | MessageError::Interrupted { message }
            | MessageError::Stopped { message } => message,
        }
    }
}

/// When a message was created and, for an answer, when it was finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageTime {
    pub created: Millis,
    /// Set when processing ended, successfully or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Millis>,
}

impl MessageTime {
    /// Created at `at`, not finished.
    pub fn at(at: Millis) -> Self {
        MessageTime {
            created: at,
            completed: None,
        }
    }
}

/// Where an answer's tools worked: the session's directory (warden has no
/// separate project root, so both are it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessagePath {
    pub cwd: String,
    pub root: String,
}

impl MessagePath {
    /// Both the working directory and the root are `dir`.
    pub fn of(dir: &str) -> Self {
        MessagePath {
            cwd: dir.to_string(),
            root: dir.to_string(),
        }
    }
}

/// What the user sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserInfo {
    pub id: MessageId,
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    pub time: MessageTime,
    pub agent: String,
    pub model: ModelRef,
}

/// What the model answered in one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssistantInfo {
    pub id: MessageId,
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// The user message this answers.
    #[serde(rename = "parentID")]
    pub parent_id: MessageId,
    pub agent: String,
    /// OpenCode's name for the agent that answered; always the same as `agent`.
    pub mode: String,
    /// `providerID` and `modelID`.
    #[serde(flatten)]
    pub model: ModelRef,
    pub path: MessagePath,
    pub time: MessageTime,
    /// The model's finish reason of its last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishReason>,
    #[serde(default)]
    pub tokens: Tokens,
    #[serde(default)]
    pub cost: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<MessageError>,
    /// This message is a compaction summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
}

/// A message header, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum MessageInfo {
    User(UserInfo),
    Assistant(AssistantInfo),
}

impl MessageInfo {
    pub fn id(&self) -> &MessageId {
        match self {
            MessageInfo::User(u) => &u.id,
            MessageInfo::Assistant(a) => &a.id,
        }
    }

    pub fn session_id(&self) -> &SessionId {
        match self {
            MessageInfo::User(u) => &u.session_id,
            MessageInfo::Assistant(a) => &a.session_id,
        }
    }

    pub fn role(&self) -> &'static str {
        match self {
            MessageInfo::User(_) => "user",
            MessageInfo::Assistant(_) => "assistant",
        }
    }

    pub fn created(&self) -> Millis {
        match self {
            MessageInfo::User(u) => u.time.created,
            MessageInfo::Assistant(a) => a.time.created,
        }
    }
}

/// A message with its parts, in id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageWithParts {
    pub info: MessageInfo,
    pub parts: Vec<Part>,
}

impl AsRef<MessageWithParts> for MessageWithParts {
    fn as_ref(&self) -> &MessageWithParts {
        self
    }
}

impl MessageWithParts {
    /// The concatenated non-synthetic text parts.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for p in &self.parts {
            if let crate::PartBody::Text {
                text,
                synthetic: false,
                ignored: false,
                ..
            } = &p.body
            {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}
