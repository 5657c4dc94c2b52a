//! The types every part of warden speaks: what the ledger stores, what the
//! bus carries, what model adapters produce and what front ends print.
//!
//! No I/O lives here. Start with [`part`] (message parts and the
//! [`ToolState`](tool_state::ToolState) machine in [`tool_state`]), then
//! [`message`], [`llm`] (the one event stream every provider adapter
//! produces) and [`event`] (what the bus publishes).

pub mod event;
pub mod id;
pub mod llm;
pub mod message;
pub mod part;
pub mod permission;
pub mod session;
pub mod text;
pub mod tool_state;

pub use event::{Envelope, Event, next_event_id};
pub use id::{CallId, MessageId, PartId, SessionId};
pub use llm::{ChatMessage, FinishReason, LlmEvent, LlmRequest, ProviderError, ToolSpec, Usage};
pub use message::{
    AssistantInfo, MessageError, MessageInfo, MessagePath, MessageTime, MessageWithParts, ModelRef,
    Tokens, UserInfo,
};
pub use part::{Part, PartBody};
pub use permission::{Action, PermissionReply, PermissionRequest, PermissionTool, Rule};
pub use session::{SessionInfo, SessionStatus, SessionTime};
pub use tool_state::{ToolState, TransitionError};

/// Milliseconds since the Unix epoch, the unit of every timestamp in the ledger.
pub type Millis = i64;
