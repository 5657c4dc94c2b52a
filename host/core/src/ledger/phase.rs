//! The session's own phases, besides its tool calls' states: when each
//! model request was sent, when its first token came, when its step
//! finished, and each wait before a retry. A trace draws them as the
//! session's lane.

use rusqlite::params;
use serde::{Deserialize, Serialize};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Ledger;
use crate::error::Result;

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

const INSERT_PHASE: &str = "\
    INSERT INTO phase (session_id, seq, message_id, at, kind, detail)
    VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session_id = ?1), ?2, ?3, ?4, ?5)";

impl Ledger {
    /// Record a phase mark of a session.
    pub fn mark_phase(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        at: Millis,
        kind: &PhaseKind,
    ) -> Result<()> {
        let detail = serde_json::to_string(kind)
            .map_err(|e| crate::error::CoreError::Internal(e.to_string()))?;
        // Through the fenced write path: a runner that lost its lease marks nothing.
        self.write(session, |tx| {
            tx.prepare_cached(INSERT_PHASE)?.execute(params![
                session.as_str(),
                message.map(|m| m.as_str()),
                at,
                kind.name(),
                detail
            ])?;
            Ok(())
        })
    }

    /// A session's phase marks, in order. A row this warden cannot read (from
    /// a newer one) is skipped, not fatal: the trace is a view.
    pub fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at, message_id, detail FROM phase WHERE session_id = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![session.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, message_id, detail) = row?;
            let Some(kind) = detail.and_then(|d| serde_json::from_str(&d).ok()) else {
                continue;
            };
            out.push(Phase {
                seq,
                at,
                message_id: message_id.map(MessageId),
                kind,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;

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
