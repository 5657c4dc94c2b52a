//! The audit trail across sessions: what plugins did, and what was
//! refused, filtered the way an operator asks ("what did plugin X do this
//! week, and what was refused").

use warden_protocol::Millis;

use super::{AuditEntry, Ledger};
use crate::error::Result;

/// A class of decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionClass {
    /// Refused: by a rule (`denied`), by whoever was asked (`asked:reject`),
    /// or by a hook that blocked the call (a hook row whose outcome is
    /// `block: …`).
    Denied,
    /// Asked of a person, whatever the answer (`asked:*`).
    Asked,
    /// Let through: by a rule (`allowed`) or by an answer (`asked:once`, `asked:always`).
    Allowed,
}

impl DecisionClass {
    fn covers(&self, e: &AuditEntry) -> bool {
        let decision = e.decision.as_str();
        match self {
            DecisionClass::Denied => {
                matches!(decision, "denied" | "asked:reject")
                    || (e.subject.starts_with("hook:")
                        && e.outcome
                            .as_deref()
                            .is_some_and(|o| o.starts_with("block:")))
            }
            DecisionClass::Asked => decision.starts_with("asked:"),
            DecisionClass::Allowed => matches!(decision, "allowed" | "asked:once" | "asked:always"),
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

impl AuditFilter {
    fn keeps(&self, e: &AuditEntry) -> bool {
        let about = (self.subjects.is_empty() && self.hashes.is_empty())
            || self.subjects.contains(&e.subject)
            || e.plugin_hash
                .as_ref()
                .is_some_and(|h| self.hashes.contains(h));
        about && self.decision.is_none_or(|d| d.covers(e)) && self.since.is_none_or(|t| e.at >= t)
    }
}

impl Ledger {
    /// Audit rows of every session matching `filter`, oldest first. Read
    /// through each session's trail, so it holds whatever way the trail is
    /// stored.
    pub async fn audit_query(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        let mut out = Vec::new();
        for session in self.sessions().await? {
            out.extend(
                self.audit_trail(&session.id)
                    .await?
                    .into_iter()
                    .filter(|e| filter.keeps(e)),
            );
        }
        out.sort_by(|a, b| (a.at, &a.session_id, a.seq).cmp(&(b.at, &b.session_id, b.seq)));
        if filter.limit > 0 && out.len() > filter.limit {
            out.drain(..out.len() - filter.limit);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;
    use warden_protocol::SessionId;

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

    #[tokio::test]
    async fn filters_combine_across_sessions() {
        let ledger = Ledger::in_memory(Bus::new()).unwrap();
        let a = ledger.create_session("/w", "a").await.unwrap().id;
        let b = ledger.create_session("/w", "b").await.unwrap().id;
        ledger
            .audit_all(&[
                row(&a, 10, "read", None, "allowed"),
                row(&a, 20, "read", Some("h1"), "ran"),
                row(&b, 30, "read", None, "denied"),
                row(&b, 40, "write", None, "asked:reject"),
                row(&a, 50, "hook:guard", Some("h2"), "asked:once"),
                AuditEntry {
                    stage: "hook.before".into(),
                    outcome: Some("block: no secrets".into()),
                    ..row(&b, 60, "hook:guard", Some("h2"), "ran")
                },
                // A tool's own output starting with the same word is no block.
                AuditEntry {
                    outcome: Some("block: not a hook".into()),
                    ..row(&b, 70, "read", None, "ran")
                },
            ])
            .await
            .unwrap();
        let pick = async |f: AuditFilter| {
            ledger
                .audit_query(&f)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.at, e.decision))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(AuditFilter::default()).await.len(), 7);
        assert_eq!(
            pick(AuditFilter {
                decision: Some(DecisionClass::Denied),
                ..Default::default()
            })
            .await,
            vec![
                (30, "denied".into()),
                (40, "asked:reject".into()),
                (60, "ran".into())
            ],
            "a hook's block is a refusal"
        );
        assert_eq!(
            pick(AuditFilter {
                decision: Some(DecisionClass::Allowed),
                since: Some(20),
                ..Default::default()
            })
            .await,
            vec![(50, "asked:once".into())]
        );
        assert_eq!(
            pick(AuditFilter {
                subjects: vec!["read".into()],
                hashes: vec!["h2".into()],
                ..Default::default()
            })
            .await,
            vec![
                (10, "allowed".into()),
                (20, "ran".into()),
                (30, "denied".into()),
                (50, "asked:once".into()),
                (60, "ran".into()),
                (70, "ran".into())
            ]
        );
        assert_eq!(
            pick(AuditFilter {
                limit: 2,
                ..Default::default()
            })
            .await,
            vec![(60, "ran".into()), (70, "ran".into())]
        );
    }
}
