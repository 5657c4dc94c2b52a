//! The replayable timeline of tool calls: one row per state change, keeping
//! only what the state adds. The call's envelope (id, tool name) is its part
//! row's; content is written once, in the part row (the input when the call
//! starts running is the one exception: it is what `running` adds). The row's
//! time is the state's own (a running call's start, a finished call's end,
//! with its duration in `adds`). A state is read back as its defaults, then
//! what its row adds.

use rusqlite::{Connection, params};
use serde_json::{Map, Value, json};
use warden_protocol::{MessageId, Millis, Part, PartBody, SessionId, ToolState};

use super::{Result, codec};
use crate::ledger::{LedgerError, PartEvent};

const INSERT: &str = "\
    INSERT INTO part_event (session, seq, message, part, status, at, adds)
    SELECT m.session,
           (SELECT COALESCE(MAX(seq), 0) + 1 FROM part_event WHERE session = m.session),
           m.key, ?3, ?4, ?5, ?6
    FROM message m JOIN session s ON s.key = m.session WHERE s.id = ?1 AND m.id = ?2";

/// When a state happened: a running call's start, a finished call's end.
pub(in crate::ledger) fn time_of(state: &ToolState, now: Millis) -> Millis {
    match state {
        ToolState::Pending { .. } => now,
        ToolState::Running { time, .. } => time.start,
        ToolState::Completed { time, .. } | ToolState::Error { time, .. } => time.end,
    }
}

/// What a state has beyond its status, its time and the defaults a reader
/// fills in; content is left out (it is in the part row), except a running
/// call's input. A finished call keeps its duration (`d`, ms).
pub(in crate::ledger) fn adds(state: &ToolState) -> Option<String> {
    let mut v = serde_json::to_value(state).ok()?;
    let obj = v.as_object_mut()?;
    obj.remove("status");
    obj.remove("time");
    if let ToolState::Completed { time, .. } | ToolState::Error { time, .. } = state
        && time.end != time.start
    {
        obj.insert("d".into(), (time.end - time.start).into());
    }
    match state {
        ToolState::Pending { .. } => {
            obj.remove("raw");
            obj.remove("input");
        }
        ToolState::Running { .. } => {}
        ToolState::Completed { .. } => {
            obj.remove("input");
            obj.remove("output");
            obj.remove("metadata");
        }
        ToolState::Error { .. } => {
            obj.remove("input");
            obj.remove("metadata");
        }
    }
    if obj.get("title").is_some_and(|t| t == "") {
        obj.remove("title");
    }
    (!obj.is_empty()).then(|| v.to_string())
}

/// Record a tool part's new state.
pub fn insert(conn: &Connection, part: &Part, now: Millis) -> Result<()> {
    let Some(state) = part.tool_state() else {
        return Ok(());
    };
    conn.prepare_cached(INSERT)?.execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::status_code(state.status()),
        time_of(state, now),
        adds(state),
    ])?;
    Ok(())
}

/// A timeline row with its own number and time (an import).
pub fn insert_at(conn: &Connection, part: &Part, seq: i64, at: Millis) -> Result<()> {
    let Some(state) = part.tool_state() else {
        return Ok(());
    };
    conn.prepare_cached(
        "INSERT INTO part_event (session, seq, message, part, status, at, adds)
         SELECT m.session, ?7, m.key, ?3, ?4, ?5, ?6
         FROM message m JOIN session s ON s.key = m.session WHERE s.id = ?1 AND m.id = ?2",
    )?
    .execute(params![
        part.session_id.as_str(),
        part.message_id.as_str(),
        part.id.as_str(),
        codec::status_code(state.status()),
        at,
        adds(state),
        seq,
    ])?;
    Ok(())
}

/// A state from its status, its row's time and what its row adds (rows
/// carried over from schema 1 add their whole state, times included).
pub(in crate::ledger) fn state(
    status: &str,
    at: Millis,
    adds: Option<&str>,
) -> std::result::Result<ToolState, String> {
    let mut extra: Map<String, Value> = match adds {
        Some(adds) => serde_json::from_str(adds).map_err(|e| e.to_string())?,
        None => Map::new(),
    };
    let start = at - extra.remove("d").and_then(|d| d.as_i64()).unwrap_or(0);
    let mut v = match status {
        "pending" => json!({"input": {}, "raw": ""}),
        "running" => json!({"input": {}, "time": {"start": at}}),
        "completed" => {
            json!({"input": null, "output": "", "title": "", "metadata": null, "time": {"start": start, "end": at}})
        }
        _ => json!({"input": null, "error": "", "time": {"start": start, "end": at}}),
    };
    if let Some(obj) = v.as_object_mut() {
        obj.extend(extra);
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert("status".into(), status.into());
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// The session's timeline, in order, each state on its part's envelope.
pub fn read(conn: &Connection, session: &SessionId) -> Result<Vec<PartEvent>> {
    let mut stmt = conn.prepare(
        "SELECT e.seq, e.at, m.id, e.part, e.status, e.adds, p.body
         FROM part_event e
         JOIN session s ON s.key = e.session
         JOIN message m ON m.key = e.message
         LEFT JOIN part p ON p.message = e.message AND p.id = e.part
         WHERE s.id = ?1 ORDER BY e.seq",
    )?;
    let rows = stmt.query_map(params![session.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Option<String>>(6)?,
        ))
    })?;
    let tool = codec::quoted("tool");
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, message_id, part_id, status, adds, body) = row?;
        let corrupt = |reason: String| LedgerError::Corrupt {
            what: format!("part event {seq}"),
            reason,
        };
        let status = codec::status_name(status)
            .ok_or_else(|| corrupt(format!("unknown status code {status}")))?;
        let body = body.ok_or_else(|| corrupt(format!("its part {part_id} is missing")))?;
        let mut envelope: PartBody =
            serde_json::from_str(&codec::splice(&body, &[("type", &tool)]))
                .map_err(|e| corrupt(e.to_string()))?;
        let PartBody::Tool { state: s, .. } = &mut envelope else {
            return Err(corrupt(format!("its part {part_id} is not a tool call")));
        };
        *s = state(status, at, adds.as_deref()).map_err(corrupt)?;
        out.push(PartEvent {
            seq,
            at,
            message_id: MessageId(message_id.clone()),
            part: Part {
                id: part_id.into(),
                session_id: session.clone(),
                message_id: MessageId(message_id),
                body: envelope,
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_from_what_it_adds() {
        let running = ToolState::pending()
            .start(json!({"a": 1}), 5)
            .expect("pending starts");
        let kept: Value = serde_json::from_str(&adds(&running).expect("running adds")).unwrap();
        assert_eq!(kept, json!({"input": {"a": 1}}));
        assert_eq!(time_of(&running, 7), 5);
        assert_eq!(
            state("running", 5, adds(&running).as_deref()).expect("reads"),
            running
        );
        let done = running
            .complete(
                json!({"a": 1}),
                "out".into(),
                String::new(),
                json!({"k": 1}),
                9,
            )
            .expect("running completes");
        // Content stays in the part row: not the output, not the metadata.
        let kept = adds(&done).expect("a completed state adds its times");
        assert!(!kept.contains("out") && !kept.contains("\"k\""), "{kept}");
        assert_eq!(time_of(&done, 11), 9);
        match state("completed", 9, adds(&done).as_deref()).expect("reads") {
            ToolState::Completed {
                input,
                output,
                time,
                ..
            } => {
                assert_eq!((input, output.as_str()), (Value::Null, ""));
                assert_eq!((time.start, time.end), (5, 9));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(adds(&ToolState::pending()), None);
    }
}
