//! A tool call's state transition written together with the audit rows
//! that caused it, in one transaction: a reader never sees a call that
//! ended without the decisions that ended it, or the reverse.

use rusqlite::params;
use warden_protocol::{Event, Part, PartBody};

use super::{AuditEntry, INSERT_PART_EVENT, Ledger, UPSERT_PART, insert_audit, timeline_body};
use crate::clock::now_ms;
use crate::error::{CoreError, Result};

impl Ledger {
    /// Record a tool part's new state (its row and a timeline event) and
    /// `audit` in one transaction, then publish the part.
    pub fn transition(&self, part: &Part, audit: &[AuditEntry]) -> Result<()> {
        if !matches!(part.body, PartBody::Tool { .. }) {
            return Err(CoreError::Internal(
                "a state transition was written for a part that is not a tool call".into(),
            ));
        }
        let body =
            serde_json::to_string(&part.body).map_err(|e| CoreError::Internal(e.to_string()))?;
        let now = now_ms();
        let status = part.tool_state().map(|s| s.status());
        {
            let mut conn = self.conn();
            let tx = conn.transaction()?;
            tx.prepare_cached(UPSERT_PART)?.execute(params![
                part.id.as_str(),
                part.message_id.as_str(),
                part.session_id.as_str(),
                part.body.kind(),
                part.call_id(),
                status,
                body,
                now
            ])?;
            tx.prepare_cached(INSERT_PART_EVENT)?.execute(params![
                part.session_id.as_str(),
                part.message_id.as_str(),
                part.id.as_str(),
                part.body.kind(),
                part.call_id(),
                status,
                now,
                timeline_body(part)?
            ])?;
            for entry in audit {
                insert_audit(&tx, entry)?;
            }
            tx.commit()?;
        }
        if let Some(held) = self.held().get_mut(&part.session_id)
            && let Ok(m) = held.binary_search_by(|m| m.info.id().cmp(&part.message_id))
        {
            let parts = &mut std::sync::Arc::make_mut(&mut held[m]).parts;
            match parts.binary_search_by(|p| p.id.cmp(&part.id)) {
                Ok(i) => parts[i] = part.clone(),
                Err(i) => parts.insert(i, part.clone()),
            }
        }
        self.bus.publish(Event::PartUpdated {
            part: part.clone(),
            delta: None,
        });
        Ok(())
    }
}
