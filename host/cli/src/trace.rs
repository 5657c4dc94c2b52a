//! `warden trace SESSION`: every tool call's state changes, with times and
//! durations, and what the host boundary decided about it.

use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;
use warden_core::ledger::AuditEntry;
use warden_protocol::{PartBody, SessionId};

use crate::session_cmd::{clip, time};
use crate::{Common, Format, app};

#[derive(Serialize)]
struct Transition {
    status: &'static str,
    at: i64,
    /// Milliseconds since the previous state of this call.
    since_previous_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interrupted: bool,
}

#[derive(Serialize)]
struct CallTrace {
    call_id: String,
    tool: String,
    message_id: String,
    transitions: Vec<Transition>,
    /// From the first state to the last.
    total_ms: i64,
    audit: Vec<AuditEntry>,
}

pub fn trace(id: &str, format: Format, common: Common) -> Result<ExitCode> {
    let ledger = app::ledger(&app::data_dir(&common)?)?;
    let id = SessionId(id.to_string());
    let session = ledger.session(&id)?;
    let events = ledger.part_events(&id)?;
    let audit = ledger.audit_trail(&id)?;

    let mut calls: Vec<CallTrace> = Vec::new();
    for e in events {
        let PartBody::Tool {
            call_id,
            tool,
            state,
            ..
        } = &e.part.body
        else {
            continue;
        };
        let idx = match calls
            .iter()
            .position(|c| &c.call_id == call_id && c.message_id == e.message_id.as_str())
        {
            Some(i) => i,
            None => {
                calls.push(CallTrace {
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    message_id: e.message_id.to_string(),
                    transitions: Vec::new(),
                    total_ms: 0,
                    audit: audit
                        .iter()
                        .filter(|a| {
                            a.call_id.as_deref() == Some(call_id)
                                && a.message_id.as_ref() == Some(&e.message_id)
                        })
                        .cloned()
                        .collect(),
                });
                calls.len() - 1
            }
        };
        let c = &mut calls[idx];
        let status = state.status();
        // Progress updates repeat `running`; the timeline keeps state changes.
        if c.transitions.last().is_some_and(|t| t.status == status) {
            continue;
        }
        let detail = match state {
            warden_protocol::ToolState::Running { input, .. } => {
                Some(clip(&input.to_string(), 120))
            }
            warden_protocol::ToolState::Completed { title, .. } => Some(clip(title, 120)),
            warden_protocol::ToolState::Error { error, .. } => Some(clip(error, 200)),
            warden_protocol::ToolState::Pending { .. } => None,
        };
        let since_previous_ms = c.transitions.last().map(|t| e.at - t.at);
        c.transitions.push(Transition {
            status,
            at: e.at,
            since_previous_ms,
            detail,
            interrupted: state.is_interrupted(),
        });
        c.total_ms = e.at - c.transitions[0].at;
    }

    if format == Format::Json {
        say!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"session": session.id, "calls": calls})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!("trace of {}  {}", session.id, session.directory);
    if calls.is_empty() {
        say!("(no tool calls)");
    }
    let origin = calls
        .first()
        .and_then(|c| c.transitions.first())
        .map_or(0, |t| t.at);
    for c in &calls {
        say!(
            "\n{}  {}  (message {})  {} ms in all",
            c.tool,
            c.call_id,
            c.message_id,
            c.total_ms
        );
        for t in &c.transitions {
            let offset = (t.at - origin) as f64 / 1000.0;
            let step = t
                .since_previous_ms
                .map_or(String::new(), |ms| format!("+{ms} ms"));
            let status = if t.interrupted {
                "error (interrupted)"
            } else {
                t.status
            };
            say!(
                "  {}  {offset:>8.3}s  {status:<20} {step:>8}  {}",
                time(t.at),
                t.detail.as_deref().unwrap_or("")
            );
        }
        for a in &c.audit {
            let took = a.duration_us.map_or(String::new(), |us| {
                format!(" in {:.3} ms", us as f64 / 1000.0)
            });
            let rule = a
                .rule
                .as_deref()
                .map_or(String::new(), |r| format!(" by `{r}`"));
            // What a guest printed can run over several lines: keep them under the row.
            let outcome = a
                .outcome
                .as_deref()
                .unwrap_or("")
                .replace('\n', "\n      | ");
            say!(
                "  audit: {} {} {}{rule}{took} → {outcome}",
                a.stage,
                a.subject,
                a.decision,
            );
        }
    }
    say!("\n(started {})", time(session.time.created));
    Ok(ExitCode::SUCCESS)
}
