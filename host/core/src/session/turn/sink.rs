//! The parts sink: what the model streams becomes parts of the assistant
//! message. Text and reasoning are written at most every [`FLUSH_EVERY`]
//! while they stream (the bus carries each delta as it is written) and once
//! more when they end; the flush policy lives here and nowhere else.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_protocol::part::TextTime;
use warden_protocol::{MessageId, Part, PartBody, SessionId};

use crate::clock::now_ms;
use crate::error::Result;
use crate::ledger::{PartWrite, id};

use super::writes::StepWrites;

/// Streamed text is written to the ledger at most this often (and at its end).
pub(super) const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// A text or reasoning part being streamed.
struct Streamed {
    part: Part,
    unflushed: String,
    flushed_at: Instant,
}

pub(super) struct PartsSink<'a> {
    writes: Arc<StepWrites<'a>>,
    session_id: SessionId,
    message_id: MessageId,
    streamed: HashMap<String, Streamed>,
    /// Text and reasoning parts finished during the current attempt.
    attempt: Vec<Part>,
}

impl<'a> PartsSink<'a> {
    pub fn new(writes: Arc<StepWrites<'a>>, session_id: SessionId, message_id: MessageId) -> Self {
        PartsSink {
            writes,
            session_id,
            message_id,
            streamed: HashMap::new(),
            attempt: Vec::new(),
        }
    }

    /// A step's start: shown now, written with the step's next write.
    pub fn step_start(&mut self) {
        let part = self.new_part(PartBody::StepStart {});
        self.writes.hold(&part, None, &[], true);
    }

    /// A text (or reasoning) part begins; a second start of one id is a no-op.
    pub async fn start(&mut self, id: String, reasoning: bool) -> Result<()> {
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
        let part = self.new_part(body);
        self.writes.put_part(&part, PartWrite::Changed).await?;
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

    pub async fn append(&mut self, id: &str, delta: &str) -> Result<()> {
        let Some(s) = self.streamed.get_mut(id) else {
            return Ok(());
        };
        if let PartBody::Text { text, .. } | PartBody::Reasoning { text, .. } = &mut s.part.body {
            text.push_str(delta);
        }
        s.unflushed.push_str(delta);
        if s.flushed_at.elapsed() >= FLUSH_EVERY {
            self.writes
                .put_part(&s.part, PartWrite::Delta(&s.unflushed))
                .await?;
            s.unflushed.clear();
            s.flushed_at = Instant::now();
        }
        Ok(())
    }

    pub async fn end(&mut self, id: &str, metadata: Option<Value>) -> Result<()> {
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
        self.writes.put_part(&s.part, PartWrite::Changed).await?;
        self.attempt.push(s.part);
        Ok(())
    }

    /// Close every text still streaming (at the end, or before a retry).
    pub async fn close(&mut self) -> Result<()> {
        let ids: Vec<String> = self.streamed.keys().cloned().collect();
        for id in ids {
            self.end(&id, None).await?;
        }
        Ok(())
    }

    /// Mark the text and reasoning of the failed attempt as ignored.
    pub async fn ignore_attempt(&mut self) -> Result<()> {
        for mut part in std::mem::take(&mut self.attempt) {
            if let PartBody::Text { ignored, .. } | PartBody::Reasoning { ignored, .. } =
                &mut part.body
            {
                *ignored = true;
            }
            self.writes.put_part(&part, PartWrite::Changed).await?;
        }
        Ok(())
    }

    /// A new part of this message, not written yet.
    pub fn new_part(&self, body: PartBody) -> Part {
        Part {
            id: id::ascending("prt").into(),
            session_id: self.session_id.clone(),
            message_id: self.message_id.clone(),
            body,
        }
    }
}
