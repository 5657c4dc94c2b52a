//! The timeline drawn as one self-contained SVG: the session's status lane
//! on top, then one lane per tool call, on a shared time axis. Each box is
//! one state with its duration (written in the box when it fits, always in
//! its tooltip); the label column says which call and how it ended.
//!
//! Every box carries `data-state` and `data-ms`, every lane `data-lane`,
//! so the picture can be checked by its structure as well as by eye.

use std::fmt::Write as _;

use super::timeline::{Span, Timeline};

const WIDTH: f64 = 1200.0;
const LABELS: f64 = 250.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 86.0;

/// Fill colour of a state.
fn colour(state: &str) -> &'static str {
    match state {
        "pending" => "#c8ccd2",
        "awaiting permission" => "#f0a830",
        "hook before" | "hook after" => "#9b7fd1",
        "running" => "#3d85c6",
        "model request" => "#a9cbe8",
        "streaming" => "#5aa454",
        "retry wait" => "#d9534f",
        "tools" => "#dde3ea",
        _ => "#999999",
    }
}

fn outcome_colour(outcome: &str) -> &'static str {
    match outcome {
        "completed" => "#2e7d32",
        "pending" | "running" => "#777777",
        _ => "#c62828",
    }
}

/// `1.2 s`, `340 ms`.
pub fn duration(ms: i64) -> String {
    if ms >= 10_000 {
        format!("{:.0} s", ms as f64 / 1000.0)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A tick step of 1, 2 or 5 × 10^k ms giving at most about ten ticks.
fn tick_step(span_ms: i64) -> i64 {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if span_ms / (step * m) <= 10 {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// Draw the timeline.
pub fn render(t: &Timeline) -> String {
    let many = t.calls.len() > 40;
    let lane_h: f64 = if many { 12.0 } else { 20.0 };
    let gap: f64 = if many { 3.0 } else { 6.0 };
    let font: f64 = if many { 9.0 } else { 11.0 };
    let lanes = 1 + t.calls.len();
    let plot = WIDTH - LABELS - RIGHT;
    let span_ms = (t.end - t.start).max(1);
    let x = |at: i64| LABELS + (at - t.start) as f64 / span_ms as f64 * plot;
    let lanes_top = TOP + 10.0;
    let height = lanes_top + lanes as f64 * (lane_h + gap) + 16.0;

    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="{font}" data-session="{}">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="12" y="22" font-size="15" font-weight="bold">warden trace {}</text>
<text x="12" y="40" fill="#555">{} · {} tool call{} · {}</text>
"##,
        escape(&t.session),
        escape(&t.session),
        escape(&t.directory),
        t.calls.len(),
        if t.calls.len() == 1 { "" } else { "s" },
        duration(t.end - t.start),
    );
    // Legend.
    let mut lx = 12.0;
    for (state, label) in [
        ("model request", "model request"),
        ("streaming", "streaming"),
        ("tools", "tools"),
        ("retry wait", "retry wait"),
        ("pending", "pending"),
        ("awaiting permission", "awaiting permission"),
        ("hook before", "hook (before / after)"),
        ("running", "running"),
    ] {
        let _ = writeln!(
            s,
            r##"<rect x="{lx}" y="52" width="12" height="12" fill="{}"/><text x="{}" y="62">{label}</text>"##,
            colour(state),
            lx + 16.0
        );
        lx += 16.0 + label.len() as f64 * 6.6 + 14.0;
    }
    // Axis and grid.
    let step = tick_step(span_ms);
    let mut at = 0;
    while at <= span_ms {
        let gx = x(t.start + at);
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{}" x2="{gx:.1}" y2="{}" stroke="#e4e4e4"/><text x="{gx:.1}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
            TOP - 4.0,
            height - 12.0,
            TOP - 8.0,
            if at == 0 {
                "0".to_string()
            } else {
                duration(at)
            }
        );
        at += step;
    }
    let lane_y = |i: usize| lanes_top + i as f64 * (lane_h + gap);

    // The session's lane.
    let y = lane_y(0);
    let _ = writeln!(
        s,
        r##"<g class="lane" data-lane="session"><text x="12" y="{:.1}" font-weight="bold">session</text>"##,
        y + lane_h * 0.75
    );
    for span in &t.status {
        boxed(&mut s, span, x(span.start), x(span.end), y, lane_h, font);
    }
    s.push_str("</g>\n");
    let _ = writeln!(
        s,
        r##"<line x1="12" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#bbb"/>"##,
        y + lane_h + gap / 2.0,
        WIDTH - RIGHT
    );

    // One lane per call.
    for (i, c) in t.calls.iter().enumerate() {
        let y = lane_y(i + 1);
        let label = format!("{}  {}", c.tool, c.call_id);
        let label = if label.chars().count() > 30 {
            format!("{}…", label.chars().take(29).collect::<String>())
        } else {
            label
        };
        let _ = writeln!(
            s,
            r##"<g class="lane" data-lane="{}" data-tool="{}" data-outcome="{}"><text x="12" y="{:.1}">{}</text><text x="{}" y="{:.1}" text-anchor="end" fill="{}">{} {}<title>{}</title></text>"##,
            escape(&c.call_id),
            escape(&c.tool),
            escape(&c.outcome),
            y + lane_h * 0.75,
            escape(&label),
            LABELS - 8.0,
            y + lane_h * 0.75,
            outcome_colour(&c.outcome),
            if c.outcome == "completed" {
                "✓"
            } else if c.outcome.starts_with("error") {
                "✗"
            } else {
                "…"
            },
            escape(&c.outcome),
            escape(
                &match c.transitions.last().and_then(|t| t.detail.as_deref()) {
                    Some(d) if c.outcome.starts_with("error") => format!("{}: {d}", c.outcome),
                    _ => c.outcome.clone(),
                }
            ),
        );
        for span in &c.phases {
            boxed(&mut s, span, x(span.start), x(span.end), y, lane_h, font);
        }
        // How it ended: a mark at its last state.
        if let Some(last) = c.transitions.last()
            && matches!(last.status, "completed" | "error")
            && (t.start..=t.end).contains(&last.at)
        {
            let ex = x(last.at);
            // Hovering the end says why a call failed (or what it returned).
            let why = last
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                r##"<rect class="end" data-state="{}" x="{:.1}" y="{y:.1}" width="3" height="{lane_h}" fill="{}"><title>{} at +{}{}</title></rect>"##,
                escape(&c.outcome),
                ex,
                outcome_colour(&c.outcome),
                escape(&c.outcome),
                duration(last.at - t.start),
                escape(&why)
            );
            // A call too short to see at this scale still says how long it took.
            if ex + 70.0 < WIDTH {
                let _ = writeln!(
                    s,
                    r##"<text x="{:.1}" y="{:.1}" fill="#666">{}</text>"##,
                    ex + 7.0,
                    y + lane_h * 0.75,
                    duration(c.total_ms)
                );
            }
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

/// One state as a box, with its duration inside when it fits.
fn boxed(s: &mut String, span: &Span, x0: f64, x1: f64, y: f64, h: f64, font: f64) {
    let w = (x1 - x0).max(1.5);
    let what = match &span.detail {
        Some(d) => format!("{} ({d})", span.state),
        None => span.state.clone(),
    };
    let tip = format!("{what}: {}", duration(span.ms));
    let _ = writeln!(
        s,
        r##"<rect class="box" data-state="{}" data-ms="{}" x="{x0:.1}" y="{y:.1}" width="{w:.1}" height="{h}" rx="2" fill="{}"><title>{}</title></rect>"##,
        escape(&span.state),
        span.ms,
        colour(&span.state),
        escape(&tip)
    );
    let inside = format!("{} {}", span.state, duration(span.ms));
    let text = if w > inside.len() as f64 * font * 0.58 + 6.0 {
        inside
    } else if w > duration(span.ms).len() as f64 * font * 0.58 + 6.0 {
        duration(span.ms)
    } else {
        return;
    };
    let dark = matches!(
        span.state.as_str(),
        "running" | "streaming" | "retry wait" | "hook before" | "hook after"
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" fill="{}" pointer-events="none">{}</text>"##,
        x0 + 3.0,
        y + h * 0.72,
        if dark { "#ffffff" } else { "#222222" },
        escape(&text)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(9), 1);
        assert_eq!(tick_step(95), 10);
        assert_eq!(tick_step(1800), 200);
        assert_eq!(tick_step(4000), 500);
        assert_eq!(duration(0), "0 ms");
        assert_eq!(duration(1500), "1.5 s");
        assert_eq!(duration(61_000), "61 s");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b>&\"\u{1b}"), "a&lt;b&gt;&amp;&quot; ");
    }
}
