//! MCP both ways, against real counterparts: warden's MCP server driven by
//! rmcp's client, the Python reference SDK and OpenCode; an MCP server from
//! npm used as a tool inside a warden session.

pub(crate) mod deps;
mod in_session;
mod opencode;
mod remote;
mod server_python;
mod server_rmcp;

use warden_core::ledger::AuditEntry;

/// (call, stage, subject, decision, outcome) of each audit row.
pub fn audit_rows(trail: &[AuditEntry]) -> Vec<(String, String, String, String, String)> {
    trail
        .iter()
        .map(|a| {
            (
                a.call_id.clone().unwrap_or_default(),
                a.stage.clone(),
                a.subject.clone(),
                a.decision.clone(),
                a.outcome.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// A row, for comparing with [`audit_rows`].
pub fn row(
    call: &str,
    stage: &str,
    subject: &str,
    decision: &str,
    outcome: &str,
) -> (String, String, String, String, String) {
    (
        call.into(),
        stage.into(),
        subject.into(),
        decision.into(),
        outcome.into(),
    )
}
