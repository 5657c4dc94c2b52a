//! How a step ends: its calls settled (their results come before the
//! step's finish), what it left open interrupted, and its end written in
//! one transaction (header, step-finish part, phase marks); an attempt set
//! aside before a retry; and a step abandoned when the ledger fails, so no
//! later write pretends it completed.

use tokio::sync::mpsc;
use warden_protocol::{Event, MessageError, MessageInfo, Millis, Part};

use super::calls::Open;
use super::runs::Feedback;
use super::{ABORTED, Halt, Outcome, Turn};
use crate::clock::now_ms;
use crate::error::{CoreError, Result};
use crate::ledger::phase::PhaseKind;
use crate::session::phase_marks::PhaseMarks;

impl Turn<'_> {
    /// What the failed attempt streamed is closed and set aside (kept, but
    /// never shown to the model), so the retry's answer is not preceded by
    /// a fragment of itself. A step it finished stays, with what it cost.
    pub(super) async fn set_attempt_aside(&mut self) -> Result<()> {
        self.write_finishing().await?;
        self.sink.close().await?;
        self.sink.ignore_attempt().await?;
        self.calls
            .set_aside("the model's stream failed before the call was complete")
            .await
    }

    /// After the attempts: settle the calls, end the open ones, write the
    /// step's end and say what comes next.
    pub(super) async fn conclude(
        &mut self,
        result: std::result::Result<(), Halt>,
        marks: &PhaseMarks,
        rx: &mut mpsc::UnboundedReceiver<Feedback>,
    ) -> Result<Outcome> {
        // The stream is over: the step's end follows the calls.
        self.streamed_all = true;
        let cleanup_reason = match result {
            Ok(()) => {
                if self.drain(rx).await? {
                    ABORTED
                } else {
                    "the model's stream ended before the call was complete"
                }
            }
            Err(Halt::Provider(e)) => {
                self.drain(rx).await?;
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
                self.fail_step(error);
                "the model's request failed before the call was complete"
            }
            Err(Halt::Cancelled) => {
                self.runs.stop_all().await;
                self.step.info.error = Some(MessageError::Aborted {
                    message: "the session was cancelled".into(),
                });
                ABORTED
            }
            Err(Halt::Core(e)) => return Err(e),
        };

        self.sink.close().await?;
        self.calls.interrupt(Open::All, cleanup_reason).await?;
        if let Some(message) = self.stopped.take()
            && self.step.info.error.is_none()
        {
            self.fail_step(MessageError::Stopped { message });
        }
        self.step.info.time.completed = Some(now_ms());
        self.end_step(&marks.take()).await?;

        Ok(if self.needs_compaction {
            Outcome::Compact
        } else if self.step.info.error.is_some() {
            Outcome::Stop
        } else {
            Outcome::Continue
        })
    }

    /// The step cannot go on: its calls are stopped and the error returned.
    ///
    /// When the ledger failed (a full disk, a read-only file, a database
    /// server gone), nothing more is written: the ledger keeps the step as
    /// it was at its last good write, open, so no later write can pretend
    /// it ended, and the session's next run (here or on another host) marks
    /// what it left open as interrupted. Any other failure leaves the step
    /// ended in that error, its open calls interrupted, as best it can.
    pub(super) async fn abandon(&mut self, e: CoreError, marks: &PhaseMarks) -> CoreError {
        self.runs.stop_all().await;
        let session_id = self.step.session.id.clone();
        let e = match e {
            // Another runner owns the session now: not this one's to report.
            CoreError::Ledger(crate::ledger::LedgerError::Fenced { .. }) => return e,
            CoreError::Ledger(crate::ledger::LedgerError::Unavailable(reason)) => {
                CoreError::Ledger(crate::ledger::LedgerError::Unavailable(format!(
                    "{reason}. The step of session {session_id} stopped at the write that failed; nothing written before is lost. Once the ledger takes writes again, `warden session resume {session_id}` (or the session's next prompt) marks the calls it left open interrupted and goes on"
                )))
            }
            CoreError::Ledger(_) => e,
            other => {
                let _ = self.sink.close().await;
                let _ = self
                    .calls
                    .interrupt(
                        Open::All,
                        "warden stopped this step after an internal error",
                    )
                    .await;
                self.step.info.error = Some(MessageError::Interrupted {
                    message: format!("warden stopped this step after an internal error: {other}"),
                });
                self.step.info.time.completed = Some(now_ms());
                let _ = self.end_step(&marks.take()).await;
                other
            }
        };
        tracing::warn!(session = %session_id, "{e}");
        self.core.ledger.bus().publish(Event::SessionError {
            session_id,
            message_id: Some(self.step.info.id.clone()),
            error: MessageError::Interrupted {
                message: e.to_string(),
            },
        });
        e
    }

    /// Write the step's end: its header, its step-finish part (when the
    /// model finished it) and its phase marks, in one transaction.
    pub(super) async fn end_step(&mut self, marks: &[(Millis, PhaseKind)]) -> Result<()> {
        let parts: Vec<Part> = self.finishing.take().into_iter().collect();
        self.writes
            .end_step(
                &MessageInfo::Assistant(self.step.info.clone()),
                &parts,
                marks,
            )
            .await
    }

    /// Write the finished step's step-finish part and header now (with the
    /// result held for them), when something follows it before the step's
    /// end.
    pub(super) async fn write_finishing(&mut self) -> Result<()> {
        match self.finishing {
            Some(_) => self.end_step(&[]).await,
            None => Ok(()),
        }
    }

    /// Wait for the tool calls still running; `true` if the session was
    /// cancelled meanwhile (the calls are then stopped).
    pub(super) async fn drain(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Feedback>,
    ) -> Result<bool> {
        if self.settle_calls(rx).await? {
            self.runs.stop_all().await;
            self.step.info.error.get_or_insert(MessageError::Aborted {
                message: "the session was cancelled".into(),
            });
            return Ok(true);
        }
        Ok(false)
    }

    /// Apply the results of the calls still running until there are none;
    /// `true` as soon as the session is cancelled (the calls go on: the
    /// caller stops them).
    pub(super) async fn settle_calls(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Feedback>,
    ) -> Result<bool> {
        while self.runs.in_flight() > 0 {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ok(true),
                Some(fb) = rx.recv() => self.apply(fb).await?,
                // A call task that died without reporting (a bug, a panic) must
                // not leave the step waiting for it forever.
                Some(panicked) = self.runs.join_next() => {
                    if panicked {
                        tracing::error!("a tool call task panicked; its part ends as an error");
                        self.runs.ended();
                        if self.runs.in_flight() == 0 {
                            self.calls.interrupt(Open::All, "warden failed while running this call").await?;
                        }
                    }
                }
            }
        }
        Ok(false)
    }
}
