//! A tool call's state transition written together with the audit rows
//! that caused it, in one (fenced) transaction: a reader never sees a call
//! that ended without the decisions that ended it, or the reverse.

use warden_protocol::{Part, PartBody};

use super::{AuditEntry, Ledger, PartWrite};
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
        self.put_part_with_audit(part, PartWrite::Changed, audit)
    }
}
