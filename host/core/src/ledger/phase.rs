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
    /// The stored kind (`kind` column).
    fn code(&self) -> i64 {
        match self {
            PhaseKind::ModelRequest { .. } => 0,
            PhaseKind::FirstToken => 1,
            PhaseKind::StepFinish { .. } => 2,
            PhaseKind::RetryWait { .. } => 3,
        }
    }

    /// The stored columns besides the kind: (attempt, until, detail).
    fn columns(&self) -> (Option<u32>, Option<Millis>, Option<&str>) {
        match self {
            PhaseKind::ModelRequest { attempt } => (Some(*attempt), None, None),
            PhaseKind::FirstToken => (None, None, None),
            PhaseKind::StepFinish { reason } => (None, None, Some(reason)),
            PhaseKind::RetryWait {
                attempt,
                until,
                message,
            } => (Some(*attempt), Some(*until), Some(message)),
        }
    }

    /// Back from the stored columns; `None` for a kind this warden does not
    /// know (written by a newer one).
    fn read(
        code: i64,
        attempt: Option<u32>,
        until: Option<Millis>,
        detail: Option<String>,
    ) -> Option<PhaseKind> {
        Some(match code {
            0 => PhaseKind::ModelRequest {
                attempt: attempt.unwrap_or(1),
            },
            1 => PhaseKind::FirstToken,
            2 => PhaseKind::StepFinish {
                reason: detail.unwrap_or_default(),
            },
            3 => PhaseKind::RetryWait {
                attempt: attempt.unwrap_or(1),
                until: until.unwrap_or(0),
                message: detail.unwrap_or_default(),
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

const INSERT_PHASE: &str = "\
    INSERT INTO phase (session, seq, message, at, kind, attempt, until_at, detail)
    SELECT s.key,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session = s.key),
           (SELECT m.key FROM message m WHERE m.session = s.key AND m.id = ?2),
           ?3, ?4, ?5, ?6, ?7
    FROM session s WHERE s.id = ?1";

impl Ledger {
    /// Record phase marks of a session, `(when, what)`, in one transaction.
    pub fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
    ) -> Result<()> {
        if marks.is_empty() {
            return Ok(());
        }
        // Through the fenced write path: a runner that lost its lease marks nothing.
        self.write(session, |tx| {
            let mut insert = tx.prepare_cached(INSERT_PHASE)?;
            for (at, kind) in marks {
                let (attempt, until, detail) = kind.columns();
                insert.execute(params![
                    session.as_str(),
                    message.map(|m| m.as_str()),
                    at,
                    kind.code(),
                    attempt,
                    until,
                    detail
                ])?;
            }
            Ok(())
        })
    }

    /// A session's phase marks, in order. A row this warden cannot read (from
    /// a newer one) is skipped, not fatal: the trace is a view.
    pub fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT p.seq, p.at, m.id, p.kind, p.attempt, p.until_at, p.detail
             FROM phase p JOIN session s ON s.key = p.session
             LEFT JOIN message m ON m.key = p.message
             WHERE s.id = ?1 ORDER BY p.seq",
        )?;
        let rows = stmt.query_map(params![session.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                PhaseKind::read(r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, message_id, kind) = row?;
            let Some(kind) = kind else { continue };
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
        // The message the marks belong to must exist (marks point at its key).
        ledger
            .put_message(&warden_protocol::MessageInfo::User(
                warden_protocol::UserInfo {
                    id: m.clone(),
                    session_id: s.id.clone(),
                    time: warden_protocol::MessageTime::at(0),
                    agent: "build".into(),
                    model: warden_protocol::ModelRef {
                        provider: "scripted".into(),
                        model: "x".into(),
                    },
                },
            ))
            .unwrap();
        let marks: Vec<(i64, PhaseKind)> = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (10 * i as i64, k.clone()))
            .collect();
        ledger.mark_phases(&s.id, Some(&m), &marks[..2]).unwrap();
        ledger.mark_phases(&s.id, Some(&m), &marks[2..]).unwrap();
        let got = ledger.phases(&s.id).unwrap();
        assert!(got.iter().all(|p| p.message_id.as_ref() == Some(&m)));
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
