//! A session as a timeline: one lane for the session's own status (model
//! requests, first tokens, streaming, retry waits, tool work between steps)
//! and one lane per tool call (pending, awaiting permission, each hook,
//! running, and how it ended). Built from the ledger alone: the tool parts'
//! recorded states, the session's phase marks and the audit trail.

use serde::Serialize;
use warden_core::ledger::AuditEntry;
use warden_core::ledger::PartEvent;
use warden_core::ledger::phase::{Phase, PhaseKind};
use warden_protocol::{Millis, PartBody, ToolState};

use crate::session_cmd::clip;

/// One state of a lane, from `start` to `end` (ms since the epoch).
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    /// What the lane was doing: `pending`, `awaiting permission`, `hook
    /// before`, `running`, `hook after` (calls); `model request`,
    /// `streaming`, `retry wait`, `tools` (the session).
    pub state: String,
    /// Who or what, when the state alone does not say (a hook's plugin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub start: Millis,
    pub end: Millis,
    pub ms: i64,
}

impl Span {
    fn new(state: &str, detail: Option<String>, start: Millis, end: Millis) -> Span {
        let end = end.max(start);
        Span {
            state: state.to_string(),
            detail,
            start,
            end,
            ms: end - start,
        }
    }
}

/// One recorded state change of a call.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub status: &'static str,
    pub at: Millis,
    /// Milliseconds since the previous state of this call.
    pub since_previous_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// One tool call's lane.
#[derive(Debug, Clone, Serialize)]
pub struct CallLane {
    pub call_id: String,
    pub tool: String,
    pub message_id: String,
    /// How it ended: `completed`, `error`, `error (interrupted)`; or where it
    /// stopped when the trace was read (`pending`, `running`).
    pub outcome: String,
    pub transitions: Vec<Transition>,
    /// The call's states laid end to end.
    pub phases: Vec<Span>,
    /// From the first state to the last.
    pub total_ms: i64,
    pub audit: Vec<AuditEntry>,
}

/// The whole session.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub session: String,
    pub directory: String,
    pub start: Millis,
    pub end: Millis,
    /// The session's status lane.
    pub status: Vec<Span>,
    pub calls: Vec<CallLane>,
}

/// Build the timeline from what the ledger recorded.
pub fn build(
    session: &str,
    directory: &str,
    events: &[PartEvent],
    phases: &[Phase],
    audit: &[AuditEntry],
) -> Timeline {
    let mut calls: Vec<CallLane> = Vec::new();
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
                calls.push(CallLane {
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    message_id: e.message_id.to_string(),
                    outcome: String::new(),
                    transitions: Vec::new(),
                    phases: Vec::new(),
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
            ToolState::Running { input, .. } => Some(clip(&input.to_string(), 120)),
            ToolState::Completed { title, .. } => Some(clip(title, 120)),
            ToolState::Error { error, .. } => Some(clip(error, 200)),
            ToolState::Pending { .. } => None,
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
    for c in &mut calls {
        c.phases = call_phases(c);
        c.outcome = match c.transitions.last() {
            Some(t) if t.interrupted => "error (interrupted)".into(),
            Some(t) => t.status.into(),
            None => "pending".into(),
        };
    }
    let mut start = Millis::MAX;
    let mut end = Millis::MIN;
    for t in calls.iter().flat_map(|c| &c.transitions) {
        start = start.min(t.at);
        end = end.max(t.at);
    }
    for p in phases {
        start = start.min(p.at);
        end = end.max(p.at);
        if let PhaseKind::RetryWait { until, .. } = p.kind {
            end = end.max(until);
        }
    }
    if start > end {
        (start, end) = (0, 0);
    }
    let status = status_lane(phases, end);
    Timeline {
        session: session.to_string(),
        directory: directory.to_string(),
        start,
        end,
        status,
        calls,
    }
}

/// A call's states end to end: pending, then its running time split by what
/// the audit trail says happened inside it (a question waiting for a person,
/// each hook, the tool guest itself).
fn call_phases(c: &CallLane) -> Vec<Span> {
    let mut out = Vec::new();
    let at = |s: &str| c.transitions.iter().find(|t| t.status == s).map(|t| t.at);
    let first = c.transitions.first().map_or(0, |t| t.at);
    let last = c.transitions.last().map_or(first, |t| t.at);
    let running = at("running");
    let end = match c.transitions.last() {
        Some(t) if matches!(t.status, "completed" | "error") => Some(t.at),
        _ => None,
    };
    if let Some(p) = at("pending") {
        out.push(Span::new(
            "pending",
            None,
            p,
            running.or(end).unwrap_or(last),
        ));
    }
    let Some(run_start) = running else {
        return out;
    };
    let run_end = end.unwrap_or(last).max(run_start);
    // What happened inside `running`, from the audit trail (each row is
    // written as its stage ends, with how long it took). Each box runs from
    // where the previous one ended to where its stage ended, so the boxes
    // lie end to end and the host's own work between stages (rules, JSON,
    // the ledger) goes to the stage it led to.
    let timed = |stage: &str| -> Vec<&AuditEntry> {
        let mut rows: Vec<&AuditEntry> = c
            .audit
            .iter()
            .filter(|a| a.stage == stage && a.duration_us.is_some())
            .collect();
        rows.sort_by_key(|a| (a.at, a.seq));
        rows
    };
    let started = |a: &AuditEntry| a.at - a.duration_us.unwrap_or(0) / 1000;
    // Before the tool: the questions the host asked a person, and the
    // before hooks. (A guest's own question, `guest:…`, is asked while the
    // tool runs: it is part of running.)
    let mut before: Vec<&AuditEntry> = timed("ask")
        .into_iter()
        .filter(|a| !a.subject.starts_with("guest:"))
        .chain(timed("before"))
        .collect();
    before.sort_by_key(|a| (a.at, a.seq));
    let after = timed("after");
    let mut cursor = run_start;
    for a in before {
        let (state, detail) = if a.stage == "ask" {
            ("awaiting permission", a.subject.clone())
        } else {
            ("hook before", hook_name(&a.subject))
        };
        let stop = a.at.clamp(cursor, run_end);
        out.push(Span::new(state, Some(detail), cursor, stop));
        cursor = stop;
    }
    let run_stop = after
        .first()
        .map_or(run_end, |a| started(a).clamp(cursor, run_end));
    out.push(Span::new("running", None, cursor, run_stop));
    cursor = run_stop;
    for a in &after {
        let stop = a.at.clamp(cursor, run_end);
        out.push(Span::new(
            "hook after",
            Some(hook_name(&a.subject)),
            cursor,
            stop,
        ));
        cursor = stop;
    }
    // Whatever the host did after the last stage belongs to it.
    if cursor < run_end
        && let Some(last) = out.last_mut()
    {
        last.end = run_end;
        last.ms = last.end - last.start;
    }
    out
}

fn hook_name(subject: &str) -> String {
    subject.strip_prefix("hook:").unwrap_or(subject).to_string()
}

/// The session's lane: each phase mark starts a span that lasts until the
/// next one (the last until the end of the trace).
fn status_lane(phases: &[Phase], end: Millis) -> Vec<Span> {
    let mut out = Vec::new();
    for (i, p) in phases.iter().enumerate() {
        let next = phases.get(i + 1).map_or(end, |n| n.at);
        let (state, detail, stop) = match &p.kind {
            PhaseKind::ModelRequest { attempt } => (
                "model request",
                (*attempt > 1).then(|| format!("attempt {attempt}")),
                next,
            ),
            PhaseKind::FirstToken => ("streaming", None, next),
            PhaseKind::StepFinish { reason } => {
                if reason == "tool-calls" {
                    ("tools", None, next)
                } else {
                    // The answer is done: nothing more to draw after it.
                    ("finished", Some(reason.clone()), p.at)
                }
            }
            PhaseKind::RetryWait {
                attempt, message, ..
            } => (
                "retry wait",
                Some(format!("attempt {attempt} failed: {}", clip(message, 80))),
                next,
            ),
        };
        if state == "finished" {
            continue;
        }
        out.push(Span::new(state, detail, p.at, stop));
    }
    out
}
