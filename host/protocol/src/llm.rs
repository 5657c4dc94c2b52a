//! The one event stream every model adapter produces, and the one request
//! shape every adapter consumes. Adding a provider never touches the
//! processor: it only maps its wire protocol onto these types.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{CacheTokens, Tokens};

/// Why the model stopped a step, normalised across providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// A natural end of the answer.
    Stop,
    /// The output limit was reached.
    Length,
    /// The model wants tool results before it goes on.
    ToolCalls,
    /// The provider filtered the output.
    ContentFilter,
    /// The provider reported an error as its finish reason.
    Error,
    /// A reason this version does not know.
    Other,
    /// The stream carried no reason.
    Unknown,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::ContentFilter => "content-filter",
            FinishReason::Error => "error",
            FinishReason::Other => "other",
            FinishReason::Unknown => "unknown",
        }
    }
}

/// Token usage of a step as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub reasoning: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    /// The provider's own usage object, unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<Value>,
}

impl Usage {
    /// As ledger token counts.
    pub fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input,
            output: self.output,
            reasoning: self.reasoning,
            cache: CacheTokens {
                read: self.cache_read,
                write: self.cache_write,
            },
        }
    }
}

/// What kind of failure a provider reported; decides whether to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// HTTP 429 or a rate-limit error event.
    RateLimited,
    /// The provider said it is overloaded.
    Overloaded,
    /// HTTP 5xx.
    Server,
    /// The connection failed or was reset.
    Network,
    /// The stream ended before its finish.
    Truncated,
    /// The request does not fit the model's context window.
    ContextOverflow,
    /// Missing or refused credentials.
    Auth,
    /// The provider rejected the request (HTTP 4xx other than the above).
    BadRequest,
    /// The provider sent something that cannot be parsed.
    Malformed,
    /// Anything else (including a cassette that ran out of turns).
    Other,
}

/// A provider failure, before or during a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProviderError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long the provider asked us to wait, if it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ProviderError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
            status: None,
            retry_after_ms: None,
        }
    }

    /// Whether waiting and asking again may succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::RateLimited
                | ErrorKind::Overloaded
                | ErrorKind::Server
                | ErrorKind::Network
                | ErrorKind::Truncated
        )
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} (HTTP {s})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// One event of a model's stream. Ids tie deltas to their start and end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum LlmEvent {
    /// The response began.
    Start,
    /// A model step began.
    StartStep,
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        text: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        text: String,
    },
    /// `metadata` carries what must be sent back with the reasoning (e.g. a signature).
    ReasoningEnd {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    /// The model started a tool call.
    ToolInputStart {
        call_id: String,
        name: String,
    },
    /// More of the call's argument text.
    ToolInputDelta {
        call_id: String,
        delta: String,
    },
    ToolInputEnd {
        call_id: String,
    },
    /// The call is complete. `input` is the raw argument text; the processor
    /// parses it, so invalid JSON becomes a tool error, not a stream error.
    ToolCall {
        call_id: String,
        name: String,
        input: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        provider_executed: bool,
    },
    /// A result for a call (from the host, or a provider-executed tool).
    ToolResult {
        call_id: String,
        output: String,
        #[serde(default)]
        title: String,
        #[serde(default)]
        metadata: Value,
    },
    /// A failure for a call.
    ToolError {
        call_id: String,
        error: String,
    },
    /// A model step ended.
    FinishStep {
        reason: FinishReason,
        /// The provider's own word for it (`end_turn`, `tool_calls`, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_reason: Option<String>,
        usage: Usage,
    },
    /// The response ended.
    Finish {
        reason: FinishReason,
        usage: Usage,
    },
    /// The provider failed mid-stream.
    Error {
        error: ProviderError,
    },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    User {
        content: Vec<UserContent>,
    },
    Assistant {
        content: Vec<AssistantContent>,
    },
    /// Results of the tool calls of the assistant message just before.
    Tool {
        content: Vec<ToolResultContent>,
    },
}

/// Content of a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UserContent {
    Text { text: String },
}

/// Content of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum AssistantContent {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    ToolCall {
        call_id: String,
        name: String,
        input: Value,
    },
}

/// The result of one tool call, paired with it by `call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolResultContent {
    pub call_id: String,
    pub name: String,
    pub output: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// Everything a provider needs for one model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LlmRequest {
    /// The model id at the provider.
    pub model: String,
    pub system: Vec<String>,
    /// Shared, not copied: a long session's history is converted once and
    /// each later request only adds its new messages.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<ChatMessage>))]
    pub messages: Conversation,
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

/// The conversation of a request, shared between the requests of one loop.
///
/// Taking it for a request is one reference count, not a copy of every
/// message: the loop keeps its conversation and extends it in place each
/// round ([`Conversation::make_mut`] copies only while an earlier request
/// still holds it). Reads see the messages as a `Vec`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation(Arc<Vec<Arc<ChatMessage>>>);

impl Conversation {
    /// The messages to change: in place when nothing else holds them, else
    /// a copy of the list (each message is shared, never copied).
    pub fn make_mut(&mut self) -> &mut Vec<Arc<ChatMessage>> {
        Arc::make_mut(&mut self.0)
    }
}

impl std::ops::Deref for Conversation {
    type Target = Vec<Arc<ChatMessage>>;
    fn deref(&self) -> &Vec<Arc<ChatMessage>> {
        &self.0
    }
}

impl std::ops::DerefMut for Conversation {
    fn deref_mut(&mut self) -> &mut Vec<Arc<ChatMessage>> {
        self.make_mut()
    }
}

impl From<Vec<Arc<ChatMessage>>> for Conversation {
    fn from(messages: Vec<Arc<ChatMessage>>) -> Conversation {
        Conversation(Arc::new(messages))
    }
}

impl FromIterator<Arc<ChatMessage>> for Conversation {
    fn from_iter<I: IntoIterator<Item = Arc<ChatMessage>>>(iter: I) -> Conversation {
        Conversation(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a Conversation {
    type Item = &'a Arc<ChatMessage>;
    type IntoIter = std::slice::Iter<'a, Arc<ChatMessage>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for Conversation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Conversation, D::Error> {
        Vec::<Arc<ChatMessage>>::deserialize(d).map(Conversation::from)
    }
}

impl LlmRequest {
    /// The system prompt's non-empty parts, in order.
    pub fn system_parts(&self) -> Vec<&str> {
        self.system
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect()
    }
}
