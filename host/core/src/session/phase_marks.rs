//! Phase marks of one step, for the trace: the model request, its first
//! token, the step's finish, and each wait before a retry. The turn
//! calls one of these per phase; the marks are written with the step's end
//! (or before a retry waits: a mark that cannot be written then is logged,
//! and does not fail the step).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use warden_protocol::{LlmEvent, MessageId, Millis, ProviderError, SessionId};

use crate::clock::now_ms;
use crate::ledger::Ledger;
use crate::ledger::phase::PhaseKind;
use warden_llm::EventStream;

/// Collects the phase marks of one assistant message, to be written
/// together: the request and first-token marks with the step's finish, in
/// the transaction that ends the step (or before a retry waits), so a
/// step's marks cost no ledger write of their own.
#[derive(Clone)]
pub(crate) struct PhaseMarks {
    ledger: Ledger,
    session: SessionId,
    message: MessageId,
    held: Arc<Mutex<Vec<(Millis, PhaseKind)>>>,
}

impl PhaseMarks {
    pub(crate) fn new(ledger: &Ledger, session: &SessionId, message: &MessageId) -> Self {
        PhaseMarks {
            ledger: ledger.clone(),
            session: session.clone(),
            message: message.clone(),
            held: Arc::default(),
        }
    }

    fn mark(&self, kind: PhaseKind) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((now_ms(), kind));
    }

    /// The marks held so far, to be written with the step's end (in its
    /// transaction).
    pub(crate) fn take(&self) -> Vec<(Millis, PhaseKind)> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Write the marks held so far, before a retry waits, so a trace read
    /// during the wait already shows them.
    async fn flush(&self) {
        let marks = self.take();
        if let Err(e) = self
            .ledger
            .mark_phases(&self.session, Some(&self.message), &marks)
            .await
        {
            tracing::warn!(error = %e, "could not record the phases of the trace");
        }
    }

    /// A request to the model is being sent.
    pub(crate) fn request(&self, attempt: u32) {
        self.mark(PhaseKind::ModelRequest { attempt });
    }

    /// The request failed; the loop waits `wait` before the next attempt.
    pub(crate) async fn retry(&self, attempt: u32, wait: Duration, error: &ProviderError) {
        self.mark(PhaseKind::RetryWait {
            attempt,
            until: now_ms() + wait.as_millis() as i64,
            message: error.to_string(),
        });
        self.flush().await;
    }

    /// The same stream, marking its first event and each step's finish.
    pub(crate) fn watch(&self, stream: EventStream) -> EventStream {
        let marks = self.clone();
        let first = Arc::new(AtomicBool::new(true));
        Box::pin(stream.inspect(move |ev| {
            if !matches!(ev, LlmEvent::Start) && first.swap(false, Ordering::Relaxed) {
                marks.mark(PhaseKind::FirstToken);
            }
            if let LlmEvent::FinishStep { reason, .. } = ev {
                marks.mark(PhaseKind::StepFinish {
                    reason: reason.as_str().to_string(),
                });
            }
        }))
    }
}
