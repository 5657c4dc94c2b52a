//! `warden plugin call NAME TOOL`: one call of a plugin's tool through the
//! same boundary a session's calls go through (permission rules, hooks,
//! grants, limits, the audit trail), without a model: for an author to see
//! what their tool returns, and for an operator to try a rule.
//!
//! The call gets a session of its own in the ledger (named in the output),
//! so `warden audit` and `warden session show` find it. A question the
//! rules ask gets the configured fallback: nobody is attached to answer it.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::Value;
use warden_core::boundary::{self, CallOutcome, CallRequest, Rules};
use warden_core::clock::now_ms;
use warden_core::ledger::{AuditEntry, id};
use warden_core::tool::CallContext;
use warden_protocol::MessageId;

use crate::{Common, app};

#[derive(clap::Args)]
pub struct CallArgs {
    /// The plugin (as `plugin list` names it).
    pub plugin: String,
    /// The tool of that plugin to call.
    pub tool: String,
    /// The call's arguments, a JSON object (`-`: read them from standard input).
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// The working directory the call runs in (what `.` grants mean).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub async fn call(args: CallArgs, common: Common) -> Result<ExitCode> {
    let text = match args.args.as_str() {
        "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        other => other.to_string(),
    };
    let input: Value = match serde_json::from_str(&text) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => bail!(
            "--args must be a JSON object of the tool's arguments, like '{{\"path\": \"a.txt\"}}'"
        ),
        Err(e) => {
            bail!("--args is not JSON ({e}); give a JSON object, like '{{\"path\": \"a.txt\"}}'")
        }
    };
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let app = app::build(&common, &dir).await?;
    let core = &app.core;
    let tools = core.tools().tools();
    let Some(def) = tools
        .iter()
        .find(|t| t.guest.plugin == args.plugin && t.id == args.tool)
        .cloned()
    else {
        let theirs: Vec<&str> = tools
            .iter()
            .filter(|t| t.guest.plugin == args.plugin)
            .map(|t| t.id.as_str())
            .collect();
        match theirs.is_empty() {
            true => bail!(
                "no loaded plugin {:?} offers tools; `warden plugin list` shows what is loaded",
                args.plugin
            ),
            false => bail!(
                "plugin {} has no tool {:?}; its tools: {}",
                args.plugin,
                args.tool,
                theirs.join(", ")
            ),
        }
    };
    let session = core
        .create_session(&dir, &format!("plugin call {} {}", args.plugin, args.tool))
        .await?;
    let agent = core.agents().get(core.agents().default_name())?.clone();
    let message_id = MessageId(id::ascending(MessageId::PREFIX));
    let call_id = "cli_1".to_string();
    // Who called comes first in the call's audit trail.
    core.ledger()
        .audit(&AuditEntry {
            seq: 0,
            session_id: session.id.clone(),
            message_id: Some(message_id.clone()),
            call_id: Some(call_id.clone()),
            at: now_ms(),
            stage: "caller".into(),
            subject: "cli:plugin call".into(),
            plugin_hash: None,
            decision: "called".into(),
            rule: None,
            duration_us: None,
            outcome: Some(def.id.clone()),
        })
        .await?;
    let ctx = CallContext {
        session_id: session.id.clone(),
        message_id,
        call_id: call_id.into(),
        agent: agent.name.clone(),
        directory: session.directory.clone(),
    };
    let rules = Rules::new(agent.policy.clone(), session.id.clone());
    let req = CallRequest::direct(ctx, def, input, rules);
    let report = boundary::run_audited(&core.call_env(), req).await;
    core.ledger().audit_all(&report.audit).await?;
    // The decisions and the guest's log, on standard error; the output on
    // standard output, as the model would see it.
    eprintln!("session {}", session.id);
    for row in &report.audit {
        let mut line = format!("  {} {} {}", row.stage, row.subject, row.decision);
        if let Some(rule) = &row.rule {
            line.push_str(&format!(" (rule {rule})"));
        }
        if let Some(outcome) = &row.outcome {
            line.push_str(&format!(": {}", outcome.trim_end()));
        }
        if let Some(us) = row.duration_us {
            line.push_str(&format!(" [{:.2} ms]", us as f64 / 1000.0));
        }
        eprintln!("{line}");
    }
    match report.outcome {
        CallOutcome::Completed { output, .. } => {
            if !output.title.is_empty() {
                eprintln!("title: {}", output.title);
            }
            say!("{}", output.output);
            Ok(ExitCode::SUCCESS)
        }
        CallOutcome::Failed { failure, .. } => {
            eprintln!("error: {failure}");
            Ok(ExitCode::from(1))
        }
    }
}
