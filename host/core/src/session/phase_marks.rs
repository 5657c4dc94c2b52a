//! Phase marks of one step, for the trace: the model request, its first
//! token, the step's finish, and each wait before a retry. The turn
//! calls one of these per phase; writing a mark never fails the step (a
//! trace is a view, the step is the work).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use warden_protocol::{LlmEvent, MessageId, ProviderError, SessionId};

use crate::clock::now_ms;
use crate::ledger::Ledger;
use crate::ledger::phase::PhaseKind;
use warden_llm::EventStream;

/// Writes the phase marks of one assistant message.
#[derive(Clone)]
pub(crate) struct PhaseMarks {
    ledger: Ledger,
    session: SessionId,
    message: MessageId,
}

impl PhaseMarks {
    pub(crate) fn new(ledger: &Ledger, session: &SessionId, message: &MessageId) -> Self {
        PhaseMarks {
            ledger: ledger.clone(),
            session: session.clone(),
            message: message.clone(),
        }
    }

    fn mark(&self, kind: PhaseKind) {
        if let Err(e) = self
            .ledger
            .mark_phase(&self.session, Some(&self.message), now_ms(), &kind)
        {
            tracing::warn!(error = %e, "could not record a phase of the trace");
        }
    }

    /// A request to the model is being sent.
    pub(crate) fn request(&self, attempt: u32) {
        self.mark(PhaseKind::ModelRequest { attempt });
    }

    /// The request failed; the loop waits `wait` before the next attempt.
    pub(crate) fn retry(&self, attempt: u32, wait: Duration, error: &ProviderError) {
        self.mark(PhaseKind::RetryWait {
            attempt,
            until: now_ms() + wait.as_millis() as i64,
            message: error.to_string(),
        });
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
