//! One turn: one model step of the loop. The attempt loop here asks the
//! model (retrying provider failures per the policy) and routes what it
//! streams to one owner per mechanic:
//!
//! - [`sink`]: text and reasoning become parts, with the flush policy;
//! - [`calls`]: the call table, the only place tool states change (written
//!   with the audit rows that caused them, in one transaction);
//! - [`end`]: how the step ends (calls settled, what is open interrupted,
//!   the end in one transaction, abandoned when the ledger fails);
//! - [`runs`]: the calls running through the boundary in their own tasks
//!   (admitted by the boundary's [`admission`], the doom-loop guard
//!   included, so nothing about a call waits in the stream loop);
//! - [`writes`]: when the step's changes become durable (what is held back
//!   for the next write, so a step of one call is three transactions).
//!
//! It tells the loop what comes next: `continue`, `stop` or `compact`
//! (context overflow). As in the seeds, a rule's deny, a protected path and
//! a hook's block are error parts the model reads, and the loop goes on; it
//! stops when the assistant errored, or when a call failed because a
//! person rejected one of its questions (or nobody approved it: nobody
//! attached, the deadline passed, the watcher left), unless
//! `experimental.continue_loop_on_deny`. A turn that stops so says why in
//! its message's error ([`MessageError::Stopped`]).

mod calls;
mod end;
mod runs;
mod sink;
mod writes;

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use warden_protocol::{
    AssistantInfo, CallId, Event, LlmEvent, LlmRequest, MessageError, MessageWithParts, Part,
    PartBody, ProviderError, SessionInfo, SessionStatus, ToolState,
};

use super::CoreInner;
use super::phase_marks::PhaseMarks;
use crate::agent::Agent;
use crate::boundary::admission::{self, Proposal};
use crate::boundary::{CallFailure, CallOutcome, doom};
use crate::clock::now_ms;
use crate::error::{CoreError, Result};
use crate::tool::{ToolDef, ToolOutput};
use calls::CallTable;
use runs::{Feedback, Runs};
use sink::PartsSink;
use warden_llm::{EventStream, ResolvedModel};
use writes::StepWrites;

pub(crate) use calls::CallTable as Calls;

/// Said of tool calls an abort stopped.
const ABORTED: &str = "the session was aborted before the call finished";

/// What the loop does after a turn.
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

/// What a step is about: the session, who answers, and what they see.
pub(crate) struct Step<'a> {
    pub session: &'a SessionInfo,
    pub agent: &'a Agent,
    pub model: &'a ResolvedModel,
    /// The assistant message this step writes (already in the ledger).
    pub info: AssistantInfo,
    pub history: &'a [Arc<MessageWithParts>],
    /// The tools offered on this step.
    pub tools: Vec<ToolDef>,
}

pub(crate) struct Turn<'a> {
    core: &'a CoreInner,
    step: Step<'a>,
    cancel: CancellationToken,
    sink: PartsSink<'a>,
    calls: CallTable<'a>,
    runs: Runs,
    writes: Arc<StepWrites<'a>>,
    feedback: Option<mpsc::UnboundedReceiver<Feedback>>,
    /// Why the loop stops after this step without the model answering.
    stopped: Option<String>,
    needs_compaction: bool,
    saw_finish: bool,
    /// The model has finished the step (or its stream is over): the step's
    /// end follows as soon as the calls settle, so the last call's result
    /// is written with it.
    streamed_all: bool,
    /// The step-finish part of the model's finished step, written with the
    /// step's end (its header and phase marks, one transaction), or before
    /// anything the stream sends after it.
    finishing: Option<Part>,
}

impl<'a> Turn<'a> {
    pub(crate) fn new(core: &'a CoreInner, step: Step<'a>, cancel: CancellationToken) -> Self {
        let (session_id, message_id) = (step.session.id.clone(), step.info.id.clone());
        let (runs, feedback) = Runs::new();
        let writes = StepWrites::new(&core.ledger);
        Turn {
            core,
            sink: PartsSink::new(writes.clone(), session_id.clone(), message_id.clone()),
            calls: CallTable::new(writes.clone(), session_id, message_id),
            runs,
            writes,
            feedback: Some(feedback),
            step,
            cancel,
            stopped: None,
            needs_compaction: false,
            saw_finish: false,
            streamed_all: false,
            finishing: None,
        }
    }

    /// Ask the model (retrying provider failures per the policy), write its
    /// answer, run its tool calls, clean up, and say what comes next.
    pub(crate) async fn process(mut self, request: LlmRequest) -> Result<Outcome> {
        let Some(mut rx) = self.feedback.take() else {
            return Err(CoreError::Internal("a turn was run twice".into()));
        };
        let session_id = self.step.session.id.clone();
        let marks = PhaseMarks::new(&self.core.ledger, &session_id, &self.step.info.id);
        let provider = self.step.model.provider_for(session_id.as_str());
        let mut attempt = 0u32;
        let result = loop {
            attempt += 1;
            self.saw_finish = false;
            self.streamed_all = false;
            // A runner that lost its lease sends no model request.
            if let Err(e) = self.core.ledger.check_fence(&session_id).await {
                break Err(Halt::Core(e));
            }
            marks.request(attempt);
            let started = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Err(Halt::Cancelled),
                s = provider.stream(request.clone()) => s.map_err(Halt::Provider),
            };
            let r = match started {
                Ok(stream) => self.consume(marks.watch(stream), &mut rx).await,
                Err(h) => Err(h),
            };
            // This attempt's marks (request, first token, finish) are written
            // with the step's end, or before a retry waits.
            match r {
                // Asking again would have the model call the same tools again,
                // running their side effects twice: end the step with the calls
                // it made, and let their results go back to it.
                Err(Halt::Provider(e)) if self.calls.any_started() => {
                    self.step
                        .info
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
                        // answer is not preceded by a fragment of itself. A
                        // step it finished stays, with what it cost.
                        if let Err(e) = self.set_attempt_aside().await {
                            break Err(Halt::Core(e));
                        }
                        marks.retry(attempt, wait, &e).await;
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

        match self.conclude(result, &marks, &mut rx).await {
            Ok(outcome) => Ok(outcome),
            Err(e) => Err(self.abandon(e, &marks).await),
        }
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
                Some(fb) = rx.recv() => self.apply(fb).await?,
                ev = stream.next() => match ev {
                    Some(ev) => {
                        // A step finishes after its calls do, as the seeds'
                        // stream has it (a call's result comes before the
                        // step's finish): the turn writes nothing of its own
                        // beside a running call, whose result is the step's
                        // critical path.
                        if matches!(ev, LlmEvent::FinishStep { .. } | LlmEvent::Finish { .. }) {
                            self.streamed_all = true;
                            if self.settle_calls(rx).await? {
                                return Err(Halt::Cancelled);
                            }
                        }
                        self.handle(ev).await?
                    }
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

    async fn handle(&mut self, ev: LlmEvent) -> Result<(), Halt> {
        if !matches!(ev, LlmEvent::Finish { .. }) {
            self.write_finishing().await?;
        }
        match ev {
            LlmEvent::Start => {}
            LlmEvent::StartStep => self.sink.step_start(),
            LlmEvent::TextStart { id } => self.sink.start(id, false).await?,
            LlmEvent::ReasoningStart { id } => self.sink.start(id, true).await?,
            // Some providers send deltas with no start: the first delta starts the part.
            LlmEvent::TextDelta { id, text } => {
                self.sink.start(id.clone(), false).await?;
                self.sink.append(&id, &text).await?;
            }
            LlmEvent::ReasoningDelta { id, text } => {
                self.sink.start(id.clone(), true).await?;
                self.sink.append(&id, &text).await?;
            }
            LlmEvent::TextEnd { id } => self.sink.end(&id, None).await?,
            LlmEvent::ReasoningEnd { id, metadata } => self.sink.end(&id, metadata).await?,
            LlmEvent::ToolInputStart { call_id, name } => {
                self.calls.open(&call_id.into(), &name);
            }
            LlmEvent::ToolInputDelta { call_id, delta } => {
                self.calls.append_raw(&call_id.into(), &delta)
            }
            LlmEvent::ToolInputEnd { .. } => {}
            LlmEvent::ToolCall {
                call_id,
                name,
                input,
                provider_executed,
            } => {
                self.tool_call(call_id.into(), name, input, provider_executed)
                    .await?
            }
            // Results from the stream are for provider-executed tools.
            LlmEvent::ToolResult {
                call_id,
                output,
                title,
                metadata,
            } => {
                let call_id = CallId::from(call_id);
                let input = self.calls.input(&call_id);
                let output = ToolOutput {
                    output,
                    title,
                    metadata,
                };
                self.calls
                    .finish(
                        &call_id,
                        CallOutcome::Completed { input, output },
                        &[],
                        false,
                    )
                    .await?;
            }
            LlmEvent::ToolError { call_id, error } => {
                let call_id = CallId::from(call_id);
                let input = self.calls.input(&call_id);
                let failure = CallFailure::Guest(crate::tool::GuestError::Failed(error));
                self.calls
                    .finish(&call_id, CallOutcome::Failed { input, failure }, &[], false)
                    .await?;
            }
            LlmEvent::FinishStep { reason, usage, .. } => {
                self.saw_finish = true;
                let tokens = usage.tokens();
                let cost = self.step.model.info.prices.cost(&tokens);
                let info = &mut self.step.info;
                info.finish = Some(reason);
                info.tokens = tokens;
                info.cost += cost;
                // Written with the step's end, which follows at once (the
                // calls have settled): one transaction, not three.
                self.finishing = Some(self.sink.new_part(PartBody::StepFinish {
                    reason,
                    tokens,
                    cost,
                }));
                // A summary is allowed to be big: it is what makes room.
                if !self.step.info.summary
                    && super::compaction::is_overflow(&tokens, &self.step.model.info)
                {
                    self.needs_compaction = true;
                }
            }
            LlmEvent::Finish { reason, .. } => {
                self.saw_finish = true;
                if self.step.info.finish.is_none() {
                    self.step.info.finish = Some(reason);
                }
            }
            LlmEvent::Error { error } => return Err(Halt::Provider(error)),
        }
        Ok(())
    }

    /// The model finished a call: check it, start it, and hand it to the
    /// boundary (or fail it with what was wrong, so the model is told).
    async fn tool_call(
        &mut self,
        call_id: CallId,
        name: String,
        raw: String,
        provider_executed: bool,
    ) -> Result<(), Halt> {
        let idx = self.calls.open(&call_id, &name);
        if !matches!(self.calls.state(idx), Some(ToolState::Pending { .. })) {
            return Ok(self.calls.refuse_duplicate(&call_id, &name, &raw).await?);
        }
        // Arguments: JSON, and an object. Anything else still runs the machine
        // (pending → running → error) so the model is told what was wrong.
        let parsed = admission::arguments(&raw);
        let input = parsed.as_ref().cloned().unwrap_or_else(|_| json!({}));
        self.calls
            .start(idx, &name, provider_executed, &raw, input.clone())
            .await?;
        if let Err(error) = parsed {
            self.calls
                .fail(idx, None, &CallFailure::BadArguments(error), &[])
                .await?;
            return Ok(());
        }
        if provider_executed {
            return Ok(()); // its result comes in the stream
        }
        let step = &self.step;
        let repeats = doom::repeats(
            step.history,
            &step.info.parent_id,
            self.calls.parts(),
            &name,
            &input,
        );
        let admitted = admission::admit(Proposal {
            call_id,
            name: &name,
            input,
            session: step.session,
            message_id: step.info.id.clone(),
            agent: step.agent,
            offered: &step.tools,
            repeats,
            cancel: self.cancel.child_token(),
        });
        match admitted {
            Ok(request) => self.runs.spawn(self.core.call_env(), request),
            Err(failure) => self.calls.fail(idx, None, &failure, &[]).await?,
        }
        Ok(())
    }

    async fn apply(&mut self, fb: Feedback) -> Result<()> {
        match fb {
            Feedback::Done {
                call_id,
                outcome,
                audit,
                refusal,
                repeats,
            } => {
                let outcome = *outcome;
                self.runs.ended();
                if let CallOutcome::Failed { failure, .. } = &outcome {
                    let name = self.calls.name(&call_id).unwrap_or_default();
                    if matches!(failure, CallFailure::DoomLoop { .. })
                        && refusal.is_none()
                        && repeats >= doom::GIVE_UP
                    {
                        // Refused by a rule and still at it: asking again
                        // would go on for ever (whatever
                        // continue_loop_on_deny says).
                        self.stopped.get_or_insert(format!(
                            "the model called `{name}` {repeats} times in a row with the same arguments, though told after {} that the doom_loop permission does not allow it; the loop stopped",
                            doom::THRESHOLD
                        ));
                    }
                    self.stop_for(&call_id, &name, failure, refusal);
                }
                // The model finished the step and this was its last call:
                // the result goes with the step's end, which follows.
                let hold = self.streamed_all && self.runs.in_flight() == 0;
                self.calls.finish(&call_id, outcome, &audit, hold).await
            }
            Feedback::Progress { call_id, slot } => {
                let latest = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                // Progress for a call that already ended is dropped.
                match latest {
                    Some((title, metadata)) => self.calls.progress(&call_id, title, metadata).await,
                    None => Ok(()),
                }
            }
        }
    }
}

impl Turn<'_> {
    /// The step ends in `error`: set on its message, and said on the bus.
    fn fail_step(&mut self, error: MessageError) {
        self.core.ledger.bus().publish(Event::SessionError {
            session_id: self.step.session.id.clone(),
            message_id: Some(self.step.info.id.clone()),
            error: error.clone(),
        });
        self.step.info.error = Some(error);
    }

    /// A call failed: when it was because a person rejected one of its
    /// questions (or nobody approved it), the loop stops after this step,
    /// unless `experimental.continue_loop_on_deny`. The first reason is kept.
    fn stop_for(
        &mut self,
        call_id: &CallId,
        name: &str,
        failure: &CallFailure,
        refusal: Option<crate::permission::Refusal>,
    ) {
        let Some(why) = refusal.filter(|r| r.stops_loop()) else {
            return;
        };
        if self.core.config.experimental.continue_loop_on_deny {
            return;
        }
        let failure = failure.to_string();
        let said = match why {
            crate::permission::Refusal::Rejected => "a person rejected it",
            _ => "nobody approved it",
        };
        self.stopped.get_or_insert(format!(
            "stopped after the call `{name}` ({call_id}) failed because {said}: {failure}. Send another prompt to go on, or set experimental.continue_loop_on_deny to let the model go on by itself"
        ));
    }
}
