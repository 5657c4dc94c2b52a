//! The audit trail of one call, typed: what was checked or run ([`Stage`]),
//! what was decided ([`Decision`]) and how it ended ([`Outcome`]). Their
//! `Display` is the text stored in the ledger's `audit` rows, written in
//! one place so a row never drifts from what a reader searches for.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use warden_protocol::PermissionReply;

use crate::clock::now_ms;
use crate::ledger::AuditEntry;
use crate::permission::Refusal;
use crate::tool::CallContext;

/// The most audit rows one call writes; past it, one row counts the rest.
pub const MAX_AUDIT_ROWS: usize = 64;

/// Where in the boundary a row was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The front end that drives the session (see `caller.rs`).
    Caller,
    /// The call's own permission (and warden's protected files).
    Permission,
    /// A before hook, or the check whether it may see the call.
    Before,
    /// The tool guest.
    Tool,
    /// An after hook, or the check whether it may see the call.
    After,
    /// A question to whoever is attached, or a guest's own ask.
    Ask,
    /// An HTTP request a guest is about to send.
    Request,
    /// What a guest printed.
    Stdout,
    Stderr,
    /// The trail itself (a row saying how many were not kept).
    Audit,
}

impl Stage {
    /// The stage of a guest's output stream by its WIT name.
    pub fn of_stream(stream: &str) -> Stage {
        if stream == "stdout" {
            Stage::Stdout
        } else {
            Stage::Stderr
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Caller => "caller",
            Stage::Permission => "permission",
            Stage::Before => "before",
            Stage::Tool => "tool",
            Stage::After => "after",
            Stage::Ask => "ask",
            Stage::Request => "request",
            Stage::Stdout => "stdout",
            Stage::Stderr => "stderr",
            Stage::Audit => "audit",
        })
    }
}

/// What was decided at a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A front end made the call (on its prompt's behalf).
    Called,
    /// A rule allowed it.
    Allowed,
    /// A rule denied it.
    Denied,
    /// A person (or the absence of one) answered.
    Asked(PermissionReply),
    /// A guest ran.
    Ran,
    /// A guest printed.
    Printed,
    /// The trail went over [`MAX_AUDIT_ROWS`].
    Truncated,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Called => f.write_str("called"),
            Decision::Allowed => f.write_str("allowed"),
            Decision::Denied => f.write_str("denied"),
            Decision::Asked(r) => write!(
                f,
                "asked:{}",
                match r {
                    PermissionReply::Once => "once",
                    PermissionReply::Always => "always",
                    PermissionReply::Reject => "reject",
                }
            ),
            Decision::Ran => f.write_str("ran"),
            Decision::Printed => f.write_str("printed"),
            Decision::Truncated => f.write_str("truncated"),
        }
    }
}

/// How a stage ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed, or ran to the end.
    Ok,
    /// Refused: the call (or the request) does not go on.
    Refused,
    /// A hook an explicit rule switched off.
    Skipped,
    /// A before hook let the call through.
    Allow,
    /// An after hook kept the output.
    Keep,
    /// A hook rewrote the arguments or the output.
    Rewrite,
    /// A before hook blocked the call, for this reason.
    Block(String),
    /// A before hook asked for approval, for this reason.
    AskFor(String),
    /// A guest failed with this error.
    Failed(String),
    /// Free text: what a guest printed, or how many rows were dropped.
    Said(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Refused => f.write_str("refused"),
            Outcome::Skipped => f.write_str("skipped"),
            Outcome::Allow => f.write_str("allow"),
            Outcome::Keep => f.write_str("keep"),
            Outcome::Rewrite => f.write_str("rewrite"),
            Outcome::Block(reason) => write!(f, "block: {reason}"),
            Outcome::AskFor(reason) => write!(f, "ask: {reason}"),
            Outcome::Failed(e) | Outcome::Said(e) => f.write_str(e),
        }
    }
}

/// One row, before it knows which call it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub stage: Stage,
    /// What was called or checked: `read` (tool), `hook:name`, `guest:net`, ...
    pub subject: String,
    pub plugin_hash: Option<String>,
    pub decision: Decision,
    /// The deciding rule, or the patterns a question was about.
    pub rule: Option<String>,
    pub elapsed: Option<Duration>,
    pub outcome: Outcome,
}

impl Row {
    pub fn new(
        stage: Stage,
        subject: impl Into<String>,
        decision: Decision,
        outcome: Outcome,
    ) -> Row {
        Row {
            stage,
            subject: subject.into(),
            plugin_hash: None,
            decision,
            rule: None,
            elapsed: None,
            outcome,
        }
    }

    pub fn rule(mut self, rule: impl Into<String>) -> Row {
        self.rule = Some(rule.into());
        self
    }

    /// How long a question waited for its answer.
    pub fn waited(mut self, elapsed: Duration) -> Row {
        self.elapsed = Some(elapsed);
        self
    }

    pub fn guest(mut self, hash: &str, elapsed: Option<Duration>) -> Row {
        self.plugin_hash = Some(hash.to_string());
        self.elapsed = elapsed;
        self
    }
}

/// The rows of one call, collected while it runs and written with the
/// call's terminal state, in one transaction. Cheap to clone (shared).
#[derive(Clone)]
pub struct Trail {
    ctx: Arc<CallContext>,
    rows: Arc<Mutex<Rows>>,
}

#[derive(Default)]
struct Rows {
    entries: Vec<AuditEntry>,
    dropped: usize,
    /// The first question of this call that a person (or the deadline)
    /// refused: what may stop the loop (see [`crate::boundary::Report`]).
    refusal: Option<Refusal>,
}

impl Trail {
    pub fn new(ctx: &CallContext) -> Trail {
        Trail {
            ctx: Arc::new(ctx.clone()),
            rows: Arc::default(),
        }
    }

    /// Note that a question of this call ended without a yes, and why
    /// (the first such answer is kept).
    pub fn refused(&self, why: Refusal) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.refusal.get_or_insert(why);
    }

    /// The first question of this call that ended without a yes, if any.
    pub fn refusal(&self) -> Option<Refusal> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).refusal
    }

    /// Add a row; past [`MAX_AUDIT_ROWS`] it is only counted.
    pub fn push(&self, row: Row) {
        let entry = AuditEntry {
            seq: 0,
            session_id: self.ctx.session_id.clone(),
            message_id: Some(self.ctx.message_id.clone()),
            call_id: Some(self.ctx.call_id.to_string()),
            at: now_ms(),
            stage: row.stage.to_string(),
            subject: row.subject,
            plugin_hash: row.plugin_hash,
            decision: row.decision.to_string(),
            rule: row.rule,
            duration_us: row.elapsed.map(|d| d.as_micros() as i64),
            outcome: Some(row.outcome.to_string()),
        };
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if rows.entries.len() < MAX_AUDIT_ROWS {
            rows.entries.push(entry);
        } else {
            rows.dropped += 1;
        }
    }

    /// Everything collected so far (the trail is left empty), with one row
    /// saying how many were not kept, so the trail stays honest.
    pub fn take(&self) -> Vec<AuditEntry> {
        let mut rows = std::mem::take(&mut *self.rows.lock().unwrap_or_else(|p| p.into_inner()));
        if rows.dropped > 0
            && let Some(last) = rows.entries.last().cloned()
        {
            rows.entries.push(AuditEntry {
                stage: Stage::Audit.to_string(),
                subject: "trail".into(),
                plugin_hash: None,
                decision: Decision::Truncated.to_string(),
                rule: None,
                duration_us: None,
                outcome: Some(
                    Outcome::Said(format!(
                        "{} more entries of this call were not recorded (at most {MAX_AUDIT_ROWS} per call)",
                        rows.dropped
                    ))
                    .to_string(),
                ),
                ..last
            });
        }
        rows.entries
    }
}
