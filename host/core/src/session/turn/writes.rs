//! When a step's changes become durable. A change that needs no durable
//! moment of its own is held back and goes into the step's next write, in
//! its order: a step's start, a call while the model streams its arguments
//! (shown on the bus at once, written with its running state: the row then
//! holds the arguments, and a call the ledger shows as not started never
//! ran), and the last call's result once the model has finished the step
//! (written with the step's end, which follows at once). So a step of one
//! call is three transactions: its header, the call with the step's start,
//! and the result with the step's end.
//!
//! A held change is lost with the process, as a delta not yet flushed is:
//! what the ledger shows of the call is then what it held before (nothing,
//! or running), and resume marks a running call interrupted.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use warden_protocol::{MessageInfo, Millis, Part};

use crate::error::Result;
use crate::ledger::phase::PhaseKind;
use crate::ledger::{AuditEntry, Change, Ledger, PartWrite, TimelineRow};

/// A change held back for the step's next write.
struct Held {
    part: Part,
    /// A tool call's state change: the arguments a finishing call started
    /// with, when a hook rewrote them (its timeline row's).
    timeline: Option<Option<Value>>,
    audit: Vec<AuditEntry>,
    /// When it was held: a pending call's time in its timeline row.
    at: Millis,
    /// Published when it was held.
    announced: bool,
}

/// The writes of one step, shared by the parts sink and the call table.
pub(super) struct StepWrites<'a> {
    ledger: &'a Ledger,
    held: Mutex<Vec<Held>>,
}

impl<'a> StepWrites<'a> {
    pub fn new(ledger: &'a Ledger) -> Arc<StepWrites<'a>> {
        Arc::new(StepWrites {
            ledger,
            held: Mutex::new(Vec::new()),
        })
    }

    /// Hold `part`'s change for the step's next write; `announce` publishes
    /// it now (a state clients may see before it is durable).
    pub fn hold(
        &self,
        part: &Part,
        row: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
        announce: bool,
    ) {
        if announce {
            self.ledger
                .bus()
                .publish(warden_protocol::Event::PartUpdated {
                    part: part.clone(),
                    delta: None,
                });
        }
        self.lock().push(Held {
            part: part.clone(),
            timeline: row.map(|r| r.started_with.cloned()),
            audit: audit.to_vec(),
            at: crate::clock::now_ms(),
            announced: announce,
        });
    }

    /// Whether changes are held back.
    pub fn holding(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Insert or update a part (see [`PartWrite`]), with what is held.
    pub async fn put_part(&self, part: &Part, write: PartWrite<'_>) -> Result<()> {
        if !self.holding() {
            return self.ledger.put_part(part, write).await;
        }
        let change = Change::put(part, write);
        self.write(None, vec![change], &[], &[]).await
    }

    /// A tool call's new state and the audit rows that caused it, with what
    /// is held.
    pub async fn transition(
        &self,
        part: &Part,
        row: TimelineRow<'_>,
        audit: &[AuditEntry],
    ) -> Result<()> {
        if !self.holding() {
            return self.ledger.transition(part, row, audit).await;
        }
        self.write(None, vec![Change::transition(part, row)], audit, &[])
            .await
    }

    /// Audit rows alone (a result dropped), with what is held.
    pub async fn audit_all(&self, audit: &[AuditEntry]) -> Result<()> {
        match self.holding() {
            false => self.ledger.audit_all(audit).await,
            true => self.write(None, Vec::new(), audit, &[]).await,
        }
    }

    /// The step's header with its last `parts` (a step-finish) and `marks`,
    /// after what is held.
    pub async fn end_step(
        &self,
        info: &MessageInfo,
        parts: &[Part],
        marks: &[(Millis, PhaseKind)],
    ) -> Result<()> {
        let parts: Vec<Change<'_>> = parts.iter().map(Change::of).collect();
        self.write(Some(info), parts, &[], marks).await
    }

    /// Write what is held and then `changes` with `audit`, in one
    /// transaction.
    async fn write(
        &self,
        header: Option<&MessageInfo>,
        changes: Vec<Change<'_>>,
        audit: &[AuditEntry],
        marks: &[(Millis, PhaseKind)],
    ) -> Result<()> {
        let held = self.take();
        let mut all_changes: Vec<Change<'_>> = held.iter().map(Held::change).collect();
        all_changes.extend(changes);
        let mut all: Vec<AuditEntry> = held.iter().flat_map(|h| h.audit.iter().cloned()).collect();
        all.extend_from_slice(audit);
        let written = self
            .ledger
            .write_step(header, &all_changes, &all, marks)
            .await;
        self.settle(held, &written);
        written
    }

    fn take(&self) -> Vec<Held> {
        std::mem::take(&mut *self.lock())
    }

    /// A write that failed leaves what it held held (nothing of it is in
    /// the ledger), ahead of anything held since.
    fn settle(&self, held: Vec<Held>, written: &Result<()>) {
        if written.is_err() {
            let mut now = self.lock();
            let later = std::mem::replace(&mut *now, held);
            now.extend(later);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Held {
    fn change(&self) -> Change<'_> {
        Change {
            part: &self.part,
            timeline: self.timeline.as_ref().map(|s| TimelineRow {
                started_with: s.as_ref(),
                at: Some(self.at),
            }),
            delta: None,
            announced: self.announced,
        }
    }
}
