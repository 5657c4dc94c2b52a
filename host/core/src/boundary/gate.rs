//! The gate: one place where a question about a permission is settled by
//! the rules or put to whoever is attached, and where the answer is
//! audited. The tool call, the hooks' own permissions, a guest's `ask` and
//! the doom-loop guard all come through [`decide`].

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use warden_protocol::{
    Action, PermissionReply, PermissionRequest, PermissionTool, Rule, SessionId,
};

use super::audit::{Decision, Outcome, Row, Stage, Trail};
use crate::ledger::Ledger;
use std::sync::Arc;

use crate::permission::{Evaluation, Permissions, Policy, Refusal};
use crate::tool::CallContext;

/// The rules a call is decided by: the agent's policy, fixed for the
/// call, and the session's rules, read again at every decision, so an
/// `always` answered earlier in the same step applies to the next question
/// at once.
#[derive(Debug, Clone)]
pub struct Rules {
    policy: Arc<Policy>,
    session: SessionId,
}

impl Rules {
    pub fn new(policy: Arc<Policy>, session: SessionId) -> Rules {
        Rules { policy, session }
    }

    /// The agent's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The session's own rules as they are now.
    pub async fn session(&self, ledger: &Ledger) -> Result<Arc<[Rule]>, String> {
        ledger
            .session_rules(&self.session)
            .await
            .map_err(|e| e.to_string())
    }

    /// [`Policy::evaluate_all`] with the session's rules as they are now.
    pub async fn evaluate(
        &self,
        ledger: &Ledger,
        permission: &str,
        patterns: &[String],
    ) -> Result<Evaluation, String> {
        let session = self.session(ledger).await?;
        Ok(self.policy.evaluate_all(permission, patterns, &session))
    }
}

/// What a question shows whoever is asked: built only when someone is, so
/// a call a rule settles copies none of its arguments for it.
pub struct Metadata<'a>(Box<dyn FnOnce() -> Value + Send + 'a>);

impl<'a> Metadata<'a> {
    pub fn new(build: impl FnOnce() -> Value + Send + 'a) -> Metadata<'a> {
        Metadata(Box::new(build))
    }

    /// Metadata already built (a guest's own question brings it).
    pub fn of(value: Value) -> Metadata<'a> {
        Metadata::new(move || value)
    }
}

impl std::fmt::Debug for Metadata<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metadata(built when asked)")
    }
}

/// One question for the gate, and how its answer is audited.
#[derive(Debug)]
pub struct Question<'a> {
    pub permission: String,
    pub patterns: Vec<String>,
    /// Shown to whoever is asked.
    pub metadata: Metadata<'a>,
    /// The stage and subject of the row written when a rule decides.
    pub stage: Stage,
    pub subject: String,
    pub plugin_hash: Option<String>,
    /// The subject of the row written when a person is asked.
    pub asked_as: String,
    /// How a denial ends ([`Outcome::Refused`], or [`Outcome::Skipped`] for
    /// a hook an operator switched off).
    pub on_deny: Outcome,
    /// Write no row when a rule decides (only a question is worth one).
    pub quiet: bool,
}

/// What the gate decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A rule allowed it, or the answer was `once` / `always`.
    Allowed,
    /// A rule denied it.
    Denied { rule: String },
    /// It was asked about and not approved.
    Rejected {
        /// Why: nobody attached, a person said no, the deadline passed, the
        /// last watcher left or the session was aborted.
        why: Refusal,
    },
}

/// What a decision needs besides the question.
pub struct Gate<'a> {
    pub permissions: &'a Permissions,
    pub trail: &'a Trail,
    pub ctx: &'a CallContext,
    pub cancel: &'a CancellationToken,
}

/// Settle `question` by the evaluation of the rules, asking when they say
/// `ask`, and audit the decision.
pub async fn decide(gate: &Gate<'_>, question: Question<'_>, eval: Evaluation) -> Verdict {
    let rule = eval.describe();
    match eval.action {
        Action::Allow => {
            if !question.quiet {
                gate.trail
                    .push(settled(&question, Decision::Allowed, Outcome::Ok, &rule));
            }
            Verdict::Allowed
        }
        Action::Deny => {
            if !question.quiet {
                let outcome = question.on_deny.clone();
                gate.trail
                    .push(settled(&question, Decision::Denied, outcome, &rule));
            }
            Verdict::Denied { rule }
        }
        Action::Ask => {
            let patterns = question.patterns.join(" ");
            let request = PermissionRequest {
                id: String::new(),
                session_id: gate.ctx.session_id.clone(),
                permission: question.permission.clone(),
                always: literal(&question.patterns),
                patterns: question.patterns,
                metadata: (question.metadata.0)(),
                tool: Some(PermissionTool {
                    message_id: gate.ctx.message_id.clone(),
                    call_id: gate.ctx.call_id.clone(),
                }),
            };
            let asked = std::time::Instant::now();
            let answer = gate.permissions.ask_why(request, gate.cancel).await;
            let reply = answer.reply;
            let refused = reply == PermissionReply::Reject;
            gate.trail.push(
                Row::new(
                    Stage::Ask,
                    question.asked_as,
                    Decision::Asked(reply),
                    if refused {
                        Outcome::Refused
                    } else {
                        Outcome::Ok
                    },
                )
                .rule(patterns)
                // How long the question waited: the trace shows it apart from running.
                .waited(asked.elapsed()),
            );
            if refused {
                let why = answer.refusal.unwrap_or(Refusal::Rejected);
                gate.trail.refused(why);
                Verdict::Rejected { why }
            } else {
                Verdict::Allowed
            }
        }
    }
}

fn settled(q: &Question<'_>, decision: Decision, outcome: Outcome, rule: &str) -> Row {
    let mut row = Row::new(q.stage, q.subject.clone(), decision, outcome).rule(rule);
    row.plugin_hash = q.plugin_hash.clone();
    row
}

/// The patterns an `always` answer may turn into rules: only literal ones.
/// A pattern taken from the model's arguments (or `*` for a missing one)
/// must never become a glob that allows more than was asked about.
fn literal(patterns: &[String]) -> Vec<String> {
    patterns
        .iter()
        .filter(|p| !p.contains(['*', '?']))
        .cloned()
        .collect()
}

/// Permissions a guest may not ask for itself: globs, hook switches and the
/// doom-loop guard are the operator's (see [`crate::permission::policy::check_name`]).
pub fn guest_may_ask(permission: &str) -> Result<(), String> {
    crate::permission::policy::check_name(permission)
        .map_err(|why| format!("a plugin may not ask for that permission: {why}"))
}
