//! Call admission: what the boundary decides about a call the model made
//! before any of its stages run. Its arguments must be a JSON object
//! ([`arguments`]) and its tool one offered on this step ([`admit`]); a
//! call that fails either reaches no guest, and the model is told what was
//! wrong as the call's error. An admitted call becomes a [`CallRequest`]:
//! its context, the rules it is judged by, and how many times in a row the
//! model made it (at [`THRESHOLD`](super::doom::THRESHOLD) its first stage
//! asks `doom_loop`, in the call's own task).

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use warden_protocol::text::clip;
use warden_protocol::{CallId, MessageId, SessionInfo};

use super::{CallFailure, CallRequest, Rules};
use crate::agent::Agent;
use crate::tool::{CallContext, ToolDef};

/// The longest piece of bad arguments quoted back to the model.
const QUOTED: usize = 200;

/// A call's arguments as the model sent them: a JSON object, or what was
/// wrong with them, quoting (a cut of) what it sent.
pub(crate) fn arguments(raw: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!(
            "the arguments must be a JSON object, but the model sent {}: {}",
            json_kind(&other),
            clip(raw, QUOTED)
        )),
        Err(e) => Err(format!(
            "the arguments are not valid JSON ({e}): {}",
            clip(raw, QUOTED)
        )),
    }
}

/// A call the model made, with valid arguments, as the turn hands it over.
pub(crate) struct Proposal<'a> {
    pub call_id: CallId,
    pub name: &'a str,
    pub input: Value,
    pub session: &'a SessionInfo,
    /// The assistant message the call is part of.
    pub message_id: MessageId,
    pub agent: &'a Agent,
    /// The tools offered on this step.
    pub offered: &'a [ToolDef],
    /// How many calls in a row, this one included, were this tool with
    /// these arguments ([`repeats`](super::doom::repeats)).
    pub repeats: usize,
    pub cancel: CancellationToken,
}

/// Admit a call: a tool offered on this step, with its context and rules;
/// a tool not offered is refused, naming the ones that are.
pub(crate) fn admit(p: Proposal<'_>) -> Result<CallRequest, CallFailure> {
    let Some(tool) = p.offered.iter().find(|t| t.id == p.name) else {
        return Err(CallFailure::UnknownTool {
            name: p.name.to_string(),
            offered: p.offered.iter().map(|t| t.id.clone()).collect(),
        });
    };
    Ok(CallRequest {
        ctx: CallContext {
            session_id: p.session.id.clone(),
            message_id: p.message_id,
            call_id: p.call_id,
            agent: p.agent.name.clone(),
            directory: p.session.directory.clone(),
        },
        tool: tool.clone(),
        input: p.input,
        rules: Rules::new(p.agent.policy.clone(), p.session.id.clone()),
        cancel: p.cancel,
        progress: Arc::new(|_, _| {}),
        repeats: p.repeats,
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(
            arguments(r#"{"path": "a"}"#),
            Ok(serde_json::json!({"path": "a"}))
        );
        assert_eq!(
            arguments("[1]"),
            Err("the arguments must be a JSON object, but the model sent an array: [1]".into())
        );
        let cut = arguments(&format!("\"{}\"", "x".repeat(500))).expect_err("a string");
        assert!(cut.starts_with(
            "the arguments must be a JSON object, but the model sent a string: \"xxx"
        ));
        assert!(cut.ends_with("x…"), "{cut}");
        let bad = arguments("{\"path\": ").expect_err("cut off");
        assert!(
            bad.starts_with("the arguments are not valid JSON ("),
            "{bad}"
        );
    }
}
