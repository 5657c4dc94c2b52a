//! The audit trail in PostgreSQL: one row per entry, numbered per session.
//! (SQLite packs a tool call's entries into one row; both read back the
//! same entries, numbered from 1.)

use deadpool_postgres::{GenericClient, Transaction};
use warden_protocol::{MessageId, SessionId};

use super::Result;
use crate::AuditEntry;

/// An entry appended; `$12` its number, or NULL for the session's next.
pub const INSERT: &str = "INSERT INTO audit (session_id, seq, message_id, call_id, at, stage, subject,
                            plugin_hash, decision, rule, duration_us, outcome)
         SELECT s.id,
                COALESCE($12, (SELECT COALESCE(MAX(seq), 0) + 1 FROM audit WHERE session_id = s.id)),
                (SELECT m.id FROM message m WHERE m.session_id = s.id AND m.id = $2),
                $3, $4, $5, $6, $7, $8, $9, $10, $11
         FROM session s WHERE s.id = $1";

/// Append `entries` (the caller holds the session's row lock). An entry's
/// message is kept only if it is in the ledger, as SQLite keeps it; an
/// entry of a session not in the ledger is not written.
///
/// The entries go out in one flight (pipelined, in order) once the
/// statement is prepared on this connection.
pub async fn insert(tx: &Transaction<'_>, entries: &[AuditEntry]) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    tx.prepare_cached(INSERT).await?;
    for done in futures::future::join_all(entries.iter().map(|e| insert_one(tx, e, None))).await {
        done?;
    }
    Ok(())
}

/// One entry; `seq` given (an import) or the session's next.
pub async fn insert_one(tx: &Transaction<'_>, e: &AuditEntry, seq: Option<i64>) -> Result<()> {
    tx.execute(
        &tx.prepare_cached(INSERT).await?,
        &[
            &e.session_id.as_str(),
            &e.message_id.as_ref().map(|m| m.as_str()),
            &e.call_id,
            &e.at,
            &e.stage,
            &e.subject,
            &e.plugin_hash,
            &e.decision,
            &e.rule,
            &e.duration_us,
            &e.outcome,
            &seq,
        ],
    )
    .await?;
    Ok(())
}

/// The session's trail, entry by entry, numbered from 1.
pub async fn read(c: &impl GenericClient, session: &SessionId) -> Result<Vec<AuditEntry>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT message_id, call_id, at, stage, subject, plugin_hash, decision, rule,
                    duration_us, outcome
             FROM audit WHERE session_id = $1 ORDER BY seq",
            )
            .await?,
            &[&session.as_str()],
        )
        .await?;
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, r)| AuditEntry {
            seq: i as i64 + 1,
            session_id: session.clone(),
            message_id: r.get::<_, Option<String>>(0).map(MessageId),
            call_id: r.get(1),
            at: r.get(2),
            stage: r.get(3),
            subject: r.get(4),
            plugin_hash: r.get(5),
            decision: r.get(6),
            rule: r.get(7),
            duration_us: r.get(8),
            outcome: r.get(9),
        })
        .collect())
}
