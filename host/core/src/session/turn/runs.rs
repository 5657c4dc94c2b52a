//! The calls of a step running in their own tasks: each goes through the
//! boundary and reports back its outcome (with its audit rows) or its
//! progress; the turn applies both to the call table.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use warden_protocol::CallId;

use crate::boundary::{self, CallEnv, CallOutcome, CallRequest};
use crate::ledger::AuditEntry;
use crate::permission::Refusal;

/// Results and progress from tool calls running in their own tasks.
pub(super) enum Feedback {
    Done {
        call_id: CallId,
        /// Boxed: an outcome is large, progress reports are frequent.
        outcome: Box<CallOutcome>,
        audit: Vec<AuditEntry>,
        /// Why a question of the call ended without a yes, if one did.
        refusal: Option<Refusal>,
        /// The call's [`CallRequest::repeats`].
        repeats: usize,
    },
    /// A guest reported progress; the latest report is in the slot (reports
    /// that come faster than they are written replace each other).
    Progress { call_id: CallId, slot: ProgressSlot },
}

pub(super) type ProgressSlot = Arc<std::sync::Mutex<Option<(Option<String>, Value)>>>;

pub(super) struct Runs {
    tasks: JoinSet<()>,
    in_flight: usize,
    feedback: mpsc::UnboundedSender<Feedback>,
}

impl Runs {
    pub fn new() -> (Runs, mpsc::UnboundedReceiver<Feedback>) {
        let (feedback, rx) = mpsc::unbounded_channel();
        (
            Runs {
                tasks: JoinSet::new(),
                in_flight: 0,
                feedback,
            },
            rx,
        )
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// One call has reported its end (or its task died).
    pub fn ended(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Run a call through the boundary in its own task; `request.progress`
    /// is replaced by one that reports here.
    pub fn spawn(&mut self, env: CallEnv, mut request: CallRequest) {
        let call_id = request.ctx.call_id.clone();
        let progress_tx = self.feedback.clone();
        let progress_id = call_id.clone();
        let slot: ProgressSlot = Arc::new(std::sync::Mutex::new(None));
        request.progress = Arc::new(move |title, metadata| {
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
        });
        let done_tx = self.feedback.clone();
        let repeats = request.repeats;
        self.in_flight += 1;
        self.tasks.spawn(async move {
            let report = boundary::run_audited(&env, request).await;
            let _ = done_tx.send(Feedback::Done {
                call_id,
                outcome: Box::new(report.outcome),
                audit: report.audit,
                refusal: report.refusal,
                repeats,
            });
        });
    }

    /// Wait for a task to end; `true` if it panicked.
    pub async fn join_next(&mut self) -> Option<bool> {
        self.tasks
            .join_next()
            .await
            .map(|r| r.is_err_and(|e| e.is_panic()))
    }

    /// Stop every call and wait until each task is gone, so what a stopped
    /// call leaves behind (a pending question settled with its event) is
    /// done before the step reports that it ended.
    pub async fn stop_all(&mut self) {
        self.tasks.shutdown().await;
    }
}
