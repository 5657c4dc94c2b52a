//! The doom loop: the same tool with the same arguments, called
//! [`THRESHOLD`] times in a row in one prompt's run, is put to the gate as
//! the `doom_loop` permission before anything else of the call.

use std::sync::Arc;

use serde_json::{Value, json};
use warden_protocol::{MessageWithParts, Part, PartBody, ToolState};

use super::Call;
use super::audit::{Outcome, Stage};
use super::failure::CallFailure;
use super::gate::{self, Question, Verdict};
use crate::session::history::assistant;

/// The last this many tool calls identical → ask `doom_loop`.
pub const THRESHOLD: usize = 3;
/// A model refused `doom_loop` by a rule that still repeats the call this
/// many times in a row is stuck: the loop stops.
pub const GIVE_UP: usize = 2 * THRESHOLD;

/// How many calls in a row, ending with this one, in this run (across
/// this prompt's assistant messages) are the same tool with the same
/// arguments.
pub(crate) fn repeats(
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

/// The doom-loop stage, first of a repeated call's stages: the `doom_loop`
/// question is settled by the call's own gate, so its audit rows are the
/// call's (written with its terminal state, one transaction) and a question
/// waits in the call's task, never in the turn's stream loop.
pub(super) async fn check(call: &Call<'_>, input: &Value) -> Result<(), CallFailure> {
    let name = &call.req.tool.id;
    let refused = || CallFailure::DoomLoop {
        tool: name.clone(),
        times: THRESHOLD,
    };
    let eval = match call
        .req
        .rules
        .evaluate(&call.env.ledger, "doom_loop", std::slice::from_ref(name))
        .await
    {
        Ok(eval) => eval,
        Err(e) => {
            tracing::warn!("the session's rules could not be read for the doom-loop guard: {e}");
            return Err(refused());
        }
    };
    let question = Question {
        permission: "doom_loop".into(),
        patterns: vec![name.clone()],
        metadata: json!({"tool": name, "input": input}),
        stage: Stage::Permission,
        subject: "doom_loop".into(),
        plugin_hash: None,
        asked_as: "doom_loop".into(),
        on_deny: Outcome::Refused,
        // A rule's answer is the config's: only a question is audited.
        quiet: true,
    };
    match gate::decide(&call.gate(), question, eval).await {
        Verdict::Allowed => Ok(()),
        Verdict::Denied { .. } | Verdict::Rejected { .. } => Err(refused()),
    }
}
