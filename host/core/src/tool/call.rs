//! One tool call at the host boundary, in this order:
//!
//! 1. the tool was resolved by the caller (unknown tools never get here);
//! 2. **permission** for (agent + session rules, tool, pattern from the
//!    arguments): allow, deny, or ask whoever is attached; a denied call
//!    reaches no guest at all;
//! 3. each matching **before hook** (itself permission-checked as a guest
//!    call) may allow, block, ask, or rewrite the arguments, which are then
//!    checked again, so a hook can never widen a permission;
//! 4. the **tool** guest runs;
//! 5. each matching **after hook** may rewrite the output;
//! 6. every decision and guest call goes to the audit trail, written in one
//!    transaction when the call ends.
//!
//! A hook that fails blocks the call (fail closed) unless its operator set
//! it to fail open.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warden_protocol::{Action, PermissionReply, PermissionRequest, PermissionTool, Rule};

use super::{
    AfterDecision, BeforeDecision, CallContext, CallObserver, GuestError, HookDef, ToolDef,
    ToolHost, ToolOutput,
};
use crate::clock::now_ms;
use crate::ledger::{AuditEntry, Ledger};
use crate::permission::{self, Permissions, Refusal, wildcard};

/// What the boundary needs from the core.
#[derive(Clone)]
pub struct CallEnv {
    pub ledger: Ledger,
    pub permissions: Permissions,
    pub host: Arc<dyn ToolHost>,
    /// The audit entries of the call under way, written together at its end.
    trail: Option<Arc<Mutex<Trail>>>,
    /// Paths no tool may touch through its path argument, whatever the rules.
    protected: Arc<[Protected]>,
}

/// A path that belongs to warden itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: std::path::PathBuf,
    /// Only writes (the `edit` permission) are refused; reading is fine.
    pub writes_only: bool,
}

impl CallEnv {
    pub fn new(ledger: Ledger, permissions: Permissions, host: Arc<dyn ToolHost>) -> CallEnv {
        CallEnv {
            ledger,
            permissions,
            host,
            trail: None,
            protected: Arc::from(Vec::new()),
        }
    }

    /// Paths that are off limits to tools (warden's config file and data dir).
    pub fn protecting(mut self, protected: Arc<[Protected]>) -> CallEnv {
        self.protected = protected;
        self
    }

    /// Write the collected audit entries in one transaction.
    fn flush(&self) {
        let Some(trail) = &self.trail else { return };
        let mut trail = std::mem::take(&mut *trail.lock().unwrap_or_else(|p| p.into_inner()));
        if trail.dropped > 0
            && let Some(last) = trail.entries.last().cloned()
        {
            // One row says how many were not kept, so the trail stays honest.
            trail.entries.push(AuditEntry {
                stage: "audit".into(),
                subject: "trail".into(),
                plugin_hash: None,
                decision: "truncated".into(),
                rule: None,
                duration_us: None,
                outcome: Some(format!(
                    "{} more entries of this call were not recorded (at most {MAX_AUDIT_ROWS} per call)",
                    trail.dropped
                )),
                ..last
            });
        }
        if let Err(e) = self.ledger.audit_all(&trail.entries) {
            tracing::warn!(error = %e, "could not write the audit trail");
        }
    }
}

/// The most audit rows one call writes; past it, one row counts the rest.
pub const MAX_AUDIT_ROWS: usize = 64;

/// The audit entries of one call.
#[derive(Debug, Default)]
struct Trail {
    entries: Vec<AuditEntry>,
    dropped: usize,
}

/// Called with progress a guest reports while it runs.
pub type ProgressFn = Arc<dyn Fn(Option<String>, Value) + Send + Sync>;

/// One call to run.
pub struct CallRequest {
    pub ctx: CallContext,
    pub tool: ToolDef,
    /// The parsed arguments (an object).
    pub input: Value,
    /// The agent's rules followed by the session's: the last match wins.
    pub rules: Vec<Rule>,
    pub cancel: CancellationToken,
    pub progress: ProgressFn,
}

/// How the call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Completed {
        input: Value,
        output: ToolOutput,
    },
    Failed {
        input: Value,
        error: String,
        /// A permission or hook refused it (the processor may stop the loop).
        denied: bool,
    },
}

/// Run one call through the boundary.
pub async fn run(env: &CallEnv, req: CallRequest) -> CallOutcome {
    let env = CallEnv {
        trail: Some(Arc::new(Mutex::new(Trail::default()))),
        ..env.clone()
    };
    let outcome = boundary(&env, req).await;
    env.flush();
    outcome
}

async fn boundary(env: &CallEnv, req: CallRequest) -> CallOutcome {
    let mut input = req.input.clone();
    let tool = &req.tool;

    // 2. permission for the call itself.
    if let Err(error) = check_call(env, &req, &input).await {
        return CallOutcome::Failed {
            input,
            error,
            denied: true,
        };
    }

    let observer: Arc<dyn CallObserver> = Arc::new(Observer {
        env: env.clone(),
        ctx: req.ctx.clone(),
        url_permission: matches!(tool.pattern, super::PatternSource::Url(_))
            .then(|| tool.permission.clone()),
        rules: req.rules.clone(),
        cancel: req.cancel.clone(),
        progress: req.progress.clone(),
    });
    let hooks = env.host.hooks();

    // 3. before hooks, in order.
    for hook in hooks.iter().filter(|h| wants(&h.before, &tool.id)) {
        match hook_allowed(env, &req, hook, "before").await {
            HookGate::Run => {}
            HookGate::Skip => continue,
            HookGate::Refused if hook.fail_open => continue,
            HookGate::Refused => {
                return CallOutcome::Failed {
                    input,
                    error: format!(
                        "hook {} may not see this call (its permission was refused), and hooks fail closed: the call was blocked",
                        hook.guest.plugin
                    ),
                    denied: true,
                };
            }
        }
        let started = Instant::now();
        let decision = env
            .host
            .before(
                hook,
                &req.ctx,
                &tool.id,
                &input.to_string(),
                observer.clone(),
            )
            .await;
        let elapsed = started.elapsed();
        match decision {
            Ok(BeforeDecision::Allow) => audit_guest(env, &req, "before", hook, elapsed, "allow"),
            Ok(BeforeDecision::Block(reason)) => {
                audit_guest(
                    env,
                    &req,
                    "before",
                    hook,
                    elapsed,
                    &format!("block: {reason}"),
                );
                return CallOutcome::Failed {
                    input,
                    error: format!("blocked by hook {}: {reason}", hook.guest.plugin),
                    denied: true,
                };
            }
            Ok(BeforeDecision::Rewrite(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(new) if new.is_object() => {
                    audit_guest(env, &req, "before", hook, elapsed, "rewrite");
                    input = new;
                    if let Err(error) = check_call(env, &req, &input).await {
                        return CallOutcome::Failed {
                            input,
                            error,
                            denied: true,
                        };
                    }
                }
                _ => {
                    let e = GuestError::InvalidOutput {
                        guest: hook.guest.to_string(),
                        message: "a rewrite must be a JSON object of arguments".into(),
                    };
                    audit_guest(env, &req, "before", hook, elapsed, &e.to_string());
                    if !hook.fail_open {
                        return hook_failed(input, hook, &e);
                    }
                }
            },
            Ok(BeforeDecision::Ask(reason)) => {
                audit_guest(
                    env,
                    &req,
                    "before",
                    hook,
                    elapsed,
                    &format!("ask: {reason}"),
                );
                let pattern = super::pattern_of(&tool.pattern, &input, &req.ctx.directory);
                let reply = ask(env, &req, &tool.permission, vec![pattern], json!({"tool": tool.id, "input": input, "hook": hook.guest.plugin, "reason": reason})).await.reply;
                if reply == PermissionReply::Reject {
                    return CallOutcome::Failed {
                        input,
                        error: format!(
                            "hook {} asked for approval ({reason}) and it was not given",
                            hook.guest.plugin
                        ),
                        denied: true,
                    };
                }
            }
            Err(e) => {
                audit_guest(env, &req, "before", hook, elapsed, &e.to_string());
                if !hook.fail_open {
                    return hook_failed(input, hook, &e);
                }
            }
        }
    }

    // 4. the tool.
    let started = Instant::now();
    let result = env
        .host
        .execute(tool, &req.ctx, &input.to_string(), observer.clone())
        .await;
    let elapsed = started.elapsed();
    let mut output = match result {
        Ok(o) => {
            audit(
                env,
                &req,
                "tool",
                &tool.id,
                Some(&tool.guest.hash),
                "ran",
                None,
                Some(elapsed),
                "ok",
            );
            o
        }
        Err(e) => {
            audit(
                env,
                &req,
                "tool",
                &tool.id,
                Some(&tool.guest.hash),
                "ran",
                None,
                Some(elapsed),
                &e.to_string(),
            );
            let denied = matches!(e, GuestError::Denied(_));
            return CallOutcome::Failed {
                input,
                error: e.to_string(),
                denied,
            };
        }
    };

    // 5. after hooks, in order.
    for hook in hooks.iter().filter(|h| wants(&h.after, &tool.id)) {
        match hook_allowed(env, &req, hook, "after").await {
            HookGate::Run => {}
            HookGate::Skip => continue,
            HookGate::Refused if hook.fail_open => continue,
            HookGate::Refused => {
                return CallOutcome::Failed {
                    input,
                    error: format!(
                        "after hook {} may not see this call (its permission was refused); the output was withheld because hooks fail closed",
                        hook.guest.plugin
                    ),
                    denied: true,
                };
            }
        }
        let started = Instant::now();
        let decision = env
            .host
            .after(
                hook,
                &req.ctx,
                &tool.id,
                &input.to_string(),
                &output,
                observer.clone(),
            )
            .await;
        let elapsed = started.elapsed();
        match decision {
            Ok(AfterDecision::Keep) => audit_guest(env, &req, "after", hook, elapsed, "keep"),
            Ok(AfterDecision::Rewrite(o)) => {
                audit_guest(env, &req, "after", hook, elapsed, "rewrite");
                output = o;
            }
            Err(e) => {
                audit_guest(env, &req, "after", hook, elapsed, &e.to_string());
                if !hook.fail_open {
                    return CallOutcome::Failed {
                        input,
                        error: format!(
                            "after hook {} failed ({e}); the tool's output was withheld because hooks fail closed",
                            hook.guest.plugin
                        ),
                        denied: false,
                    };
                }
            }
        }
    }

    CallOutcome::Completed { input, output }
}

fn wants(globs: &[String], tool: &str) -> bool {
    globs.iter().any(|g| wildcard::matches(g, tool))
}

fn hook_failed(input: Value, hook: &HookDef, e: &GuestError) -> CallOutcome {
    CallOutcome::Failed {
        input,
        error: format!(
            "before hook {} failed ({e}); the call was blocked because hooks fail closed",
            hook.guest.plugin
        ),
        denied: false,
    }
}

/// Permission for the call with these arguments.
async fn check_call(env: &CallEnv, req: &CallRequest, input: &Value) -> Result<(), String> {
    let tool = &req.tool;
    // warden's own state is not the agent's to change, whatever the rules
    // say: a model talked into rewriting the config could grant itself more.
    if let super::PatternSource::Path(arg) = &tool.pattern
        && let Some(path) = input.get(arg).and_then(Value::as_str)
    {
        let real = super::real_path(path, &req.ctx.directory);
        if let Some(p) = env
            .protected
            .iter()
            .find(|p| real.starts_with(&p.path) && (!p.writes_only || tool.permission == "edit"))
        {
            audit(
                env,
                req,
                "permission",
                &tool.id,
                None,
                "denied",
                Some("warden's own files"),
                None,
                "refused",
            );
            return Err(format!(
                "permission denied: {} is warden's own {} and no tool may {} it",
                p.path.display(),
                if p.writes_only {
                    "configuration"
                } else {
                    "data"
                },
                if p.writes_only { "change" } else { "use" }
            ));
        }
    }
    let pattern = super::pattern_of(&tool.pattern, input, &req.ctx.directory);
    let mut eval = permission::evaluate_all(
        &tool.permission,
        std::slice::from_ref(&pattern),
        &[&req.rules],
    );
    // A tool the operator never mapped to a permission and an argument is
    // invisible to path and URL rules, so a blanket `*` allow must not run
    // it unseen: only a rule naming its permission allows it.
    if !tool.mapped
        && eval.action == Action::Allow
        && eval
            .rule
            .as_ref()
            .is_none_or(|r| r.permission != tool.permission)
    {
        eval.action = Action::Ask;
    }
    let rule = eval.describe();
    match eval.action {
        Action::Allow => {
            audit(
                env,
                req,
                "permission",
                &tool.id,
                None,
                "allowed",
                Some(&rule),
                None,
                "ok",
            );
            Ok(())
        }
        Action::Deny => {
            audit(
                env,
                req,
                "permission",
                &tool.id,
                None,
                "denied",
                Some(&rule),
                None,
                "refused",
            );
            Err(format!(
                "permission denied: `{}` on `{pattern}` is denied by the rule `{rule}`; the call did not run",
                tool.permission
            ))
        }
        Action::Ask => {
            let reply = ask(
                env,
                req,
                &tool.permission,
                vec![pattern.clone()],
                json!({"tool": tool.id, "input": input}),
            )
            .await;
            if reply.reply == PermissionReply::Reject {
                Err(rejected(reply.refusal, &tool.permission, &pattern))
            } else {
                Ok(())
            }
        }
    }
}

/// Whether a hook stage may see this call: `hook.before` / `hook.after` on
/// the plugin's name. Only rules that name a hook permission apply (a
/// `*` rule meant for tools never switches a guard off by accident); with
/// none, the hook runs. An explicit deny skips the hook, as the operator
/// asked; an `ask` that is refused blocks the call, since the hook may be
/// what guards it.
async fn hook_allowed(env: &CallEnv, req: &CallRequest, hook: &HookDef, stage: &str) -> HookGate {
    let permission = format!("hook.{stage}");
    let hook_rules: Vec<Rule> = req
        .rules
        .iter()
        .filter(|r| r.permission.starts_with("hook"))
        .cloned()
        .collect();
    if hook_rules.is_empty() {
        return HookGate::Run;
    }
    let eval = permission::evaluate(&permission, &hook.guest.plugin, &[&hook_rules]);
    let subject = format!("hook:{}", hook.guest.plugin);
    let rule = eval.describe();
    match (eval.action, eval.rule.is_some()) {
        (Action::Allow, _) | (Action::Ask, false) => HookGate::Run,
        (Action::Deny, _) => {
            audit(
                env,
                req,
                stage,
                &subject,
                Some(&hook.guest.hash),
                "denied",
                Some(&rule),
                None,
                "skipped",
            );
            HookGate::Skip
        }
        (Action::Ask, true) => {
            let reply = ask(
                env,
                req,
                &permission,
                vec![hook.guest.plugin.clone()],
                json!({"hook": hook.guest.plugin, "tool": req.tool.id}),
            )
            .await;
            if reply.reply == PermissionReply::Reject {
                HookGate::Refused
            } else {
                HookGate::Run
            }
        }
    }
}

/// What [`hook_allowed`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookGate {
    Run,
    Skip,
    /// The hook could not be asked to run: like a hook failure.
    Refused,
}

async fn ask(
    env: &CallEnv,
    req: &CallRequest,
    permission: &str,
    patterns: Vec<String>,
    metadata: Value,
) -> crate::permission::Answer {
    let request = PermissionRequest {
        id: String::new(),
        session_id: req.ctx.session_id.clone(),
        permission: permission.to_string(),
        always: literal(&patterns),
        patterns: patterns.clone(),
        metadata,
        tool: Some(PermissionTool {
            message_id: req.ctx.message_id.clone(),
            call_id: req.ctx.call_id.clone(),
        }),
    };
    let asked = Instant::now();
    let answer = env.permissions.ask_why(request, &req.cancel).await;
    let reply = answer.reply;
    let decision = match reply {
        PermissionReply::Once => "asked:once",
        PermissionReply::Always => "asked:always",
        PermissionReply::Reject => "asked:reject",
    };
    audit(
        env,
        req,
        "ask",
        permission,
        None,
        decision,
        Some(&patterns.join(" ")),
        // How long the question waited: the trace shows it apart from running.
        Some(asked.elapsed()),
        if reply == PermissionReply::Reject {
            "refused"
        } else {
            "ok"
        },
    );
    answer
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
/// doom-loop guard are the operator's.
fn guest_may_ask(permission: &str) -> Result<(), String> {
    if permission.is_empty()
        || permission.contains(['*', '?'])
        || permission.starts_with("hook")
        || permission == "doom_loop"
        || permission.chars().any(char::is_control)
    {
        return Err(format!(
            "a plugin may not ask for the permission {permission:?}"
        ));
    }
    Ok(())
}

fn rejected(why: Option<Refusal>, permission: &str, pattern: &str) -> String {
    let why = why.unwrap_or(Refusal::Rejected);
    format!("permission denied: `{permission}` on `{pattern}` needs approval and {why}")
}

fn audit_guest(
    env: &CallEnv,
    req: &CallRequest,
    stage: &str,
    hook: &HookDef,
    elapsed: std::time::Duration,
    outcome: &str,
) {
    audit(
        env,
        req,
        stage,
        &format!("hook:{}", hook.guest.plugin),
        Some(&hook.guest.hash),
        "ran",
        None,
        Some(elapsed),
        outcome,
    );
}

#[allow(clippy::too_many_arguments)]
fn audit(
    env: &CallEnv,
    req: &CallRequest,
    stage: &str,
    subject: &str,
    hash: Option<&str>,
    decision: &str,
    rule: Option<&str>,
    elapsed: Option<std::time::Duration>,
    outcome: &str,
) {
    audit_ctx(
        env, &req.ctx, stage, subject, hash, decision, rule, elapsed, outcome,
    );
}

#[allow(clippy::too_many_arguments)]
fn audit_ctx(
    env: &CallEnv,
    ctx: &CallContext,
    stage: &str,
    subject: &str,
    hash: Option<&str>,
    decision: &str,
    rule: Option<&str>,
    elapsed: Option<std::time::Duration>,
    outcome: &str,
) {
    let entry = AuditEntry {
        seq: 0,
        session_id: ctx.session_id.clone(),
        message_id: Some(ctx.message_id.clone()),
        call_id: Some(ctx.call_id.clone()),
        at: now_ms(),
        stage: stage.to_string(),
        subject: subject.to_string(),
        plugin_hash: hash.map(str::to_string),
        decision: decision.to_string(),
        rule: rule.map(str::to_string),
        duration_us: elapsed.map(|d| d.as_micros() as i64),
        outcome: Some(outcome.to_string()),
    };
    match &env.trail {
        Some(trail) => {
            let mut trail = trail.lock().unwrap_or_else(|p| p.into_inner());
            if trail.entries.len() < MAX_AUDIT_ROWS {
                trail.entries.push(entry);
            } else {
                trail.dropped += 1;
            }
        }
        None => {
            if let Err(e) = env.ledger.audit(&entry) {
                tracing::warn!(error = %e, "could not write the audit trail");
            }
        }
    }
}

/// The `host` interface a guest sees during a call.
struct Observer {
    env: CallEnv,
    ctx: CallContext,
    /// The tool's permission, when its rules are written on URLs: every
    /// request it sends (redirects included) is checked against them.
    url_permission: Option<String>,
    rules: Vec<Rule>,
    cancel: CancellationToken,
    progress: ProgressFn,
}

#[async_trait::async_trait]
impl CallObserver for Observer {
    fn progress(&self, title: Option<String>, metadata: Value) {
        (self.progress)(title, metadata);
    }

    async fn check_url(&self, url: &super::url::Canonical) -> Result<(), String> {
        let Some(permission) = &self.url_permission else {
            return Ok(());
        };
        let host = url.host.to_string();
        let eval = permission::evaluate(permission, &host, &[&self.rules]);
        let rule = eval.describe();
        let refused = eval.action == Action::Deny;
        audit_ctx(
            &self.env,
            &self.ctx,
            "request",
            &url.to_string().chars().take(300).collect::<String>(),
            None,
            if refused { "denied" } else { "allowed" },
            Some(&rule),
            None,
            if refused { "refused" } else { "ok" },
        );
        if refused {
            return Err(format!(
                "`{permission}` on `{host}` is denied by the rule `{rule}` (checked on every request, redirects included)"
            ));
        }
        Ok(())
    }

    fn guest_output(&self, plugin: &str, stream: &str, text: String) {
        audit_ctx(
            &self.env,
            &self.ctx,
            stream,
            &format!("plugin:{plugin}"),
            None,
            "printed",
            None,
            None,
            &text,
        );
    }

    async fn ask(
        &self,
        permission: String,
        patterns: Vec<String>,
        metadata: Value,
    ) -> Result<(), String> {
        // A guest's own question, audited like the host's: what, the rule, the answer.
        guest_may_ask(&permission)?;
        let eval = permission::evaluate_all(&permission, &patterns, &[&self.rules]);
        let rule = eval.describe();
        let subject = format!("guest:{permission}");
        match eval.action {
            Action::Allow => {
                audit_ctx(
                    &self.env,
                    &self.ctx,
                    "ask",
                    &subject,
                    None,
                    "allowed",
                    Some(&rule),
                    None,
                    "ok",
                );
                Ok(())
            }
            Action::Deny => {
                audit_ctx(
                    &self.env,
                    &self.ctx,
                    "ask",
                    &subject,
                    None,
                    "denied",
                    Some(&rule),
                    None,
                    "refused",
                );
                Err(format!("`{permission}` is denied by the rule `{rule}`"))
            }
            Action::Ask => {
                let request = PermissionRequest {
                    id: String::new(),
                    session_id: self.ctx.session_id.clone(),
                    permission: permission.clone(),
                    always: literal(&patterns),
                    patterns: patterns.clone(),
                    metadata,
                    tool: Some(PermissionTool {
                        message_id: self.ctx.message_id.clone(),
                        call_id: self.ctx.call_id.clone(),
                    }),
                };
                let asked = Instant::now();
                let answer = self.env.permissions.ask_why(request, &self.cancel).await;
                let reply = answer.reply;
                let (decision, outcome) = match reply {
                    PermissionReply::Once => ("asked:once", "ok"),
                    PermissionReply::Always => ("asked:always", "ok"),
                    PermissionReply::Reject => ("asked:reject", "refused"),
                };
                audit_ctx(
                    &self.env,
                    &self.ctx,
                    "ask",
                    &subject,
                    None,
                    decision,
                    Some(&patterns.join(" ")),
                    Some(asked.elapsed()),
                    outcome,
                );
                match reply {
                    PermissionReply::Reject => {
                        Err(rejected(answer.refusal, &permission, &patterns.join(" ")))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}
