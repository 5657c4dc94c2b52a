//! The hook stage runner: one loop for `tool.execute.before` and
//! `tool.execute.after`. Each hook whose tool-id globs match runs in config
//! order, after its own permission (`hook.before` / `hook.after` on the
//! plugin's name) is settled by the gate.

use std::time::Instant;

use serde_json::{Value, json};
use warden_protocol::Action;

use super::audit::{Decision, Outcome, Row, Stage};
use super::failure::{CallFailure, HookStage};
use super::gate::{self, Metadata, Question, Verdict};
use super::{Arguments, Call, check_call};
use crate::permission::{self, Evaluation};
use crate::tool::{AfterDecision, BeforeDecision, GuestError, HookCall, HookDef, ToolOutput};

/// What a hook said, whatever its stage.
enum Said {
    /// `allow` (before) or `keep` (after).
    Pass,
    Block(String),
    Ask(String),
    Arguments(String),
    Output(ToolOutput),
}

impl HookStage {
    fn audit(self) -> Stage {
        match self {
            HookStage::Before => Stage::Before,
            HookStage::After => Stage::After,
        }
    }

    fn name(self) -> &'static str {
        match self {
            HookStage::Before => "before",
            HookStage::After => "after",
        }
    }
}

/// Run the hooks of one stage. Before hooks may rewrite `input` (checked
/// again, so a hook never widens a permission); after hooks may rewrite
/// `output` (given only for [`HookStage::After`]).
pub(crate) async fn run_stage(
    call: &Call<'_>,
    stage: HookStage,
    input: &mut Arguments,
    mut output: Option<&mut ToolOutput>,
) -> Result<(), CallFailure> {
    let (env, req, observer) = (call.env, call.req, &call.observer);
    let tool = &req.tool;
    for bound in env.tools.hooks() {
        let hook = &bound.def;
        let globs = match stage {
            HookStage::Before => &hook.before,
            HookStage::After => &hook.after,
        };
        if !globs.matches(&tool.id) {
            continue;
        }
        match may_run(call, hook, stage).await {
            Verdict::Allowed => {}
            Verdict::Denied { .. } => continue,
            Verdict::Rejected { .. } if hook.fail_open => continue,
            Verdict::Rejected { .. } => {
                return Err(CallFailure::HookRefused {
                    plugin: hook.guest.plugin.clone(),
                    stage,
                });
            }
        }
        let started = Instant::now();
        let hook_call = HookCall {
            hook,
            ctx: &req.ctx,
            tool: &tool.id,
            arguments: &input.text,
            observer: observer.clone(),
        };
        let said = match (stage, output.as_deref()) {
            (HookStage::After, Some(out)) => bound.after(&hook_call, out).await.map(|d| match d {
                AfterDecision::Keep => Said::Pass,
                AfterDecision::Rewrite(o) => Said::Output(o),
            }),
            _ => bound.before(&hook_call).await.map(|d| match d {
                BeforeDecision::Allow => Said::Pass,
                BeforeDecision::Block(r) => Said::Block(r),
                BeforeDecision::Rewrite(text) => Said::Arguments(text),
                BeforeDecision::Ask(r) => Said::Ask(r),
            }),
        };
        let elapsed = Some(started.elapsed());
        let row = |outcome: Outcome| {
            Row::new(
                stage.audit(),
                format!("hook:{}", hook.guest.plugin),
                Decision::Ran,
                outcome,
            )
            .guest(&hook.guest.hash, elapsed)
        };
        let failed = |error: GuestError| {
            call.trail.push(row(Outcome::Failed(error.to_string())));
            CallFailure::HookFailed {
                plugin: hook.guest.plugin.clone(),
                stage,
                error,
            }
        };
        match said {
            Ok(Said::Pass) => call.trail.push(row(match stage {
                HookStage::Before => Outcome::Allow,
                HookStage::After => Outcome::Keep,
            })),
            Ok(Said::Block(reason)) => {
                call.trail.push(row(Outcome::Block(reason.clone())));
                return Err(CallFailure::Blocked {
                    plugin: hook.guest.plugin.clone(),
                    reason,
                });
            }
            Ok(Said::Arguments(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(new) if new.is_object() => {
                    call.trail.push(row(Outcome::Rewrite));
                    input.set(new);
                    check_call(call, &input.value).await?;
                }
                _ => {
                    let e = failed(GuestError::InvalidOutput {
                        guest: hook.guest.to_string(),
                        message: "a rewrite must be a JSON object of arguments".into(),
                    });
                    if !hook.fail_open {
                        return Err(e);
                    }
                }
            },
            Ok(Said::Output(o)) => {
                call.trail.push(row(Outcome::Rewrite));
                if let Some(out) = output.as_deref_mut() {
                    *out = o;
                }
            }
            Ok(Said::Ask(reason)) => {
                call.trail.push(row(Outcome::AskFor(reason.clone())));
                let pattern =
                    crate::tool::pattern_of(&tool.pattern, &input.value, &req.ctx.directory);
                let question = Question {
                    permission: tool.permission.clone(),
                    patterns: vec![pattern],
                    metadata: Metadata::of(
                        json!({"tool": tool.id, "input": input.value, "hook": hook.guest.plugin, "reason": reason}),
                    ),
                    stage: Stage::Ask,
                    subject: tool.permission.clone(),
                    plugin_hash: None,
                    asked_as: tool.permission.clone(),
                    on_deny: Outcome::Refused,
                    quiet: true,
                };
                // The hook asks a person, whatever the rules say.
                let ask = Evaluation {
                    action: Action::Ask,
                    rule: None,
                };
                if gate::decide(&call.gate(), question, ask).await != Verdict::Allowed {
                    return Err(CallFailure::HookAskRejected {
                        plugin: hook.guest.plugin.clone(),
                        reason,
                    });
                }
            }
            Err(e) => {
                let e = failed(e);
                if !hook.fail_open {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Whether a hook stage may see this call. Only rules that name a hook
/// permission apply (a `*` rule meant for tools never switches a guard off
/// by accident); with none, the hook runs. An explicit deny skips the hook,
/// as the operator asked; an `ask` that is refused blocks the call, since
/// the hook may be what guards it.
async fn may_run(call: &Call<'_>, hook: &HookDef, stage: HookStage) -> Verdict {
    let (env, req) = (call.env, call.req);
    let permission = format!("hook.{}", stage.name());
    let session = match req.rules.session(&env.ledger).await {
        Ok(rules) => rules,
        Err(e) => {
            tracing::warn!("the session's rules could not be read for a hook: {e}");
            return Verdict::Rejected {
                why: crate::permission::Refusal::Nobody,
            };
        }
    };
    let hook_rules = req.rules.policy().hook_rules(&session);
    if hook_rules.is_empty() {
        return Verdict::Allowed;
    }
    let eval = permission::evaluate(&permission, &hook.guest.plugin, &[&hook_rules]);
    if eval.action == Action::Ask && eval.rule.is_none() {
        return Verdict::Allowed;
    }
    let question = Question {
        permission: permission.clone(),
        patterns: vec![hook.guest.plugin.clone()],
        metadata: Metadata::new(|| json!({"hook": hook.guest.plugin, "tool": req.tool.id})),
        stage: stage.audit(),
        subject: format!("hook:{}", hook.guest.plugin),
        plugin_hash: Some(hook.guest.hash.clone()),
        asked_as: permission,
        on_deny: Outcome::Skipped,
        // Only a denial (a hook switched off) is worth a row of its own.
        quiet: eval.action == Action::Allow,
    };
    gate::decide(&call.gate(), question, eval).await
}
