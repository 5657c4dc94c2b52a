//! `warden trace SESSION`: where a session's time went. Text: the session's
//! phases, then every tool call's states with times and durations and what
//! the host boundary decided; `json`: the same as one JSON document; `svg`:
//! the same drawn as a timeline (see [`svg`]).

pub mod svg;
pub mod timeline;
pub mod zoom;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::ValueEnum;
use warden_protocol::SessionId;

use crate::session_cmd::time;
use crate::table::table;
use crate::{Common, app};
use svg::duration;

/// How `trace` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// Tables for people: the session's phases, then each call's states.
    #[default]
    Text,
    /// One JSON document: `{session, directory, start, end, status, calls}`.
    Json,
    /// A self-contained SVG picture of the timeline: a lane for the
    /// session's status and one per call.
    Svg,
}

#[derive(clap::Args)]
pub struct TraceArgs {
    /// The session id (`warden session list` shows them).
    pub id: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: TraceFormat,
    /// Only this call (its id, as `trace` lists it), from its first state to
    /// its last: its hooks and the model's spans around it at their size.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub call: Option<String>,
    /// Only from this many seconds after the session's start (e.g. 12.5).
    #[arg(long)]
    pub from: Option<f64>,
    /// Only until this many seconds after the session's start.
    #[arg(long)]
    pub to: Option<f64>,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

pub async fn trace(args: TraceArgs) -> Result<ExitCode> {
    let ledger = app::ledger(&args.common).await?;
    let id = SessionId(args.id.clone());
    let session = ledger.session(&id).await?;
    let t = timeline::build(
        session.id.as_str(),
        &session.directory,
        &ledger.part_events(&id).await?,
        &ledger.phases(&id).await?,
        &ledger.audit_trail(&id).await?,
    );
    let mut t = t;
    if let Some(call) = &args.call {
        zoom::zoom(&mut t, &zoom::Window::Call(call.clone()))?;
    } else if args.from.is_some() || args.to.is_some() {
        zoom::zoom(&mut t, &zoom::Window::Between(args.from, args.to))?;
    }
    let out = match args.format {
        TraceFormat::Json => serde_json::to_string_pretty(&t)? + "\n",
        TraceFormat::Svg => svg::render(&t),
        TraceFormat::Text => text(&t, session.time.created),
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?
        }
        None => {
            use std::io::Write as _;
            // The trace holds what models and tools wrote: never raw on a terminal.
            let out = warden_protocol::text::json_terminal_safe(&out);
            let _ = std::io::stdout().write_all(out.as_bytes());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn offset(at: i64, origin: i64) -> String {
    format!("{:.3}s", (at - origin) as f64 / 1000.0)
}

fn text(t: &timeline::Timeline, created: i64) -> String {
    let mut out = format!("trace of {}  {}\n", t.session, t.directory);
    let origin = t.start;
    if !t.status.is_empty() {
        let mut phases = table(&["at", "offset", "session", "took", "detail"]);
        for s in &t.status {
            phases.add_row(vec![
                time(s.start),
                offset(s.start, origin),
                s.state.clone(),
                duration(s.ms),
                s.detail.clone().unwrap_or_default(),
            ]);
        }
        out += &format!("\n{phases}\n");
    }
    if t.calls.is_empty() {
        out += "(no tool calls)\n";
    }
    for c in &t.calls {
        out += &format!(
            "\n{}  {}  (message {})  {}  {} ms in all\n",
            c.tool, c.call_id, c.message_id, c.outcome, c.total_ms
        );
        let mut states = table(&["at", "offset", "state", "took", "detail"]);
        for (i, t) in c.transitions.iter().enumerate() {
            let status = if t.interrupted {
                "error (interrupted)"
            } else {
                t.status
            };
            let took = c
                .transitions
                .get(i + 1)
                .map_or(String::new(), |next| format!("{} ms", next.at - t.at));
            states.add_row(vec![
                time(t.at),
                offset(t.at, origin),
                status.to_string(),
                took,
                t.detail.clone().unwrap_or_default(),
            ]);
        }
        out += &format!("{states}\n");
        let mut phases = table(&["phase", "from", "took", "who"]);
        for p in &c.phases {
            phases.add_row(vec![
                p.state.clone(),
                offset(p.start, origin),
                duration(p.ms),
                p.detail.clone().unwrap_or_default(),
            ]);
        }
        out += &format!("{phases}\n");
        if !c.audit.is_empty() {
            let mut audit = table(&["audit", "subject", "decision", "rule", "took", "outcome"]);
            for a in &c.audit {
                audit.add_row(vec![
                    a.stage.clone(),
                    a.subject.clone(),
                    a.decision.clone(),
                    a.rule.clone().unwrap_or_default(),
                    crate::table::took_us(a.duration_us),
                    a.outcome.clone().unwrap_or_default(),
                ]);
            }
            out += &format!("{audit}\n");
        }
    }
    out += &format!("\n(started {})\n", time(created));
    out
}
