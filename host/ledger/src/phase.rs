//! The session's own phases, besides its tool calls' states: when each
//! model request was sent, when its first token came, when its step
//! finished, and each wait before a retry. A trace draws them as the
//! session's lane. Every backend stores a mark the same way: a numeric kind
//! and three columns ([`PhaseKind::to_row`], [`PhaseKind::from_row`]); the
//! SQL is each backend's.

use serde::{Deserialize, Serialize};
use warden_protocol::{MessageId, Millis};

/// What a phase mark records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PhaseKind {
    /// A request to the model was sent (attempt 1, 2, … of the step).
    ModelRequest { attempt: u32 },
    /// The model's first token (or other event) of the request arrived.
    FirstToken,
    /// The model finished its step (`stop`, `tool-calls`, …).
    StepFinish { reason: String },
    /// The request failed and the loop waits until `until` before retrying.
    RetryWait {
        attempt: u32,
        until: Millis,
        message: String,
    },
}

/// A mark as a backend stores it: the kind's number and its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseRow<'a> {
    pub code: i32,
    pub attempt: Option<i64>,
    pub until: Option<Millis>,
    pub detail: Option<&'a str>,
}

impl PhaseKind {
    /// The columns a backend stores.
    pub fn to_row(&self) -> PhaseRow<'_> {
        let (code, attempt, until, detail) = match self {
            PhaseKind::ModelRequest { attempt } => (0, Some(i64::from(*attempt)), None, None),
            PhaseKind::FirstToken => (1, None, None, None),
            PhaseKind::StepFinish { reason } => (2, None, None, Some(reason.as_str())),
            PhaseKind::RetryWait {
                attempt,
                until,
                message,
            } => (
                3,
                Some(i64::from(*attempt)),
                Some(*until),
                Some(message.as_str()),
            ),
        };
        PhaseRow {
            code,
            attempt,
            until,
            detail,
        }
    }

    /// Back from the stored columns; `None` for a kind this warden does not
    /// know (written by a newer one).
    pub fn from_row(row: PhaseRow<'_>) -> Option<PhaseKind> {
        let attempt = row.attempt.and_then(|a| u32::try_from(a).ok()).unwrap_or(1);
        let detail = || row.detail.unwrap_or_default().to_string();
        Some(match row.code {
            0 => PhaseKind::ModelRequest { attempt },
            1 => PhaseKind::FirstToken,
            2 => PhaseKind::StepFinish { reason: detail() },
            3 => PhaseKind::RetryWait {
                attempt,
                until: row.until.unwrap_or(0),
                message: detail(),
            },
            _ => return None,
        })
    }
}

/// One recorded phase mark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub seq: i64,
    pub at: Millis,
    pub message_id: Option<MessageId>,
    #[serde(flatten)]
    pub kind: PhaseKind,
}
