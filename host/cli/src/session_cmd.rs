//! `warden session list|show|export|resume`.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use warden_protocol::{MessageInfo, MessageWithParts, PartBody, SessionId, ToolState};

use crate::{Common, Format, app, render, run};

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Every session in the ledger, newest first.
    List {
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// A session's messages and parts.
    Show {
        id: String,
        #[arg(long, value_enum, default_value_t)]
        format: Format,
        /// Print each tool call's whole output under it (text format).
        #[arg(long)]
        outputs: bool,
    },
    /// Everything recorded about a session, as JSON: messages, part timeline, audit trail.
    Export {
        id: String,
        /// Only json is supported; accepted for symmetry with the other commands.
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
    },
    /// Continue a session from the ledger alone (after a crash, or to retry).
    Resume {
        id: String,
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

pub async fn session(command: SessionCommand, common: Common) -> Result<ExitCode> {
    match command {
        SessionCommand::List { format } => {
            let ledger = app::ledger(&common).await?;
            let sessions = ledger.sessions().await?;
            if format == Format::Json {
                say!("{}", serde_json::to_string_pretty(&sessions)?);
            } else if sessions.is_empty() {
                say!("no sessions in {}", ledger.path());
            } else {
                let mut t = crate::table::table(&["session", "updated", "title", "directory"]);
                for s in sessions {
                    t.add_row(vec![
                        s.id.to_string(),
                        time(s.time.updated),
                        clip(&s.title, 50),
                        s.directory,
                    ]);
                }
                say!("{t}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Show {
            id,
            format,
            outputs,
        } => {
            let ledger = app::ledger(&common).await?;
            let id = SessionId(id);
            let info = ledger.session(&id).await?;
            let messages = ledger.messages(&id).await?;
            if format == Format::Json {
                say!(
                    "{}",
                    serde_json::to_string_pretty(&json!({"session": info, "messages": messages}))?
                );
            } else {
                say!("session {}  {}", info.id, info.directory);
                for m in &messages {
                    show_message(m, outputs);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Export { id, format: _ } => {
            let ledger = app::ledger(&common).await?;
            let id = SessionId(id);
            let export = json!({
                "session": ledger.session(&id).await?,
                "messages": ledger.messages(&id).await?,
                "part_events": ledger.part_events(&id).await?,
                "audit": ledger.audit_trail(&id).await?,
            });
            say!("{}", serde_json::to_string_pretty(&export)?);
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Resume { id, format } => {
            let ledger = app::ledger(&common).await?;
            let id = SessionId(id);
            let info = ledger.session(&id).await?;
            drop(ledger);
            let app = app::build(&common, std::path::Path::new(&info.directory)).await?;
            let core = app.core.clone();
            let sid = id.clone();
            let result =
                render::drive(&app.core, &id, format, async move { core.run(&sid).await }).await;
            run::finish(format, &id, result)
        }
    }
}

fn show_message(m: &MessageWithParts, outputs: bool) {
    match &m.info {
        MessageInfo::User(u) => say!("\n[user {}] agent {} model {}", u.id, u.agent, u.model),
        MessageInfo::Assistant(a) => {
            let finish = a.finish.map_or("-", |f| f.as_str());
            say!(
                "\n[assistant {}{}] finish {finish}  tokens in {} out {}  cost ${:.6}",
                a.id,
                if a.summary { ", summary" } else { "" },
                a.tokens.input,
                a.tokens.output,
                a.cost
            );
            if let Some(e) = &a.error {
                say!("  error: {}", e.message());
            }
        }
    }
    for p in &m.parts {
        match &p.body {
            PartBody::Text { text, .. } => say!("{text}"),
            PartBody::Reasoning { text, .. } => say!("(reasoning) {}", clip(text, 200)),
            PartBody::Tool {
                call_id,
                tool,
                state,
                ..
            } => {
                let summary = match state {
                    ToolState::Completed { title, output, .. } => {
                        format!("completed: {title} ({} bytes)", output.len())
                    }
                    ToolState::Error {
                        error, interrupted, ..
                    } => {
                        format!(
                            "error{}: {}",
                            if *interrupted { " (interrupted)" } else { "" },
                            clip(error, 200)
                        )
                    }
                    other => other.status().to_string(),
                };
                say!(
                    "  tool {tool} {call_id} {} -> {summary}",
                    clip(&state.input().to_string(), 100)
                );
                if outputs && let ToolState::Completed { output, .. } = state {
                    for line in output.lines() {
                        say!("    | {line}");
                    }
                }
            }
            PartBody::StepStart {} => {}
            PartBody::StepFinish { reason, tokens, .. } => {
                say!(
                    "  step finished: {} (in {} / out {})",
                    reason.as_str(),
                    tokens.input,
                    tokens.output
                )
            }
            PartBody::Compaction { .. } => say!("  (compaction)"),
        }
    }
}

pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// At most `max` characters of `s` on one line, marked `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    let one = s.replace('\n', " ");
    if one.chars().count() <= max {
        one
    } else {
        format!("{}…", one.chars().take(max).collect::<String>())
    }
}
