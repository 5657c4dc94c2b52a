//! The tool call state machine, one per call, keyed by the model's call id.
//!
//! ```text
//! tool-input-start      tool-call          tool-result / tool-error
//!       |                   |                        |
//!    pending  ---------> running  ---------> completed | error
//!       \__________ cleanup: error (interrupted) ___/
//! ```
//!
//! `completed` and `error` are two terminal states, not steps in a row. Only
//! a `running` call is completed or errored by a result; a result for a call
//! in any other state is refused, so a late or duplicated result can never
//! rewrite history. Cleanup at the end of a processing pass turns whatever is
//! still `pending` or `running` into `error` with `interrupted: true`.
//!
//! Every transition is a method here; the processor only calls them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Millis;

/// The state of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ToolState {
    /// The model has started to stream the call; its arguments are not complete.
    Pending {
        /// Always `{}`: the arguments are not known yet.
        input: Value,
        /// The argument text streamed so far.
        raw: String,
    },
    /// The call is complete and executing.
    Running {
        /// The parsed arguments.
        input: Value,
        /// A line for people, set by the tool while it runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// Progress details set by the tool while it runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// When it started.
        time: StartTime,
    },
    /// The call succeeded.
    Completed {
        /// The arguments it ran with (after any hook rewrote them).
        input: Value,
        /// What the model sees.
        output: String,
        /// A line for people.
        title: String,
        /// Structured details from the tool.
        metadata: Value,
        /// When it started and ended.
        time: Span,
    },
    /// The call failed, or never finished.
    Error {
        /// The arguments, as far as they were known.
        input: Value,
        /// What went wrong; the model sees this.
        error: String,
        /// Structured details, if the tool gave any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// When it started and ended.
        time: Span,
        /// True when cleanup ended the call (stream cut, abort, crash), not a result.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
}

/// When a running call started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StartTime {
    pub start: Millis,
}

/// When a finished call started and ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Span {
    pub start: Millis,
    pub end: Millis,
}

/// A transition the machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionError {
    /// The state the call was in.
    pub from: &'static str,
    /// What was attempted.
    pub attempted: &'static str,
}

impl std::fmt::Display for TransitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a tool call that is {} cannot be {}",
            self.from, self.attempted
        )
    }
}

impl std::error::Error for TransitionError {}

impl ToolState {
    /// A call the model has started to stream.
    pub fn pending() -> Self {
        ToolState::Pending {
            input: Value::Object(Default::default()),
            raw: String::new(),
        }
    }

    /// The state's name: `pending`, `running`, `completed` or `error`.
    pub fn status(&self) -> &'static str {
        match self {
            ToolState::Pending { .. } => "pending",
            ToolState::Running { .. } => "running",
            ToolState::Completed { .. } => "completed",
            ToolState::Error { .. } => "error",
        }
    }

    /// True for `completed` and `error`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ToolState::Completed { .. } | ToolState::Error { .. })
    }

    /// True for an `error` written by cleanup.
    pub fn is_interrupted(&self) -> bool {
        matches!(
            self,
            ToolState::Error {
                interrupted: true,
                ..
            }
        )
    }

    /// The arguments as far as they are known.
    pub fn input(&self) -> &Value {
        match self {
            ToolState::Pending { input, .. }
            | ToolState::Running { input, .. }
            | ToolState::Completed { input, .. }
            | ToolState::Error { input, .. } => input,
        }
    }

    /// When the call started running, if it did.
    pub fn started_at(&self) -> Option<Millis> {
        match self {
            ToolState::Pending { .. } => None,
            ToolState::Running { time, .. } => Some(time.start),
            ToolState::Completed { time, .. } | ToolState::Error { time, .. } => Some(time.start),
        }
    }

    /// More argument text streamed in (pending only; ignored otherwise, as a
    /// late delta carries nothing the call still needs).
    pub fn append_raw(&mut self, delta: &str) {
        if let ToolState::Pending { raw, .. } = self {
            raw.push_str(delta);
        }
    }

    /// `pending → running`: the model finished the call.
    pub fn start(&self, input: Value, now: Millis) -> Result<ToolState, TransitionError> {
        match self {
            ToolState::Pending { .. } => Ok(ToolState::Running {
                input,
                title: None,
                metadata: None,
                time: StartTime { start: now },
            }),
            other => Err(TransitionError {
                from: other.status(),
                attempted: "started",
            }),
        }
    }

    /// Progress from the tool while it runs (running only).
    pub fn progress(
        &self,
        title: Option<String>,
        metadata: Value,
    ) -> Result<ToolState, TransitionError> {
        match self {
            ToolState::Running {
                input,
                time,
                title: old,
                ..
            } => Ok(ToolState::Running {
                input: input.clone(),
                title: title.or_else(|| old.clone()),
                metadata: Some(metadata),
                time: *time,
            }),
            other => Err(TransitionError {
                from: other.status(),
                attempted: "updated with progress",
            }),
        }
    }

    /// `running → completed`.
    pub fn complete(
        &self,
        input: Value,
        output: String,
        title: String,
        metadata: Value,
        now: Millis,
    ) -> Result<ToolState, TransitionError> {
        match self {
            ToolState::Running { time, .. } => Ok(ToolState::Completed {
                input,
                output,
                title,
                metadata,
                time: Span {
                    start: time.start,
                    end: now.max(time.start),
                },
            }),
            other => Err(TransitionError {
                from: other.status(),
                attempted: "completed",
            }),
        }
    }

    /// `running → error`: the call ran and failed.
    pub fn fail(
        &self,
        error: String,
        metadata: Option<Value>,
        now: Millis,
    ) -> Result<ToolState, TransitionError> {
        match self {
            ToolState::Running { input, time, .. } => Ok(ToolState::Error {
                input: input.clone(),
                error,
                metadata,
                time: Span {
                    start: time.start,
                    end: now.max(time.start),
                },
                interrupted: false,
            }),
            other => Err(TransitionError {
                from: other.status(),
                attempted: "failed",
            }),
        }
    }

    /// `running → error` with the arguments the call ended with: a hook may
    /// have rewritten them, and the record keeps what ran, as
    /// [`ToolState::complete`] does.
    pub fn fail_with(
        &self,
        input: Value,
        error: String,
        metadata: Option<Value>,
        now: Millis,
    ) -> Result<ToolState, TransitionError> {
        let mut next = self.fail(error, metadata, now)?;
        if let ToolState::Error { input: i, .. } = &mut next {
            *i = input;
        }
        Ok(next)
    }

    /// Cleanup: `pending | running → error (interrupted)`. Terminal states
    /// are left alone (`None`).
    pub fn interrupt(&self, reason: &str, now: Millis) -> Option<ToolState> {
        match self {
            ToolState::Pending { input, .. } => Some(ToolState::Error {
                input: input.clone(),
                error: reason.to_string(),
                metadata: None,
                time: Span {
                    start: now,
                    end: now,
                },
                interrupted: true,
            }),
            ToolState::Running {
                input,
                time,
                metadata,
                ..
            } => Some(ToolState::Error {
                input: input.clone(),
                error: reason.to_string(),
                metadata: metadata.clone(),
                time: Span {
                    start: time.start,
                    end: now.max(time.start),
                },
                interrupted: true,
            }),
            ToolState::Completed { .. } | ToolState::Error { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_happy_path_is_pending_running_completed() {
        let p = ToolState::pending();
        let r = p.start(json!({"filePath": "a"}), 10).unwrap();
        let c = r
            .complete(
                json!({"filePath": "a"}),
                "out".into(),
                "a".into(),
                json!({}),
                15,
            )
            .unwrap();
        assert_eq!(
            c,
            ToolState::Completed {
                input: json!({"filePath": "a"}),
                output: "out".into(),
                title: "a".into(),
                metadata: json!({}),
                time: Span { start: 10, end: 15 },
            }
        );
    }

    #[test]
    fn results_only_land_on_running_calls() {
        let p = ToolState::pending();
        assert_eq!(
            p.complete(json!({}), "x".into(), String::new(), json!({}), 1)
                .unwrap_err()
                .from,
            "pending"
        );
        assert_eq!(p.fail("x".into(), None, 1).unwrap_err().from, "pending");
        let r = p.start(json!({}), 1).unwrap();
        let c = r
            .complete(json!({}), "x".into(), String::new(), json!({}), 2)
            .unwrap();
        assert_eq!(
            c.fail("late".into(), None, 3).unwrap_err().from,
            "completed"
        );
        assert_eq!(c.start(json!({}), 3).unwrap_err().from, "completed");
        let e = r.fail("boom".into(), None, 2).unwrap();
        assert_eq!(
            e.complete(json!({}), "x".into(), String::new(), json!({}), 3)
                .unwrap_err()
                .from,
            "error"
        );
    }

    #[test]
    fn cleanup_interrupts_only_open_calls() {
        let p = ToolState::pending();
        let interrupted = p.interrupt("stream ended", 5).unwrap();
        assert!(interrupted.is_interrupted());
        let r = p.start(json!({"a": 1}), 3).unwrap();
        match r.interrupt("aborted", 9).unwrap() {
            ToolState::Error {
                input,
                time,
                interrupted,
                ..
            } => {
                assert_eq!(input, json!({"a": 1}));
                assert_eq!(time, Span { start: 3, end: 9 });
                assert!(interrupted);
            }
            other => panic!("unexpected {other:?}"),
        }
        let c = r
            .complete(json!({}), "x".into(), String::new(), json!({}), 4)
            .unwrap();
        assert!(c.interrupt("late", 9).is_none());
    }

    #[test]
    fn states_serialize_with_a_status_tag() {
        let r = ToolState::pending().start(json!({"x": 1}), 7).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"status": "running", "input": {"x": 1}, "time": {"start": 7}})
        );
        let e = r.interrupt("gone", 8).unwrap();
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"status": "error", "input": {"x": 1}, "error": "gone", "time": {"start": 7, "end": 8}, "interrupted": true})
        );
    }
}
