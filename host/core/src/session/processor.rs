//! The processor: consumes one model stream of [`LlmEvent`]s and writes it
//! into the assistant message as parts, live. It runs tool calls through the
//! host boundary as they complete, feeds their results back into the tool
//! parts, and tells the loop what to do next: `continue`, `stop` (blocked by
//! a denial, or the assistant errored) or `compact` (context overflow).
//!
//! Tool parts change state only through [`ToolState`]'s transitions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use warden_protocol::part::TextTime;
use warden_protocol::{
    Action, AssistantInfo, Event, LlmEvent, LlmRequest, MessageError, MessageInfo,
    MessageWithParts, Part, PartBody, PermissionReply, PermissionRequest, PermissionTool,
    ProviderError, SessionInfo, SessionStatus, ToolState,
};

use super::CoreInner;
use super::history::assistant;
use super::phase_marks::PhaseMarks;
use crate::agent::Agent;
use crate::clock::now_ms;
use crate::error::{CoreError, Result};
use crate::ledger::{PartWrite, id};
use crate::llm::{EventStream, ResolvedModel};
use crate::permission;
use crate::tool::ToolDef;
use crate::tool::call::{self, CallEnv, CallOutcome, CallRequest};

/// The last this many tool calls identical → ask `doom_loop`.
const DOOM_LOOP_THRESHOLD: usize = 3;
/// Said of tool calls an abort stopped.
const ABORTED: &str = "the session was aborted before the call finished";
/// Streamed text is written to the ledger at most this often (and at its end).
const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// What the loop does after a processing pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    Stop,
    Compact,
}

/// Why consuming a stream ended early.
enum Halt {
    Provider(ProviderError),
    Cancelled,
    Core(CoreError),
}

impl From<CoreError> for Halt {
    fn from(e: CoreError) -> Self {
        Halt::Core(e)
    }
}

/// Results and progress from tool calls running in their own tasks.
enum Feedback {
    Done {
        call_id: String,
        outcome: CallOutcome,
    },
    /// A guest reported progress; the latest report is in the slot (reports
    /// that come faster than they are written replace each other).
    Progress { call_id: String, slot: ProgressSlot },
}

type ProgressSlot = Arc<std::sync::Mutex<Option<(Option<String>, Value)>>>;

/// Progress is written to the ledger at most this often per call.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// A text or reasoning part being streamed.
struct Streamed {
    part: Part,
    unflushed: String,
    flushed_at: Instant,
}

pub(crate) struct Processor<'a> {
    core: &'a CoreInner,
    session: &'a SessionInfo,
    agent: &'a Agent,
    model: &'a ResolvedModel,
    info: AssistantInfo,
    history: &'a [Arc<MessageWithParts>],
    tools: Vec<ToolDef>,
    cancel: CancellationToken,
    /// Tool parts of this message, in the order they began.
    calls: Vec<Part>,
    streamed: HashMap<String, Streamed>,
    /// Text and reasoning parts finished during the current attempt.
    attempt_parts: Vec<Part>,
    /// When each call's progress was last written.
    progress_written: HashMap<String, Instant>,
    tasks: JoinSet<()>,
    in_flight: usize,
    feedback: mpsc::UnboundedSender<Feedback>,
    feedback_rx: Option<mpsc::UnboundedReceiver<Feedback>>,
    blocked: bool,
    needs_compaction: bool,
    saw_finish: bool,
}

impl<'a> Processor<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: &'a CoreInner,
        session: &'a SessionInfo,
        agent: &'a Agent,
        model: &'a ResolvedModel,
        info: AssistantInfo,
        history: &'a [Arc<MessageWithParts>],
        tools: Vec<ToolDef>,
        cancel: CancellationToken,
    ) -> Self {
        let (feedback, rx) = mpsc::unbounded_channel();
        Processor {
            core,
            session,
            agent,
            model,
            info,
            history,
            tools,
            cancel,
            calls: Vec::new(),
            streamed: HashMap::new(),
            attempt_parts: Vec::new(),
            progress_written: HashMap::new(),
            tasks: JoinSet::new(),
            in_flight: 0,
            feedback,
            feedback_rx: Some(rx),
            blocked: false,
            needs_compaction: false,
            saw_finish: false,
        }
    }

    /// Ask the model (retrying provider failures per the policy), write its
    /// answer, run its tool calls, clean up, and say what comes next.
    pub(crate) async fn process(mut self, request: LlmRequest) -> Result<Outcome> {
        let Some(mut rx) = self.feedback_rx.take() else {
            return Err(CoreError::Internal("a processor was run twice".into()));
        };
        let session_id = self.session.id.clone();
        let marks = PhaseMarks::new(&self.core.ledger, &session_id, &self.info.id);
        let mut attempt = 0u32;
        let result = loop {
            attempt += 1;
            self.saw_finish = false;
            marks.request(attempt);
            let started = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Err(Halt::Cancelled),
                s = self.model.provider.stream(request.clone()) => s.map_err(Halt::Provider),
            };
            let r = match started {
                Ok(stream) => self.consume(marks.watch(stream), &mut rx).await,
                Err(h) => Err(h),
            };
            match r {
                // Asking again would have the model call the same tools again,
                // running their side effects twice: end the step with the calls
                // it made, and let their results go back to it.
                Err(Halt::Provider(e)) if self.any_call_started() => {
                    self.info
                        .finish
                        .get_or_insert(warden_protocol::FinishReason::ToolCalls);
                    self.core.ledger.bus().publish(Event::SessionWarning {
                        session_id: session_id.clone(),
                        message: format!(
                            "the model's stream failed after it had called tools ({e}); the step ends with those calls instead of asking again"
                        ),
                    });
                    break Ok(());
                }
                Err(Halt::Provider(e)) => match self.core.retry.delay(attempt, &e) {
                    Some(wait) => {
                        // What the failed attempt streamed is closed and set aside
                        // (kept, but never shown to the model), so the retry's
                        // answer is not preceded by a fragment of itself.
                        self.close_streamed()?;
                        self.ignore_attempt()?;
                        self.interrupt_calls(
                            true,
                            "the model's stream failed before the call was complete",
                        )?;
                        marks.retry(attempt, wait, &e);
                        self.core.status.set(
                            &session_id,
                            SessionStatus::Retry {
                                attempt,
                                message: e.to_string(),
                                next: now_ms() + wait.as_millis() as i64,
                            },
                        );
                        let cancelled = tokio::select! {
                            _ = self.cancel.cancelled() => true,
                            _ = tokio::time::sleep(wait) => false,
                        };
                        self.core.status.set(&session_id, SessionStatus::Busy);
                        if cancelled {
                            break Err(Halt::Cancelled);
                        }
                    }
                    None => break Err(Halt::Provider(e)),
                },
                other => break other,
            }
        };

        let cleanup_reason = match result {
            Ok(()) => {
                if self.drain(&mut rx).await? {
                    ABORTED
                } else {
                    "the model's stream ended before the call was complete"
                }
            }
            Err(Halt::Provider(e)) => {
                self.drain(&mut rx).await?;
                let error = if e.kind == warden_protocol::llm::ErrorKind::ContextOverflow {
                    self.needs_compaction = true;
                    MessageError::ContextOverflow {
                        message: e.message.clone(),
                    }
                } else {
                    MessageError::Provider {
                        message: e.message.clone(),
                        status: e.status,
                    }
                };
                self.core.ledger.bus().publish(Event::SessionError {
                    session_id: session_id.clone(),
                    message_id: Some(self.info.id.clone()),
                    error: error.clone(),
                });
                self.info.error = Some(error);
                "the model's request failed before the call was complete"
            }
            Err(Halt::Cancelled) => {
                self.tasks.abort_all();
                self.info.error = Some(MessageError::Aborted {
                    message: "the session was cancelled".into(),
                });
                ABORTED
            }
            Err(Halt::Core(e)) => {
                self.tasks.abort_all();
                // Best effort: leave no open parts behind, then report the real failure.
                let _ = self.close_streamed();
                let _ =
                    self.interrupt_calls(false, "warden stopped this step after an internal error");
                self.info.time.completed = Some(now_ms());
                let _ = self
                    .core
                    .ledger
                    .put_message(&MessageInfo::Assistant(self.info.clone()));
                return Err(e);
            }
        };

        self.close_streamed()?;
        self.interrupt_calls(false, cleanup_reason)?;
        self.info.time.completed = Some(now_ms());
        self.core
            .ledger
            .put_message(&MessageInfo::Assistant(self.info.clone()))?;

        Ok(if self.needs_compaction {
            Outcome::Compact
        } else if self.blocked || self.info.error.is_some() {
            Outcome::Stop
        } else {
            Outcome::Continue
        })
    }

    /// Consume one stream until it ends, fails, or the session is cancelled.
    async fn consume(
        &mut self,
        mut stream: EventStream,
        rx: &mut mpsc::UnboundedReceiver<Feedback>,
    ) -> Result<(), Halt> {
        let cancel = self.cancel.clone();
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(Halt::Cancelled),
                Some(fb) = rx.recv() => self.apply(fb)?,
                ev = stream.next() => match ev {
                    Some(ev) => self.handle(ev).await?,
                    None => break,
                },
            }
            if self.needs_compaction {
                return Ok(());
            }
        }
        if !self.saw_finish {
            return Err(Halt::Provider(ProviderError::new(
                warden_protocol::llm::ErrorKind::Truncated,
                "the model's stream ended before it finished",
            )));
        }
        Ok(())
    }

    /// Wait for the tool calls still running; `true` if the session was
    /// cancelled meanwhile (the calls are then stopped).
    async fn drain(&mut self, rx: &mut mpsc::UnboundedReceiver<Feedback>) -> Result<bool> {
        while self.in_flight > 0 {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    self.tasks.abort_all();
                    self.info.error.get_or_insert(MessageError::Aborted { message: "the session was cancelled".into() });
                    return Ok(true);
                }
                Some(fb) = rx.recv() => self.apply(fb)?,
                // A call task that died without reporting (a bug, a panic) must
                // not leave the step waiting for it forever.
                Some(joined) = self.tasks.join_next() => {
                    if let Err(e) = joined && e.is_panic() {
                        tracing::error!("a tool call task panicked; its part ends as an error");
                        self.in_flight = self.in_flight.saturating_sub(1);
                        self.fail_orphaned_running("warden failed while running this call")?;
                    }
                }
            }
        }
        Ok(false)
    }

    /// Whether a tool call of this step has begun running.
    fn any_call_started(&self) -> bool {
        self.calls.iter().any(|p| {
            p.tool_state()
                .is_some_and(|s| !matches!(s, ToolState::Pending { .. }))
        })
    }

    /// Running calls whose task is gone end as interrupted errors.
    fn fail_orphaned_running(&mut self, reason: &str) -> Result<()> {
        if self.in_flight == 0 {
            self.interrupt_calls(false, reason)?;
        }
        Ok(())
    }

    async fn handle(&mut self, ev: LlmEvent) -> Result<(), Halt> {
        match ev {
            LlmEvent::Start => {}
            LlmEvent::StartStep => {
                self.write_new(PartBody::StepStart {})?;
            }
            LlmEvent::TextStart { id } => self.start_streamed(id, false)?,
            LlmEvent::ReasoningStart { id } => self.start_streamed(id, true)?,
            // Some providers send deltas with no start: the first delta starts the part.
            LlmEvent::TextDelta { id, text } => {
                self.start_streamed(id.clone(), false)?;
                self.append_streamed(&id, &text)?;
            }
            LlmEvent::ReasoningDelta { id, text } => {
                self.start_streamed(id.clone(), true)?;
                self.append_streamed(&id, &text)?;
            }
            LlmEvent::TextEnd { id } => self.end_streamed(&id, None)?,
            LlmEvent::ReasoningEnd { id, metadata } => self.end_streamed(&id, metadata)?,
            LlmEvent::ToolInputStart { call_id, name } => {
                self.ensure_pending(&call_id, &name)?;
            }
            LlmEvent::ToolInputDelta { call_id, delta } => {
                if let Some(p) = self.call_mut(&call_id)
                    && let PartBody::Tool { state, .. } = &mut p.body
                {
                    state.append_raw(&delta);
                }
            }
            LlmEvent::ToolInputEnd { .. } => {}
            LlmEvent::ToolCall {
                call_id,
                name,
                input,
                provider_executed,
            } => {
                self.tool_call(call_id, name, input, provider_executed)
                    .await?
            }
            LlmEvent::ToolResult {
                call_id,
                output,
                title,
                metadata,
            } => {
                // Results from the stream are for provider-executed tools.
                let input = self.call_input(&call_id);
                self.finish_call(
                    &call_id,
                    CallOutcome::Completed {
                        input,
                        output: crate::tool::ToolOutput {
                            output,
                            title,
                            metadata,
                        },
                    },
                )?;
            }
            LlmEvent::ToolError { call_id, error } => {
                let input = self.call_input(&call_id);
                self.finish_call(
                    &call_id,
                    CallOutcome::Failed {
                        input,
                        error,
                        denied: false,
                    },
                )?;
            }
            LlmEvent::FinishStep { reason, usage, .. } => {
                self.saw_finish = true;
                let tokens = usage.tokens();
                let cost = self.model.info.prices.cost(&tokens);
                self.info.finish = Some(reason);
                self.info.tokens = tokens;
                self.info.cost += cost;
                self.write_new(PartBody::StepFinish {
                    reason,
                    tokens,
                    cost,
                })?;
                self.core
                    .ledger
                    .put_message(&MessageInfo::Assistant(self.info.clone()))?;
                // A summary is allowed to be big: it is what makes room.
                if !self.info.summary && super::compaction::is_overflow(&tokens, &self.model.info) {
                    self.needs_compaction = true;
                }
            }
            LlmEvent::Finish { reason, .. } => {
                self.saw_finish = true;
                if self.info.finish.is_none() {
                    self.info.finish = Some(reason);
                }
            }
            LlmEvent::Error { error } => return Err(Halt::Provider(error)),
        }
        Ok(())
    }

    // ---- tool calls ----

    async fn tool_call(
        &mut self,
        call_id: String,
        name: String,
        raw: String,
        provider_executed: bool,
    ) -> Result<(), Halt> {
        let idx = self.ensure_pending(&call_id, &name)?;
        if !matches!(
            self.calls[idx].tool_state(),
            Some(ToolState::Pending { .. })
        ) {
            return self.refuse_duplicate(&call_id, &name, &raw);
        }
        if let PartBody::Tool {
            tool,
            provider_executed: pe,
            state,
            ..
        } = &mut self.calls[idx].body
        {
            *tool = name.clone();
            *pe = provider_executed;
            if let ToolState::Pending { raw: r, .. } = state {
                *r = raw.clone();
            }
        }

        // Arguments: JSON, and an object. Anything else still runs the machine
        // (pending → running → error) so the model is told what was wrong.
        let parsed: std::result::Result<Value, String> = match serde_json::from_str::<Value>(&raw) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(other) => Err(format!(
                "the arguments must be a JSON object, but the model sent {}: {}",
                json_kind(&other),
                clip(&raw, 200)
            )),
            Err(e) => Err(format!(
                "the arguments are not valid JSON ({e}): {}",
                clip(&raw, 200)
            )),
        };
        let input = parsed.as_ref().cloned().unwrap_or_else(|_| json!({}));
        self.transition(idx, |s, now| s.start(input.clone(), now))?;
        if let Err(error) = parsed {
            self.transition(idx, |s, now| s.fail(error.clone(), None, now))?;
            return Ok(());
        }
        if provider_executed {
            return Ok(()); // its result comes in the stream
        }

        let Some(def) = self.tools.iter().find(|t| t.id == name).cloned() else {
            let offered: Vec<&str> = self.tools.iter().map(|t| t.id.as_str()).collect();
            let error = if offered.is_empty() {
                format!("unknown tool `{name}`: no tools are available on this step")
            } else {
                format!(
                    "unknown tool `{name}`; the tools available are: {}",
                    offered.join(", ")
                )
            };
            self.transition(idx, |s, now| s.fail(error.clone(), None, now))?;
            return Ok(());
        };

        if self.is_doom_loop(&name, &input)
            && !self.doom_loop_allowed(&call_id, &name, &input).await
        {
            let error = format!(
                "permission denied: `{name}` was called {DOOM_LOOP_THRESHOLD} times in a row with the same arguments, and the `doom_loop` permission was not granted; try something different"
            );
            self.transition(idx, |s, now| s.fail(error.clone(), None, now))?;
            self.blocked = !self.core.config.experimental.continue_loop_on_deny;
            return Ok(());
        }

        let env = CallEnv::new(
            self.core.ledger.clone(),
            self.core.permissions.clone(),
            self.core.tools.clone(),
        )
        .protecting(self.core.protected.clone());
        let progress_tx = self.feedback.clone();
        let progress_id = call_id.clone();
        let slot: ProgressSlot = Arc::new(std::sync::Mutex::new(None));
        let request = CallRequest {
            ctx: crate::tool::CallContext {
                session_id: self.session.id.clone(),
                message_id: self.info.id.clone(),
                call_id: call_id.clone(),
                agent: self.agent.name.clone(),
                directory: self.session.directory.clone(),
            },
            tool: def,
            input,
            rules: [
                self.agent.rules.as_slice(),
                self.session.permission.as_slice(),
            ]
            .concat(),
            cancel: self.cancel.child_token(),
            progress: Arc::new(move |title, metadata| {
                let mut latest = slot.lock().unwrap_or_else(|p| p.into_inner());
                let notify = latest.is_none();
                *latest = Some((title, metadata));
                drop(latest);
                if notify {
                    let _ = progress_tx.send(Feedback::Progress {
                        call_id: progress_id.clone(),
                        slot: slot.clone(),
                    });
                }
            }),
        };
        let done_tx = self.feedback.clone();
        self.in_flight += 1;
        self.tasks.spawn(async move {
            let outcome = call::run(&env, request).await;
            let _ = done_tx.send(Feedback::Done { call_id, outcome });
        });
        Ok(())
    }

    fn apply(&mut self, fb: Feedback) -> Result<()> {
        match fb {
            Feedback::Done { call_id, outcome } => {
                self.in_flight = self.in_flight.saturating_sub(1);
                if let CallOutcome::Failed { denied: true, .. } = &outcome {
                    self.blocked = !self.core.config.experimental.continue_loop_on_deny;
                }
                self.finish_call(&call_id, outcome)?;
            }
            Feedback::Progress { call_id, slot } => {
                let latest = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let (Some((title, metadata)), Some(idx)) = (latest, self.call_index(&call_id)) {
                    // Progress for a call that already ended is dropped.
                    if let PartBody::Tool { state, .. } = &mut self.calls[idx].body
                        && let Ok(next) = state.progress(title, metadata)
                    {
                        *state = next;
                        // Not a state change: the row is updated, the timeline is not,
                        // and a chatty guest is written at most every PROGRESS_EVERY.
                        let due = self
                            .progress_written
                            .get(&call_id)
                            .is_none_or(|t| t.elapsed() >= PROGRESS_EVERY);
                        if due {
                            self.core
                                .ledger
                                .put_part(&self.calls[idx], PartWrite::Delta(""))?;
                            self.progress_written.insert(call_id, Instant::now());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A result lands only on a running call with that id.
    fn finish_call(&mut self, call_id: &str, outcome: CallOutcome) -> Result<()> {
        let Some(idx) = self.call_index(call_id) else {
            tracing::warn!(
                call_id,
                "a result for a tool call this message does not have was dropped"
            );
            return Ok(());
        };
        if !matches!(
            self.calls[idx].tool_state(),
            Some(ToolState::Running { .. })
        ) {
            tracing::warn!(
                call_id,
                "a result for a tool call that is not running was dropped"
            );
            return Ok(());
        }
        match outcome {
            CallOutcome::Completed { input, output } => self.transition(idx, |s, now| {
                s.complete(
                    input.clone(),
                    output.output.clone(),
                    output.title.clone(),
                    output.metadata.clone(),
                    now,
                )
            }),
            CallOutcome::Failed { error, .. } => {
                self.transition(idx, |s, now| s.fail(error.clone(), None, now))
            }
        }
    }

    /// The doom loop: this call and the ones right before it in this run
    /// (across this prompt's assistant messages) are the same tool with the
    /// same arguments.
    fn is_doom_loop(&self, name: &str, input: &Value) -> bool {
        let user_id = &self.info.parent_id;
        let earlier = self
            .history
            .iter()
            .filter(|m| assistant(m.as_ref()).is_some_and(|a| &a.id > user_id))
            .flat_map(|m| m.parts.iter());
        let recent: Vec<&Part> = earlier
            .chain(self.calls.iter())
            .filter(|p| matches!(p.body, PartBody::Tool { .. }))
            .collect();
        if recent.len() < DOOM_LOOP_THRESHOLD {
            return false;
        }
        recent[recent.len() - DOOM_LOOP_THRESHOLD..]
            .iter()
            .all(|p| match &p.body {
                PartBody::Tool { tool, state, .. } => {
                    tool == name
                        && !matches!(state, ToolState::Pending { .. })
                        && state.input() == input
                }
                _ => false,
            })
    }

    async fn doom_loop_allowed(&self, call_id: &str, name: &str, input: &Value) -> bool {
        let rules = [
            self.agent.rules.as_slice(),
            self.session.permission.as_slice(),
        ];
        let eval = permission::evaluate("doom_loop", name, &rules);
        match eval.action {
            Action::Allow => true,
            Action::Deny => false,
            Action::Ask => {
                let request = PermissionRequest {
                    id: String::new(),
                    session_id: self.session.id.clone(),
                    permission: "doom_loop".into(),
                    patterns: vec![name.to_string()],
                    always: vec![name.to_string()],
                    metadata: json!({"tool": name, "input": input}),
                    tool: Some(PermissionTool {
                        message_id: self.info.id.clone(),
                        call_id: call_id.to_string(),
                    }),
                };
                let reply = self.core.permissions.ask(request, &self.cancel).await;
                let entry = crate::ledger::AuditEntry {
                    seq: 0,
                    session_id: self.session.id.clone(),
                    message_id: Some(self.info.id.clone()),
                    call_id: Some(call_id.to_string()),
                    at: now_ms(),
                    stage: "ask".into(),
                    subject: "doom_loop".into(),
                    plugin_hash: None,
                    decision: format!("asked:{}", reply_name(reply)),
                    rule: Some(eval.describe()),
                    duration_us: None,
                    outcome: Some(if reply == PermissionReply::Reject {
                        "refused".into()
                    } else {
                        "ok".into()
                    }),
                };
                if let Err(e) = self.core.ledger.audit(&entry) {
                    tracing::warn!(error = %e, "could not write the audit trail");
                }
                reply != PermissionReply::Reject
            }
        }
    }

    /// Cleanup: open tool calls become interrupted errors. With
    /// `pending_only`, running calls are left to finish (used between retries).
    fn interrupt_calls(&mut self, pending_only: bool, reason: &str) -> Result<()> {
        for idx in 0..self.calls.len() {
            let open = match self.calls[idx].tool_state() {
                Some(ToolState::Pending { .. }) => true,
                Some(ToolState::Running { .. }) => !pending_only,
                _ => false,
            };
            if open {
                let now = now_ms();
                if let PartBody::Tool { state, .. } = &mut self.calls[idx].body
                    && let Some(next) = state.interrupt(reason, now)
                {
                    *state = next;
                }
                self.core
                    .ledger
                    .put_part(&self.calls[idx], PartWrite::Changed)?;
            }
        }
        Ok(())
    }

    // ---- parts ----

    fn new_part(&self, body: PartBody) -> Part {
        Part {
            id: id::ascending("prt").into(),
            session_id: self.session.id.clone(),
            message_id: self.info.id.clone(),
            body,
        }
    }

    fn write_new(&mut self, body: PartBody) -> Result<Part> {
        let part = self.new_part(body);
        self.core.ledger.put_part(&part, PartWrite::Changed)?;
        Ok(part)
    }

    /// A second call with an id already used in this step never runs, and
    /// is not dropped either: it gets a part of its own (its id suffixed, so
    /// every call stays paired with one result) that ends in an error the
    /// model is shown.
    fn refuse_duplicate(&mut self, call_id: &str, name: &str, raw: &str) -> Result<(), Halt> {
        let n = self
            .calls
            .iter()
            .filter(|p| p.call_id().is_some_and(|c| c.starts_with(call_id)))
            .count();
        let id = format!("{call_id}-duplicate-{n}");
        tracing::warn!(
            call_id,
            "the model sent two calls with one id; the second is refused"
        );
        let idx = self.ensure_pending(&id, name)?;
        let input = match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        };
        self.transition(idx, |s, now| s.start(input.clone(), now))?;
        let error = format!(
            "refused: this step already has a tool call with the id `{call_id}`; each call needs its own id, so this one (`{name}`) did not run"
        );
        self.transition(idx, |s, now| s.fail(error.clone(), None, now))?;
        Ok(())
    }

    fn ensure_pending(&mut self, call_id: &str, name: &str) -> Result<usize> {
        if let Some(idx) = self.call_index(call_id) {
            return Ok(idx);
        }
        let part = self.write_new(PartBody::Tool {
            call_id: call_id.to_string(),
            tool: name.to_string(),
            state: ToolState::pending(),
            provider_executed: false,
        })?;
        self.calls.push(part);
        Ok(self.calls.len() - 1)
    }

    fn call_index(&self, call_id: &str) -> Option<usize> {
        self.calls.iter().position(|p| p.call_id() == Some(call_id))
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut Part> {
        self.calls.iter_mut().find(|p| p.call_id() == Some(call_id))
    }

    fn call_input(&self, call_id: &str) -> Value {
        self.call_index(call_id)
            .and_then(|i| self.calls[i].tool_state().map(|s| s.input().clone()))
            .unwrap_or_else(|| json!({}))
    }

    /// Apply a state transition to call `idx` and record it. An illegal
    /// transition is logged and ignored: the recorded history stays true.
    fn transition(
        &mut self,
        idx: usize,
        f: impl FnOnce(
            &ToolState,
            i64,
        ) -> std::result::Result<ToolState, warden_protocol::TransitionError>,
    ) -> Result<()> {
        let now = now_ms();
        let part = &mut self.calls[idx];
        if let PartBody::Tool { state, call_id, .. } = &mut part.body {
            match f(state, now) {
                Ok(next) => *state = next,
                Err(e) => {
                    tracing::warn!(call_id = %call_id, "{e}");
                    return Ok(());
                }
            }
        }
        self.core.ledger.put_part(part, PartWrite::Changed)?;
        Ok(())
    }

    fn start_streamed(&mut self, id: String, reasoning: bool) -> Result<()> {
        if self.streamed.contains_key(&id) {
            return Ok(());
        }
        let time = Some(TextTime {
            start: now_ms(),
            end: None,
        });
        let body = if reasoning {
            PartBody::Reasoning {
                text: String::new(),
                metadata: None,
                time,
                ignored: false,
            }
        } else {
            PartBody::Text {
                text: String::new(),
                synthetic: false,
                time,
                ignored: false,
            }
        };
        let part = self.write_new(body)?;
        self.streamed.insert(
            id,
            Streamed {
                part,
                unflushed: String::new(),
                flushed_at: Instant::now(),
            },
        );
        Ok(())
    }

    fn append_streamed(&mut self, id: &str, delta: &str) -> Result<()> {
        let Some(s) = self.streamed.get_mut(id) else {
            return Ok(());
        };
        if let PartBody::Text { text, .. } | PartBody::Reasoning { text, .. } = &mut s.part.body {
            text.push_str(delta);
        }
        s.unflushed.push_str(delta);
        if s.flushed_at.elapsed() >= FLUSH_EVERY {
            self.core
                .ledger
                .put_part(&s.part, PartWrite::Delta(&s.unflushed))?;
            s.unflushed.clear();
            s.flushed_at = Instant::now();
        }
        Ok(())
    }

    fn end_streamed(&mut self, id: &str, metadata: Option<Value>) -> Result<()> {
        let Some(mut s) = self.streamed.remove(id) else {
            return Ok(());
        };
        let now = now_ms();
        match &mut s.part.body {
            PartBody::Text { time: Some(t), .. } => t.end = Some(now),
            PartBody::Reasoning {
                time, metadata: m, ..
            } => {
                if let Some(t) = time {
                    t.end = Some(now);
                }
                if metadata.is_some() {
                    *m = metadata;
                }
            }
            _ => {}
        }
        self.core.ledger.put_part(&s.part, PartWrite::Changed)?;
        self.attempt_parts.push(s.part);
        Ok(())
    }

    /// Mark the text and reasoning of the failed attempt as ignored.
    fn ignore_attempt(&mut self) -> Result<()> {
        for mut part in std::mem::take(&mut self.attempt_parts) {
            if let PartBody::Text { ignored, .. } | PartBody::Reasoning { ignored, .. } =
                &mut part.body
            {
                *ignored = true;
            }
            self.core.ledger.put_part(&part, PartWrite::Changed)?;
        }
        Ok(())
    }

    /// Close every text still streaming (at the end, or before a retry).
    fn close_streamed(&mut self) -> Result<()> {
        let ids: Vec<String> = self.streamed.keys().cloned().collect();
        for id in ids {
            self.end_streamed(&id, None)?;
        }
        Ok(())
    }
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

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let kept: String = s.chars().take(max).collect();
        format!("{kept}…")
    }
}

fn reply_name(r: PermissionReply) -> &'static str {
    match r {
        PermissionReply::Once => "once",
        PermissionReply::Always => "always",
        PermissionReply::Reject => "reject",
    }
}
