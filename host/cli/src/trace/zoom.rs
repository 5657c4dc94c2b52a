//! A part of a timeline: `trace --call ID` (that call's lane alone, from
//! its first state to its last with a margin, and the session's spans
//! then) or
//! `--from S --to S` (seconds since the session began). On a session of
//! minutes, a 2 ms hook or a 40 ms model request is under a pixel wide;
//! zoomed to the call it belongs to, it is drawn at its size, with its
//! label. Spans that reach past the window are cut at its edges but keep
//! their whole duration (`ms`), which is what their labels say.

use anyhow::{Result, bail};
use warden_protocol::Millis;

use super::timeline::{Span, Timeline};

/// What part of a session to show.
#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// One call's lane from its first state to its last, with a margin.
    Call(String),
    /// Seconds since the session's start.
    Between(Option<f64>, Option<f64>),
}

/// The margin around a call, as a share of its length (each side).
const MARGIN: f64 = 0.05;

/// Narrow `t` to `window`.
pub fn zoom(t: &mut Timeline, window: &Window) -> Result<()> {
    let (from, to) = match window {
        Window::Call(id) => {
            let Some(call) = t.calls.iter().find(|c| &c.call_id == id) else {
                let known: Vec<&str> = t.calls.iter().map(|c| c.call_id.as_str()).collect();
                bail!(
                    "no call {id} in this session; its calls are: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
            };
            let first = call.transitions.first().map_or(t.start, |s| s.at);
            let last = call
                .transitions
                .last()
                .map_or(t.end, |s| s.at)
                .max(call.phases.iter().map(|p| p.end).max().unwrap_or(first));
            let pad = (((last - first) as f64 * MARGIN) as i64).max(1);
            (first - pad, last + pad)
        }
        Window::Between(from, to) => {
            let at = |s: f64| t.start + (s * 1000.0).round() as Millis;
            let (from, to) = (from.map_or(t.start, at), to.map_or(t.end, at));
            if to <= from {
                bail!(
                    "--to must be later than --from (seconds since the session's start; it lasted {:.3} s)",
                    (t.end - t.start) as f64 / 1000.0
                );
            }
            (from, to)
        }
    };
    let overlaps = |s: &Span| s.end >= from && s.start <= to;
    let cut = |s: &Span| Span {
        start: s.start.max(from),
        end: s.end.min(to),
        ..s.clone()
    };
    t.status = t.status.iter().filter(|s| overlaps(s)).map(cut).collect();
    t.calls.retain(|c| {
        let first = c.transitions.first().map(|s| s.at);
        let last = c.transitions.last().map(|s| s.at);
        let within = matches!((first, last), (Some(a), Some(b)) if b >= from && a <= to);
        // Zoomed to a call: that call's lane alone, even when others ran
        // beside it.
        within && !matches!(window, Window::Call(id) if *id != c.call_id)
    });
    for c in &mut t.calls {
        c.phases = c.phases.iter().filter(|s| overlaps(s)).map(cut).collect();
    }
    t.start = from;
    t.end = to;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::timeline::{CallLane, Transition};
    use super::*;

    fn span(state: &str, start: Millis, end: Millis) -> Span {
        Span {
            state: state.into(),
            detail: None,
            start,
            end,
            ms: end - start,
        }
    }

    fn call(id: &str, phases: Vec<Span>) -> CallLane {
        let first = phases.first().unwrap().start;
        let last = phases.last().unwrap().end;
        CallLane {
            call_id: id.into(),
            tool: "read".into(),
            message_id: "msg_1".into(),
            outcome: "completed".into(),
            transitions: vec![
                Transition {
                    status: "pending",
                    at: first,
                    since_previous_ms: None,
                    detail: None,
                    interrupted: false,
                },
                Transition {
                    status: "completed",
                    at: last,
                    since_previous_ms: Some(last - first),
                    detail: None,
                    interrupted: false,
                },
            ],
            phases,
            total_ms: last - first,
            audit: Vec::new(),
        }
    }

    /// A 60 s session; at 30 s one call with a 2 ms hook and 20 ms run.
    fn long_session() -> Timeline {
        Timeline {
            session: "ses_1".into(),
            directory: "/p".into(),
            start: 0,
            end: 60_000,
            status: vec![
                span("model request", 0, 29_990),
                span("tools", 29_990, 30_030),
                span("streaming", 30_030, 60_000),
            ],
            calls: vec![
                call(
                    "c1",
                    vec![
                        span("pending", 30_000, 30_001),
                        span("hook before", 30_001, 30_003),
                        span("running", 30_003, 30_023),
                    ],
                ),
                call("c2", vec![span("running", 50_000, 50_010)]),
            ],
        }
    }

    /// The width the SVG draws a box of `state` in `lane` at.
    fn width(svg: &str, lane: &str, state: &str) -> f64 {
        let lane_at = svg.find(&format!("data-lane=\"{lane}\"")).unwrap();
        let rest = &svg[lane_at..];
        let at = rest.find(&format!("data-state=\"{state}\"")).unwrap();
        let w = &rest[at..][rest[at..].find("width=\"").unwrap() + 7..];
        w[..w.find('"').unwrap()].parse().unwrap()
    }

    #[test]
    fn zoomed_to_a_call_its_hook_is_drawn_at_its_size() {
        let whole = long_session();
        let svg = super::super::svg::render(&whole);
        assert!(
            width(&svg, "c1", "hook before") < 2.0,
            "under a pixel, drawn at the least"
        );
        let mut t = long_session();
        zoom(&mut t, &Window::Call("c1".into())).unwrap();
        assert_eq!(t.calls.len(), 1, "only the calls in the window");
        assert_eq!((t.start, t.end), (29_999, 30_024));
        let svg = super::super::svg::render(&t);
        assert!(width(&svg, "c1", "hook before") > 50.0, "{svg}");
        // The session's span around it, cut at the edges, keeps its length.
        let tools = &t.status[0];
        assert_eq!(
            (tools.state.as_str(), tools.start, tools.end, tools.ms),
            ("tools", 29_999, 30_024, 40)
        );
        let tip = format!("tools: {}", super::super::svg::duration(40));
        assert!(svg.contains(&tip), "{svg}");
    }

    #[test]
    fn a_window_in_seconds_keeps_what_overlaps_it_and_bad_windows_are_refused() {
        let mut t = long_session();
        zoom(&mut t, &Window::Between(Some(45.0), None)).unwrap();
        assert_eq!(
            t.calls
                .iter()
                .map(|c| c.call_id.as_str())
                .collect::<Vec<_>>(),
            ["c2"]
        );
        assert_eq!(
            t.status
                .iter()
                .map(|s| s.state.as_str())
                .collect::<Vec<_>>(),
            ["streaming"]
        );
        let mut t = long_session();
        let err = zoom(&mut t, &Window::Between(Some(5.0), Some(4.0))).unwrap_err();
        assert!(
            err.to_string().contains("--to must be later than --from"),
            "{err}"
        );
        let err = zoom(&mut t, &Window::Call("nope".into())).unwrap_err();
        assert!(err.to_string().contains("its calls are: c1, c2"), "{err}");
    }
}
