//! The session's own phases, besides its tool calls' states: when each
//! model request was sent, when its first token came, when its step
//! finished, and each wait before a retry. A trace draws them as the
//! session's lane.

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

impl PhaseKind {
    /// The stored name (`kind` column).
    pub fn name(&self) -> &'static str {
        match self {
            PhaseKind::ModelRequest { .. } => "model_request",
            PhaseKind::FirstToken => "first_token",
            PhaseKind::StepFinish { .. } => "step_finish",
            PhaseKind::RetryWait { .. } => "retry_wait",
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;
    use crate::ledger::Ledger;

    #[test]
    fn marks_come_back_in_order() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let s = ledger.create_session("/w", "t").unwrap();
        let m = MessageId("msg_1".into());
        let kinds = [
            PhaseKind::ModelRequest { attempt: 1 },
            PhaseKind::RetryWait {
                attempt: 1,
                until: 30,
                message: "overloaded".into(),
            },
            PhaseKind::ModelRequest { attempt: 2 },
            PhaseKind::FirstToken,
            PhaseKind::StepFinish {
                reason: "stop".into(),
            },
        ];
        for (i, k) in kinds.iter().enumerate() {
            ledger
                .mark_phase(&s.id, Some(&m), 10 * i as i64, k)
                .unwrap();
        }
        let got = ledger.phases(&s.id).unwrap();
        assert_eq!(
            got.iter()
                .map(|p| (p.seq, p.at, p.kind.clone()))
                .collect::<Vec<_>>(),
            kinds
                .iter()
                .enumerate()
                .map(|(i, k)| (i as i64 + 1, 10 * i as i64, k.clone()))
                .collect::<Vec<_>>()
        );
    }
}
