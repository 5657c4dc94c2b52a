//! The doom loop: the same tool with the same arguments, called
//! [`THRESHOLD`] times in a row in one prompt's run, is put to the gate as
//! the `doom_loop` permission.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warden_protocol::{MessageWithParts, Part, PartBody, ToolState};

use super::super::history::assistant;
use crate::boundary::gate::{self, Gate, Question, Rules, Verdict};
use crate::boundary::{Outcome, Stage, Trail};
use crate::ledger::{AuditEntry, Ledger};
use crate::permission::Permissions;
use crate::tool::CallContext;

/// The last this many tool calls identical → ask `doom_loop`.
pub(super) const THRESHOLD: usize = 3;
/// A model refused `doom_loop` by a rule that still repeats the call this
/// many times in a row is stuck: the loop stops.
pub(super) const GIVE_UP: usize = 2 * THRESHOLD;

/// How many calls in a row, ending with this one, in this run (across
/// this prompt's assistant messages) are the same tool with the same
/// arguments.
pub(super) fn repeats(
    history: &[Arc<MessageWithParts>],
    user_id: &warden_protocol::MessageId,
    this_step: &[Part],
    name: &str,
    input: &Value,
) -> usize {
    let earlier = history
        .iter()
        .filter(|m| assistant(m.as_ref()).is_some_and(|a| &a.id > user_id))
        .flat_map(|m| m.parts.iter());
    let recent: Vec<&Part> = earlier
        .chain(this_step.iter())
        .filter(|p| matches!(p.body, PartBody::Tool { ignored: false, .. }))
        .collect();
    recent
        .iter()
        .rev()
        .take_while(|p| match &p.body {
            PartBody::Tool { tool, state, .. } => {
                tool == name
                    && !matches!(state, ToolState::Pending { .. })
                    && state.input() == input
            }
            _ => false,
        })
        .count()
}

/// Put the repeated call to the gate; the audit rows are returned to be
/// written with the call's transition.
pub(super) async fn allowed(
    ledger: &Ledger,
    permissions: &Permissions,
    rules: &Rules,
    ctx: &CallContext,
    cancel: &CancellationToken,
    name: &str,
    input: &Value,
) -> (Verdict, Vec<AuditEntry>) {
    let trail = Trail::new(ctx);
    let eval = match rules
        .evaluate(ledger, "doom_loop", &[name.to_string()])
        .await
    {
        Ok(eval) => eval,
        Err(e) => {
            tracing::warn!("the session's rules could not be read for the doom-loop guard: {e}");
            return (
                Verdict::Denied {
                    rule: "(the rules could not be read)".into(),
                },
                Vec::new(),
            );
        }
    };
    let question = Question {
        permission: "doom_loop".into(),
        patterns: vec![name.to_string()],
        metadata: json!({"tool": name, "input": input}),
        stage: Stage::Permission,
        subject: "doom_loop".into(),
        plugin_hash: None,
        asked_as: "doom_loop".into(),
        on_deny: Outcome::Refused,
        // A rule's answer is the config's: only a question is audited.
        quiet: true,
    };
    let gate = Gate {
        permissions,
        trail: &trail,
        ctx,
        cancel,
    };
    let verdict = gate::decide(&gate, question, eval).await;
    (verdict, trail.take())
}
