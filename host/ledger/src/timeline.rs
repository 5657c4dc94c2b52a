//! The replayable timeline of tool calls: one row per state change, keeping
//! only what the state adds. The call's envelope (id, tool name) is its part
//! row's, and so is its content: a running row keeps no arguments (they are
//! the part's), a finished row no output, title or metadata. The one thing
//! a part row cannot say is the arguments a call started with when a before
//! hook rewrote them: the call's last row keeps those (`was`). The row's
//! time is the state's own (a running call's start, a finished call's end,
//! with its duration in `adds`). A state is read back as its defaults, then
//! what its row adds, then what its part row says.

//!
//! This module is the codec both backends share: what a row keeps
//! ([`adds`], [`time_of`]) and how rows read back become states
//! ([`replay`]); each backend's `timeline.rs` only moves rows.

use serde_json::{Map, Value, json};
use warden_protocol::{MessageId, Millis, Part, PartBody, SessionId, ToolState};

use crate::{LedgerError, PartEvent};

type Result<T> = std::result::Result<T, LedgerError>;

/// When a state happened: a running call's start, a finished call's end.
pub(crate) fn time_of(state: &ToolState, now: Millis) -> Millis {
    match state {
        ToolState::Pending { .. } => now,
        ToolState::Running { time, .. } => time.start,
        ToolState::Completed { time, .. } | ToolState::Error { time, .. } => time.end,
    }
}

/// What a state has beyond its status, its time, its part row's content and
/// the defaults a reader fills in: a running call's progress, a finished
/// call's duration (`d`, ms), an error's text, and `was`, the arguments a
/// finished call started with when they are not the ones it ended with.
pub(crate) fn adds(state: &ToolState, started_with: Option<&Value>) -> Option<String> {
    let mut obj = Map::new();
    match state {
        ToolState::Pending { .. } => {}
        ToolState::Running {
            title, metadata, ..
        } => {
            if let Some(t) = title.as_deref().filter(|t| !t.is_empty()) {
                obj.insert("title".into(), t.into());
            }
            if let Some(m) = metadata {
                obj.insert("metadata".into(), m.clone());
            }
        }
        ToolState::Completed { time, .. } => {
            duration(&mut obj, time);
        }
        ToolState::Error {
            error,
            time,
            interrupted,
            ..
        } => {
            obj.insert("error".into(), error.as_str().into());
            duration(&mut obj, time);
            if *interrupted {
                obj.insert("interrupted".into(), true.into());
            }
        }
    }
    if state.is_terminal()
        && let Some(was) = started_with.filter(|w| *w != state.input())
    {
        obj.insert("was".into(), was.clone());
    }
    (!obj.is_empty()).then(|| Value::Object(obj).to_string())
}

fn duration(obj: &mut Map<String, Value>, time: &warden_protocol::tool_state::Span) {
    if time.end != time.start {
        obj.insert("d".into(), (time.end - time.start).into());
    }
}

/// One timeline row as a backend read it, in the session's order.
pub(crate) struct Row {
    pub seq: i64,
    pub at: Millis,
    pub message_id: String,
    pub part_id: String,
    /// The status's name.
    pub status: String,
    pub adds: Option<String>,
    /// The part row's body as JSON (with its `type`); `None` when the part
    /// is missing.
    pub body: Option<String>,
}

/// Replay a session's rows (in order): each state on its part's envelope,
/// read back from its status, its time, what its row adds and what its part
/// row says.
pub(crate) fn replay(session: &SessionId, rows: Vec<Row>) -> Result<Vec<PartEvent>> {
    let corrupt = |seq: i64, reason: String| LedgerError::Corrupt {
        what: format!("part event {seq}"),
        reason,
    };
    let mut parsed = Vec::with_capacity(rows.len());
    // The arguments each call started with, where a hook rewrote them.
    let mut was: std::collections::HashMap<String, Value> = Default::default();
    for row in rows {
        let mut extra: Map<String, Value> = match &row.adds {
            Some(adds) => {
                serde_json::from_str(adds).map_err(|e| corrupt(row.seq, e.to_string()))?
            }
            None => Map::new(),
        };
        if let Some(w) = extra.remove("was") {
            was.insert(row.part_id.clone(), w);
        }
        parsed.push((row, extra));
    }
    let mut out = Vec::with_capacity(parsed.len());
    for (row, extra) in parsed {
        let seq = row.seq;
        let body = row
            .body
            .ok_or_else(|| corrupt(seq, format!("its part {} is missing", row.part_id)))?;
        let mut envelope: PartBody =
            serde_json::from_str(&body).map_err(|e| corrupt(seq, e.to_string()))?;
        let PartBody::Tool { state: s, .. } = &mut envelope else {
            return Err(corrupt(
                seq,
                format!("its part {} is not a tool call", row.part_id),
            ));
        };
        let last = Last {
            input: was.get(&row.part_id).unwrap_or(s.input()),
            title: match &*s {
                ToolState::Completed { title, .. } => title,
                _ => "",
            },
        };
        *s = state(&row.status, row.at, extra, &last).map_err(|e| corrupt(seq, e))?;
        out.push(PartEvent {
            seq,
            at: row.at,
            message_id: MessageId(row.message_id.clone()),
            part: Part {
                id: row.part_id.into(),
                session_id: session.clone(),
                message_id: MessageId(row.message_id),
                body: envelope,
            },
        });
    }
    Ok(out)
}

/// What a part row says that its timeline rows leave out.
struct Last<'a> {
    /// The arguments the call ran with: its last state's, or `was`.
    input: &'a Value,
    /// Its title, when it completed.
    title: &'a str,
}

/// A state from its status, its row's time, what its row adds and what its
/// part row says (rows carried over from schema 1 add their whole state,
/// times included; rows before schema 8 keep a running call's arguments and
/// a completed one's title themselves).
fn state(
    status: &str,
    at: Millis,
    mut extra: Map<String, Value>,
    last: &Last<'_>,
) -> std::result::Result<ToolState, String> {
    let start = at - extra.remove("d").and_then(|d| d.as_i64()).unwrap_or(0);
    let mut v = match status {
        "pending" => json!({"input": {}, "raw": ""}),
        "running" => json!({"input": last.input, "time": {"start": at}}),
        "completed" => {
            json!({"input": null, "output": "", "title": last.title, "metadata": null, "time": {"start": start, "end": at}})
        }
        _ => json!({"input": null, "error": "", "time": {"start": start, "end": at}}),
    };
    if let Some(obj) = v.as_object_mut() {
        obj.extend(extra);
        obj.insert("status".into(), status.into());
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// For an import: the arguments each exported event's call started with,
/// where they are not the ones it ended with (`last_input`: each part's
/// final arguments, by part id), so the copy's rows say what the
/// original's said.
pub(crate) fn started_with<'a>(
    events: &'a [PartEvent],
    last_input: impl Fn(&str) -> Option<&'a Value>,
) -> Vec<Option<&'a Value>> {
    let mut running: std::collections::HashMap<&str, &Value> = Default::default();
    events
        .iter()
        .map(|e| {
            let state = e.part.tool_state()?;
            if let ToolState::Running { input, .. } = state {
                running.insert(e.part.id.as_str(), input);
            }
            let started = running.get(e.part.id.as_str()).copied()?;
            (state.is_terminal() && last_input(e.part.id.as_str()) != Some(started))
                .then_some(started)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_part(state: &ToolState) -> String {
        json!({"type": "tool", "callID": "c1", "tool": "echo", "state": state}).to_string()
    }

    fn row(seq: i64, state: &ToolState, adds: Option<String>, last: &ToolState) -> Row {
        Row {
            seq,
            at: time_of(state, 1),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            status: state.status().into(),
            adds,
            body: Some(tool_part(last)),
        }
    }

    fn states(rows: Vec<Row>) -> Vec<ToolState> {
        replay(&SessionId("ses_1".into()), rows)
            .expect("replays")
            .into_iter()
            .map(|e| e.part.tool_state().expect("a tool part").clone())
            .collect()
    }

    #[test]
    fn a_call_reads_back_from_its_rows_and_its_part() {
        let pending = ToolState::pending();
        let running = pending.start(json!({"a": 1}), 5).expect("starts");
        let done = running
            .complete(
                json!({"a": 1}),
                "out".into(),
                "a title".into(),
                json!({"k": 1}),
                9,
            )
            .expect("completes");
        // Content stays in the part row: no arguments, output, title or metadata.
        assert_eq!(adds(&pending, None), None);
        assert_eq!(adds(&running, None), None);
        let kept =
            adds(&done, Some(&json!({"a": 1}))).expect("a completed state adds its duration");
        assert_eq!(kept, r#"{"d":4}"#);
        assert_eq!((time_of(&running, 7), time_of(&done, 11)), (5, 9));

        let read = states(vec![
            row(1, &pending, adds(&pending, None), &done),
            row(2, &running, adds(&running, None), &done),
            row(3, &done, Some(kept), &done),
        ]);
        assert_eq!(read[0], pending);
        assert_eq!(read[1], running);
        match &read[2] {
            ToolState::Completed {
                input,
                output,
                title,
                time,
                ..
            } => {
                assert_eq!(
                    (input, output.as_str(), title.as_str()),
                    (&Value::Null, "", "a title")
                );
                assert_eq!((time.start, time.end), (5, 9));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn arguments_a_hook_rewrote_keep_the_ones_the_call_started_with() {
        let running = ToolState::pending()
            .start(json!({"path": "a"}), 5)
            .expect("starts");
        let done = running
            .fail_with(json!({"path": "b"}), "no".into(), None, 8)
            .expect("fails");
        let kept = adds(&done, Some(&json!({"path": "a"}))).expect("adds");
        assert!(kept.contains(r#""was":{"path":"a"}"#), "{kept}");
        let read = states(vec![
            row(1, &running, adds(&running, None), &done),
            row(2, &done, Some(kept), &done),
        ]);
        assert_eq!(read[0], running);
        assert!(
            matches!(&read[1], ToolState::Error { error, time, .. } if error == "no" && time.start == 5)
        );
        // An import writes what the export read: the same `was`.
        let events = replay(
            &SessionId("ses_1".into()),
            vec![
                row(1, &running, adds(&running, None), &done),
                row(2, &done, adds(&done, Some(&json!({"path": "a"}))), &done),
            ],
        )
        .expect("replays");
        let last = json!({"path": "b"});
        assert_eq!(
            started_with(&events, |_| Some(&last)),
            vec![None, Some(&json!({"path": "a"}))]
        );
    }

    #[test]
    fn rows_written_before_schema_8_keep_their_own_arguments_and_title() {
        let running = ToolState::pending()
            .start(json!({"a": 1}), 5)
            .expect("starts");
        let done = running
            .complete(json!({"a": 2}), "out".into(), "new".into(), json!({}), 9)
            .expect("completes");
        let read = states(vec![
            row(1, &running, Some(r#"{"input":{"a":1}}"#.into()), &done),
            row(2, &done, Some(r#"{"title":"old","d":4}"#.into()), &done),
        ]);
        assert_eq!(read[0], running);
        assert!(matches!(&read[1], ToolState::Completed { title, .. } if title == "old"));
    }
}
