//! The host boundary: one tool call, in this order:
//!
//! 1. **admission** ([`admission`]): arguments that are a JSON object, a
//!    tool offered on this step (a call failing either reaches no stage);
//!    a call the model repeated [`doom::THRESHOLD`] times in a row is first
//!    put to the gate as `doom_loop` ([`doom`]), in the call's own task;
//! 2. **permission** for (agent + session rules, tool, pattern from the
//!    arguments), settled by the [`gate`]: allow, deny, or ask whoever is
//!    attached; a denied call reaches no guest at all;
//! 3. each matching **before hook** ([`hooks`], itself permission-checked)
//!    may allow, block, ask, or rewrite the arguments, which are then
//!    checked again, so a hook can never widen a permission;
//! 4. the **tool** guest runs;
//! 5. each matching **after hook** may rewrite the output;
//! 6. every decision and guest call is a typed row of the call's [`audit`]
//!    trail, handed back with the outcome so the caller writes it together
//!    with the call's terminal state.
//!
//! A call that does not complete ends in a [`CallFailure`], whose text is
//! what the model is shown. Where to start reading: [`run`].

pub(crate) mod admission;
pub mod audit;
pub mod caller;
pub mod doom;
pub mod failure;
pub mod gate;
pub mod hooks;
mod observer;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warden_protocol::Action;

pub use audit::{Decision, MAX_AUDIT_ROWS, Outcome, Stage, Trail};
pub use caller::{CallerGuard, Callers};
pub use failure::{CallFailure, HookStage};
pub use gate::{Metadata, Question, Rules, Verdict};

use crate::ledger::{AuditEntry, Ledger};
use crate::permission::Permissions;
use crate::tool::{CallContext, CallObserver, PatternSource, Registry, ToolDef, ToolOutput};
use audit::Row;
use gate::Gate;

/// What the boundary needs from the core.
#[derive(Clone)]
pub struct CallEnv {
    pub ledger: Ledger,
    pub permissions: Permissions,
    pub tools: Registry,
    /// Paths no tool may touch through its path argument, whatever the rules.
    protected: Arc<[Protected]>,
    /// The front ends with sessions open, named first in each call's trail.
    callers: Callers,
}

/// A path that belongs to warden itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: std::path::PathBuf,
    /// Only writes (the `edit` permission) are refused; reading is fine.
    pub writes_only: bool,
}

impl CallEnv {
    pub fn new(ledger: Ledger, permissions: Permissions, tools: Registry) -> CallEnv {
        CallEnv {
            ledger,
            permissions,
            tools,
            protected: Arc::from(Vec::new()),
            callers: Callers::default(),
        }
    }

    /// Name the front ends that have sessions open in each call's trail.
    pub fn naming(mut self, callers: Callers) -> CallEnv {
        self.callers = callers;
        self
    }

    /// Paths that are off limits to tools (warden's config file and data dir).
    pub fn protecting(mut self, protected: Arc<[Protected]>) -> CallEnv {
        self.protected = protected;
        self
    }
}

/// Called with progress a guest reports while it runs.
pub type ProgressFn = Arc<dyn Fn(Option<String>, Value) + Send + Sync>;

/// One call to run.
pub struct CallRequest {
    pub ctx: CallContext,
    pub tool: ToolDef,
    /// The parsed arguments (an object).
    pub input: Value,
    /// The agent's rules, then the session's as they stand at each decision.
    pub rules: Rules,
    pub cancel: CancellationToken,
    pub progress: ProgressFn,
    /// How many calls in a row, this one included, were this tool with
    /// these arguments: at [`doom::THRESHOLD`] the `doom_loop` question is
    /// the call's first stage. Front ends without a loop give 1.
    pub repeats: usize,
}

impl CallRequest {
    /// A call made directly, not by a model's loop (the MCP server, `warden
    /// plugin call`): nothing to cancel it, no progress to report, and no
    /// loop to repeat in.
    pub fn direct(ctx: CallContext, tool: ToolDef, input: Value, rules: Rules) -> CallRequest {
        CallRequest {
            ctx,
            tool,
            input,
            rules,
            cancel: CancellationToken::new(),
            progress: Arc::new(|_, _| {}),
            repeats: 1,
        }
    }
}

/// How the call ended. Both carry the arguments the call ended with (after
/// any hook rewrote them).
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Completed { input: Value, output: ToolOutput },
    Failed { input: Value, failure: CallFailure },
}

/// Run one call through the boundary and write its audit trail (for front
/// ends without a call table, such as the MCP server).
pub async fn run(env: &CallEnv, req: CallRequest) -> CallOutcome {
    let report = run_audited(env, req).await;
    if let Err(e) = env.ledger.audit_all(&report.audit).await {
        tracing::warn!(error = %e, "could not write the audit trail");
    }
    report.outcome
}

/// How a call went through the boundary.
pub struct Report {
    pub outcome: CallOutcome,
    /// Its audit rows, for the caller to write with its terminal state.
    pub audit: Vec<AuditEntry>,
    /// The first question of the call that ended without a yes (a person's
    /// reject, or nobody answering), if any: a failed call with one stops
    /// the loop, a rule's deny or a hook's block does not.
    pub refusal: Option<crate::permission::Refusal>,
}

/// Run one call through the boundary.
pub async fn run_audited(env: &CallEnv, req: CallRequest) -> Report {
    let trail = Trail::new(&req.ctx);
    // Who drives the session comes first in the call's trail.
    if let Some(who) = env.callers.of(&req.ctx.session_id) {
        trail.push(audit::Row::new(
            audit::Stage::Caller,
            who,
            audit::Decision::Called,
            audit::Outcome::Said(req.tool.id.clone()),
        ));
    }
    let observer: Arc<dyn CallObserver> = Arc::new(observer::Observer {
        env: env.clone(),
        trail: trail.clone(),
        ctx: req.ctx.clone(),
        url_permission: matches!(req.tool.pattern, PatternSource::Url(_))
            .then(|| req.tool.permission.clone()),
        rules: req.rules.clone(),
        cancel: req.cancel.clone(),
        progress: req.progress.clone(),
    });
    let call = Call {
        env,
        req: &req,
        trail,
        observer,
    };
    let mut input = Arguments::new(req.input.clone());
    let result = boundary(&call, &mut input).await;
    let input = input.value;
    let outcome = match result {
        Ok(output) => CallOutcome::Completed { input, output },
        Err(failure) => CallOutcome::Failed { input, failure },
    };
    Report {
        outcome,
        refusal: call.trail.refusal(),
        audit: call.trail.take(),
    }
}

/// One call under way.
pub(crate) struct Call<'a> {
    env: &'a CallEnv,
    req: &'a CallRequest,
    trail: Trail,
    observer: Arc<dyn CallObserver>,
}

impl Call<'_> {
    fn gate(&self) -> Gate<'_> {
        Gate {
            permissions: &self.env.permissions,
            trail: &self.trail,
            ctx: &self.req.ctx,
            cancel: &self.req.cancel,
        }
    }
}

/// A call's arguments as they stand, and their JSON text as guests receive
/// it: encoded once from the checked value, and again only when a hook
/// rewrites them. Guests never get the model's own text, nor a hook's: a
/// text with a key twice could mean one path to the permission check
/// (which reads the value) and another to a guest's JSON parser.
pub(crate) struct Arguments {
    pub value: Value,
    pub text: String,
}

impl Arguments {
    fn new(value: Value) -> Arguments {
        let text = value.to_string();
        Arguments { value, text }
    }

    /// Take rewritten arguments.
    pub fn set(&mut self, value: Value) {
        self.text = value.to_string();
        self.value = value;
    }
}

async fn boundary(call: &Call<'_>, input: &mut Arguments) -> Result<ToolOutput, CallFailure> {
    let tool = &call.req.tool;
    if call.req.repeats >= doom::THRESHOLD {
        doom::check(call, &input.value).await?;
    }
    check_call(call, &input.value).await?;
    hooks::run_stage(call, HookStage::Before, input, None).await?;

    let started = Instant::now();
    let result = call
        .env
        .tools
        .execute(tool, &call.req.ctx, &input.text, call.observer.clone())
        .await;
    let row = |outcome| {
        Row::new(Stage::Tool, tool.id.clone(), Decision::Ran, outcome)
            .guest(&tool.guest.hash, Some(started.elapsed()))
    };
    let mut output = match result {
        Ok(o) => {
            call.trail.push(row(Outcome::Ok));
            o
        }
        Err(e) => {
            call.trail.push(row(Outcome::Failed(e.to_string())));
            return Err(CallFailure::Guest(e));
        }
    };

    hooks::run_stage(call, HookStage::After, input, Some(&mut output)).await?;
    Ok(output)
}

/// Permission for the call with these arguments.
async fn check_call(call: &Call<'_>, input: &Value) -> Result<(), CallFailure> {
    let (env, req) = (call.env, call.req);
    let tool = &req.tool;
    // warden's own state is not the agent's to change, whatever the rules
    // say: a model talked into rewriting the config could grant itself more.
    if let PatternSource::Path(arg) = &tool.pattern
        && let Some(path) = input.get(arg).and_then(Value::as_str)
    {
        let real = crate::tool::real_path(path, &req.ctx.directory);
        if let Some(p) = env
            .protected
            .iter()
            .find(|p| real.starts_with(&p.path) && (!p.writes_only || tool.permission == "edit"))
        {
            call.trail.push(
                Row::new(
                    Stage::Permission,
                    tool.id.clone(),
                    Decision::Denied,
                    Outcome::Refused,
                )
                .rule("warden's own files"),
            );
            return Err(CallFailure::Protected {
                path: p.path.clone(),
                writes_only: p.writes_only,
            });
        }
    }
    let pattern = crate::tool::pattern_of(&tool.pattern, input, &req.ctx.directory);
    let mut eval = req
        .rules
        .evaluate(
            &env.ledger,
            &tool.permission,
            std::slice::from_ref(&pattern),
        )
        .await
        .map_err(CallFailure::Rules)?;
    // A tool the operator never mapped to a permission and an argument is
    // invisible to path and URL rules, and an MCP server's runs outside the
    // sandbox, so a blanket `*` allow must not run either unseen: only a
    // rule naming it allows it ([`ToolDef::allowed_by`]).
    if eval.action == Action::Allow
        && !eval
            .rule
            .as_ref()
            .is_some_and(|r| tool.allowed_by(&r.permission))
    {
        eval.action = Action::Ask;
    }
    let question = Question {
        permission: tool.permission.clone(),
        patterns: vec![pattern.clone()],
        metadata: Metadata::new(|| json!({"tool": tool.id, "input": input})),
        stage: Stage::Permission,
        subject: tool.id.clone(),
        plugin_hash: None,
        asked_as: tool.permission.clone(),
        on_deny: Outcome::Refused,
        quiet: false,
    };
    match gate::decide(&call.gate(), question, eval).await {
        Verdict::Allowed => Ok(()),
        Verdict::Denied { rule } => Err(CallFailure::Denied {
            permission: tool.permission.clone(),
            pattern,
            rule,
        }),
        Verdict::Rejected { why } => Err(CallFailure::Rejected {
            permission: tool.permission.clone(),
            pattern,
            why,
        }),
    }
}
