//! The call table: the tool calls of one assistant message, and the only
//! place their states change. Every transition (pending → running →
//! completed | error, and cleanup's interrupt) is applied here through
//! [`ToolState`]'s methods and written with the audit rows that caused it,
//! in one transaction. A call costs two durable moments: pending is shown
//! while the model streams the arguments and written with running, and the
//! step's last result is written with the step's end (see [`super::writes`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warden_protocol::{CallId, MessageId, Part, PartBody, SessionId, ToolState, TransitionError};

use crate::boundary::{CallFailure, CallOutcome};
use crate::clock::now_ms;
use crate::error::Result;
use crate::ledger::{AuditEntry, Ledger, PartWrite, TimelineRow, id};
use crate::tool::ToolOutput;

use super::writes::StepWrites;

/// Progress is written to the ledger at most this often per call.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// Which open calls cleanup ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// Only calls still streaming (between retries: running ones go on).
    Pending,
    /// Pending and running calls (the end of a step).
    All,
}

pub(crate) struct CallTable<'a> {
    writes: Arc<StepWrites<'a>>,
    session_id: SessionId,
    message_id: MessageId,
    /// Tool parts of this message, in the order they began.
    parts: Vec<Part>,
    /// When each call's progress was last written.
    progress_written: HashMap<CallId, Instant>,
}

impl<'a> CallTable<'a> {
    pub(super) fn new(
        writes: Arc<StepWrites<'a>>,
        session_id: SessionId,
        message_id: MessageId,
    ) -> Self {
        CallTable {
            writes,
            session_id,
            message_id,
            parts: Vec::new(),
            progress_written: HashMap::new(),
        }
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The call of the current attempt with this id. Calls of an attempt
    /// that failed and was retried are set aside (ignored): a retry may
    /// reuse their ids (recorded streams and many OpenAI-compatible servers
    /// number calls deterministically), and its call is a new one, not a
    /// duplicate.
    pub fn index(&self, call_id: &CallId) -> Option<usize> {
        self.parts.iter().position(|p| {
            p.call_id() == Some(call_id.as_str())
                && !matches!(p.body, PartBody::Tool { ignored: true, .. })
        })
    }

    /// The tool a call of the current attempt named.
    pub fn name(&self, call_id: &CallId) -> Option<String> {
        match &self.parts[self.index(call_id)?].body {
            PartBody::Tool { tool, .. } => Some(tool.clone()),
            _ => None,
        }
    }

    pub fn state(&self, idx: usize) -> Option<&ToolState> {
        self.parts[idx].tool_state()
    }

    /// The call with this id, begun (pending: shown now, written with its
    /// next state) if the stream has not yet.
    pub fn open(&mut self, call_id: &CallId, name: &str) -> usize {
        if let Some(idx) = self.index(call_id) {
            return idx;
        }
        let part = Part {
            id: id::ascending("prt").into(),
            session_id: self.session_id.clone(),
            message_id: self.message_id.clone(),
            body: PartBody::Tool {
                call_id: call_id.to_string(),
                tool: name.to_string(),
                state: ToolState::pending(),
                provider_executed: false,
                ignored: false,
            },
        };
        self.writes
            .hold(&part, Some(TimelineRow::default()), &[], true);
        self.parts.push(part);
        self.parts.len() - 1
    }

    /// Argument text streamed for a pending call (kept in memory; the
    /// parsed arguments are written when it starts).
    pub fn append_raw(&mut self, call_id: &CallId, delta: &str) {
        if let Some(idx) = self.index(call_id)
            && let PartBody::Tool { state, .. } = &mut self.parts[idx].body
        {
            state.append_raw(delta);
        }
    }

    /// `pending → running`: the model finished the call.
    pub async fn start(
        &mut self,
        idx: usize,
        name: &str,
        provider_executed: bool,
        raw: &str,
        input: Value,
    ) -> Result<()> {
        if let PartBody::Tool {
            tool,
            provider_executed: pe,
            state,
            ..
        } = &mut self.parts[idx].body
        {
            *tool = name.to_string();
            *pe = provider_executed;
            if let ToolState::Pending { raw: r, .. } = state {
                *r = raw.to_string();
            }
        }
        self.apply(idx, &[], false, |s, now| s.start(input, now))
            .await
    }

    /// `running → error`, with the arguments the call ended with when known.
    pub async fn fail(
        &mut self,
        idx: usize,
        input: Option<Value>,
        failure: &CallFailure,
        audit: &[AuditEntry],
    ) -> Result<()> {
        self.fail_or_hold(idx, input, failure, audit, false).await
    }

    async fn fail_or_hold(
        &mut self,
        idx: usize,
        input: Option<Value>,
        failure: &CallFailure,
        audit: &[AuditEntry],
        hold: bool,
    ) -> Result<()> {
        let error = failure.to_string();
        self.apply(idx, audit, hold, |s, now| match input {
            Some(input) => s.fail_with(input, error, None, now),
            None => s.fail(error, None, now),
        })
        .await
    }

    /// `running → completed`.
    async fn complete(
        &mut self,
        idx: usize,
        input: Value,
        output: ToolOutput,
        audit: &[AuditEntry],
        hold: bool,
    ) -> Result<()> {
        self.apply(idx, audit, hold, |s, now| {
            s.complete(input, output.output, output.title, output.metadata, now)
        })
        .await
    }

    /// A result lands only on a running call with that id; anything else
    /// is dropped (its audit rows are still kept). `hold`: the step's last
    /// result, written with the step's end.
    pub async fn finish(
        &mut self,
        call_id: &CallId,
        outcome: CallOutcome,
        audit: &[AuditEntry],
        hold: bool,
    ) -> Result<()> {
        let running = self
            .index(call_id)
            .filter(|&i| matches!(self.state(i), Some(ToolState::Running { .. })));
        let Some(idx) = running else {
            tracing::warn!(
                %call_id,
                "a result for a tool call that is not running here was dropped"
            );
            return self.writes.audit_all(audit).await;
        };
        match outcome {
            CallOutcome::Completed { input, output } => {
                self.complete(idx, input, output, audit, hold).await
            }
            CallOutcome::Failed { input, failure } => {
                self.fail_or_hold(idx, Some(input), &failure, audit, hold)
                    .await
            }
        }
    }

    /// A guest's progress on a running call: the row is updated, the
    /// timeline is not (not a state change), and a chatty guest is written
    /// at most every [`PROGRESS_EVERY`].
    pub async fn progress(
        &mut self,
        call_id: &CallId,
        title: Option<String>,
        metadata: Value,
    ) -> Result<()> {
        let Some(idx) = self.index(call_id) else {
            return Ok(());
        };
        if let PartBody::Tool { state, .. } = &mut self.parts[idx].body
            && let Ok(next) = state.progress(title, metadata)
        {
            *state = next;
            let due = self
                .progress_written
                .get(call_id)
                .is_none_or(|t| t.elapsed() >= PROGRESS_EVERY);
            if due {
                self.writes
                    .put_part(&self.parts[idx], PartWrite::Delta(""))
                    .await?;
                self.progress_written
                    .insert(call_id.clone(), Instant::now());
            }
        }
        Ok(())
    }

    /// Cleanup: open calls become interrupted errors.
    pub async fn interrupt(&mut self, which: Open, reason: &str) -> Result<()> {
        for idx in 0..self.parts.len() {
            if self.is_open(idx, which) {
                self.interrupt_one(idx, reason, false).await?;
            }
        }
        Ok(())
    }

    /// Before a retry: calls the model never finished making are
    /// interrupted and set aside, like the failed attempt's text, so the
    /// model is never shown them.
    pub async fn set_aside(&mut self, reason: &str) -> Result<()> {
        for idx in 0..self.parts.len() {
            if self.is_open(idx, Open::Pending) {
                self.interrupt_one(idx, reason, true).await?;
            }
        }
        Ok(())
    }

    /// Whether a call of this step began running (so asking the model again
    /// would run its side effects twice). Calls set aside never started.
    pub fn any_started(&self) -> bool {
        self.parts.iter().any(|p| match &p.body {
            PartBody::Tool { state, ignored, .. } => {
                !ignored && !matches!(state, ToolState::Pending { .. })
            }
            _ => false,
        })
    }

    /// The arguments of a call, as far as they are known.
    pub fn input(&self, call_id: &CallId) -> Value {
        self.index(call_id)
            .and_then(|i| self.state(i).map(|s| s.input().clone()))
            .unwrap_or_else(|| json!({}))
    }

    /// A second call with an id already used in this step never runs, and
    /// is not dropped either: it gets a part of its own (its id suffixed, so
    /// every call stays paired with one result) that ends in an error the
    /// model is shown.
    pub async fn refuse_duplicate(
        &mut self,
        call_id: &CallId,
        name: &str,
        raw: &str,
    ) -> Result<()> {
        let n = self
            .parts
            .iter()
            .filter(|p| p.call_id().is_some_and(|c| c.starts_with(call_id.as_str())))
            .count();
        // Set-aside calls count too: the new id must be one no part has.
        let id = CallId(format!("{call_id}-duplicate-{n}"));
        tracing::warn!(
            %call_id,
            "the model sent two calls with one id; the second is refused"
        );
        let idx = self.open(&id, name);
        let input = match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        };
        self.apply(idx, &[], false, |s, now| s.start(input, now))
            .await?;
        let failure = CallFailure::DuplicateId {
            call_id: call_id.clone(),
            name: name.to_string(),
        };
        self.fail(idx, None, &failure, &[]).await
    }

    /// Tool parts of a message a dead process left open become interrupted
    /// errors (the same transition cleanup applies, written the same way).
    pub async fn recover(ledger: &Ledger, parts: Vec<Part>, reason: &str) -> Result<()> {
        let now = now_ms();
        for mut part in parts {
            if let PartBody::Tool { state, .. } = &mut part.body
                && let Some(next) = state.interrupt(reason, now)
            {
                *state = next;
                ledger
                    .transition(&part, TimelineRow::default(), &[])
                    .await?;
            }
        }
        Ok(())
    }

    fn is_open(&self, idx: usize, which: Open) -> bool {
        match self.state(idx) {
            Some(ToolState::Pending { .. }) => true,
            Some(ToolState::Running { .. }) => which == Open::All,
            _ => false,
        }
    }

    async fn interrupt_one(&mut self, idx: usize, reason: &str, set_aside: bool) -> Result<()> {
        let now = now_ms();
        if let PartBody::Tool { state, ignored, .. } = &mut self.parts[idx].body
            && let Some(next) = state.interrupt(reason, now)
        {
            let before = std::mem::replace(state, next);
            let was_ignored = std::mem::replace(ignored, *ignored | set_aside);
            let written = self
                .writes
                .transition(&self.parts[idx], TimelineRow::default(), &[])
                .await;
            if written.is_err() {
                // The table says what the ledger holds.
                if let PartBody::Tool { state, ignored, .. } = &mut self.parts[idx].body {
                    *state = before;
                    *ignored = was_ignored;
                }
            }
            written?;
        }
        Ok(())
    }

    /// Apply a transition to call `idx` and record it with `audit` (or,
    /// with `hold`, keep both for the step's end). An illegal transition is
    /// logged and not applied (the recorded history stays true); its audit
    /// rows are still kept.
    async fn apply(
        &mut self,
        idx: usize,
        audit: &[AuditEntry],
        hold: bool,
        f: impl FnOnce(&ToolState, i64) -> std::result::Result<ToolState, TransitionError>,
    ) -> Result<()> {
        let now = now_ms();
        let part = &mut self.parts[idx];
        // The state left behind: a finishing call's row keeps the arguments
        // it started with when a hook rewrote them.
        let mut before = None;
        if let PartBody::Tool { state, call_id, .. } = &mut part.body {
            match f(state, now) {
                Ok(next) => before = Some(std::mem::replace(state, next)),
                Err(e) => {
                    tracing::warn!(call_id = %call_id, "{e}");
                    return self.writes.audit_all(audit).await;
                }
            }
        }
        let row = TimelineRow {
            started_with: match &before {
                Some(ToolState::Running { input, .. }) => Some(input),
                _ => None,
            },
            at: None,
        };
        if hold {
            self.writes.hold(part, Some(row), audit, false);
            return Ok(());
        }
        let written = self.writes.transition(part, row, audit).await;
        if written.is_err()
            && let (Some(before), PartBody::Tool { state, .. }) = (before, &mut part.body)
        {
            // Not in the ledger, so not so here either: nothing later may
            // take the call for finished.
            *state = before;
        }
        written
    }
}
