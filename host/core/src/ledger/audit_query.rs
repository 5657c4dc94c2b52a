//! The audit trail across sessions: what plugins did, and what was
//! refused, filtered the way an operator asks ("what did plugin X do this
//! week, and what was refused").

use rusqlite::types::Value as SqlValue;
use warden_protocol::{MessageId, Millis, SessionId};

use super::{AuditEntry, Ledger};
use crate::error::Result;

/// A class of decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionClass {
    /// Refused: by a rule (`denied`) or by whoever was asked (`asked:reject`).
    Denied,
    /// Asked of a person, whatever the answer (`asked:*`).
    Asked,
    /// Let through: by a rule (`allowed`) or by an answer (`asked:once`, `asked:always`).
    Allowed,
}

impl DecisionClass {
    fn sql(&self) -> &'static str {
        match self {
            DecisionClass::Denied => "decision IN ('denied', 'asked:reject')",
            DecisionClass::Asked => "decision LIKE 'asked:%'",
            DecisionClass::Allowed => "decision IN ('allowed', 'asked:once', 'asked:always')",
        }
    }
}

/// Which audit rows to read. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Rows about any of these subjects (tool ids, `hook:NAME`) …
    pub subjects: Vec<String>,
    /// … or made by a guest with any of these content hashes.
    pub hashes: Vec<String>,
    pub decision: Option<DecisionClass>,
    /// Rows at or after this time.
    pub since: Option<Millis>,
    /// At most this many rows, the newest (0: all).
    pub limit: usize,
}

impl Ledger {
    /// Audit rows of every session matching `filter`, oldest first.
    pub fn audit_query(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        let mut clauses: Vec<String> = Vec::new();
        let mut args: Vec<SqlValue> = Vec::new();
        if !filter.subjects.is_empty() || !filter.hashes.is_empty() {
            let mut any = Vec::new();
            if !filter.subjects.is_empty() {
                any.push(format!(
                    "subject IN ({})",
                    vec!["?"; filter.subjects.len()].join(", ")
                ));
                args.extend(filter.subjects.iter().cloned().map(SqlValue::Text));
            }
            if !filter.hashes.is_empty() {
                any.push(format!(
                    "plugin_hash IN ({})",
                    vec!["?"; filter.hashes.len()].join(", ")
                ));
                args.extend(filter.hashes.iter().cloned().map(SqlValue::Text));
            }
            clauses.push(format!("({})", any.join(" OR ")));
        }
        if let Some(d) = filter.decision {
            clauses.push(d.sql().to_string());
        }
        if let Some(since) = filter.since {
            clauses.push("at >= ?".into());
            args.push(SqlValue::Integer(since));
        }
        let condition = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let limit = if filter.limit == 0 {
            String::new()
        } else {
            format!("LIMIT {}", filter.limit)
        };
        // Newest first for the limit, then turned back to oldest first.
        let sql = format!(
            "SELECT seq, session_id, message_id, call_id, at, stage, subject, plugin_hash, decision, rule, duration_us, outcome
             FROM audit {condition} ORDER BY at DESC, session_id DESC, seq DESC {limit}"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
            Ok(AuditEntry {
                seq: r.get(0)?,
                session_id: SessionId(r.get(1)?),
                message_id: r.get::<_, Option<String>>(2)?.map(MessageId),
                call_id: r.get(3)?,
                at: r.get(4)?,
                stage: r.get(5)?,
                subject: r.get(6)?,
                plugin_hash: r.get(7)?,
                decision: r.get(8)?,
                rule: r.get(9)?,
                duration_us: r.get(10)?,
                outcome: r.get(11)?,
            })
        })?;
        let mut out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        out.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;

    fn row(
        session: &SessionId,
        at: Millis,
        subject: &str,
        hash: Option<&str>,
        decision: &str,
    ) -> AuditEntry {
        AuditEntry {
            seq: 0,
            session_id: session.clone(),
            message_id: None,
            call_id: Some("c".into()),
            at,
            stage: "permission".into(),
            subject: subject.into(),
            plugin_hash: hash.map(str::to_string),
            decision: decision.into(),
            rule: None,
            duration_us: None,
            outcome: Some("ok".into()),
        }
    }

    #[test]
    fn filters_combine_across_sessions() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let a = ledger.create_session("/w", "a").unwrap().id;
        let b = ledger.create_session("/w", "b").unwrap().id;
        ledger
            .audit_all(&[
                row(&a, 10, "read", None, "allowed"),
                row(&a, 20, "read", Some("h1"), "ran"),
                row(&b, 30, "read", None, "denied"),
                row(&b, 40, "write", None, "asked:reject"),
                row(&a, 50, "hook:guard", Some("h2"), "asked:once"),
            ])
            .unwrap();
        let pick = |f: AuditFilter| {
            ledger
                .audit_query(&f)
                .unwrap()
                .into_iter()
                .map(|e| (e.at, e.decision))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(AuditFilter::default()).len(), 5);
        assert_eq!(
            pick(AuditFilter {
                decision: Some(DecisionClass::Denied),
                ..Default::default()
            }),
            vec![(30, "denied".into()), (40, "asked:reject".into())]
        );
        assert_eq!(
            pick(AuditFilter {
                decision: Some(DecisionClass::Allowed),
                since: Some(20),
                ..Default::default()
            }),
            vec![(50, "asked:once".into())]
        );
        assert_eq!(
            pick(AuditFilter {
                subjects: vec!["read".into()],
                hashes: vec!["h2".into()],
                ..Default::default()
            }),
            vec![
                (10, "allowed".into()),
                (20, "ran".into()),
                (30, "denied".into()),
                (50, "asked:once".into())
            ]
        );
        assert_eq!(
            pick(AuditFilter {
                limit: 2,
                ..Default::default()
            }),
            vec![(40, "asked:reject".into()), (50, "asked:once".into())]
        );
    }
}
