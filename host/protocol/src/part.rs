//! Message parts: the rows a message is made of, written while the model is
//! still streaming so readers see them change live.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Tokens;
use crate::tool_state::ToolState;
use crate::{FinishReason, MessageId, Millis, PartId, SessionId};

/// One part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Part {
    pub id: PartId,
    #[serde(rename = "sessionID", alias = "session_id")]
    pub session_id: SessionId,
    #[serde(rename = "messageID", alias = "message_id")]
    pub message_id: MessageId,
    #[serde(flatten)]
    pub body: PartBody,
}

/// What a part holds, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PartBody {
    /// Text from the user or the model.
    Text {
        text: String,
        /// Added by warden, not typed by the user or streamed by the model.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        synthetic: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<TextTime>,
        /// Streamed by an attempt that failed and was retried: kept in the
        /// ledger, never shown to the model again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ignored: bool,
    },
    /// The model's reasoning (thinking), kept apart from the answer.
    Reasoning {
        text: String,
        /// Provider data needed to send the reasoning back (e.g. a signature).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<TextTime>,
        /// As for text: from a failed attempt, not shown to the model again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ignored: bool,
    },
    /// One tool call and its state.
    Tool {
        /// The model's id for the call; results are matched by it.
        #[serde(rename = "callID", alias = "call_id")]
        call_id: String,
        /// The tool's id.
        tool: String,
        state: ToolState,
        /// Run by the provider itself (e.g. a server-side search), not by warden.
        #[serde(
            default,
            rename = "providerExecuted",
            alias = "provider_executed",
            skip_serializing_if = "std::ops::Not::not"
        )]
        provider_executed: bool,
        /// A call the model never finished making, from an attempt that
        /// failed and was retried: kept for the record, never shown to the
        /// model (the retry makes its own calls).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ignored: bool,
    },
    /// A model step began.
    StepStart {},
    /// A model step ended.
    StepFinish {
        reason: FinishReason,
        tokens: Tokens,
        cost: f64,
    },
    /// Marks where history was summarised; earlier messages are not sent again.
    Compaction {
        auto: bool,
        #[serde(default)]
        overflow: bool,
    },
}

/// When a text or reasoning part started and ended streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextTime {
    pub start: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Millis>,
}

impl PartBody {
    /// The `type` tag: `text`, `reasoning`, `tool`, `step-start`, `step-finish`, `compaction`.
    pub fn kind(&self) -> &'static str {
        match self {
            PartBody::Text { .. } => "text",
            PartBody::Reasoning { .. } => "reasoning",
            PartBody::Tool { .. } => "tool",
            PartBody::StepStart {} => "step-start",
            PartBody::StepFinish { .. } => "step-finish",
            PartBody::Compaction { .. } => "compaction",
        }
    }
}

impl Part {
    /// The tool call's state, for tool parts.
    pub fn tool_state(&self) -> Option<&ToolState> {
        match &self.body {
            PartBody::Tool { state, .. } => Some(state),
            _ => None,
        }
    }

    /// The call id, for tool parts.
    pub fn call_id(&self) -> Option<&str> {
        match &self.body {
            PartBody::Tool { call_id, .. } => Some(call_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_flatten_their_body() {
        let p = Part {
            id: "prt_1".into(),
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
            body: PartBody::Tool {
                call_id: "call_1".into(),
                tool: "read".into(),
                state: ToolState::pending(),
                provider_executed: false,
                ignored: false,
            },
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!({"id": "prt_1", "sessionID": "ses_1", "messageID": "msg_1", "type": "tool",
                   "callID": "call_1", "tool": "read", "state": {"status": "pending", "input": {}, "raw": ""}})
        );
        let back: Part = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
