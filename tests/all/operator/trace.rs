//! The trace: every phase recorded, as JSON and as an SVG timeline checked
//! by its structure (lanes, one box per state with its duration).

use serde_json::{Value, json};

use crate::common::*;
use crate::server::{Server, client, is_idle, model, new_session, send, subscribe, until};

/// `warden trace ID --format F` → stdout.
fn trace(env: &Env, session: &str, format: &str) -> String {
    let out = env
        .warden(&["trace", session, "--format", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every value of `attr="…"` in the tags that start with `tag`, in order.
fn attrs(svg: &str, tag: &str, attr: &str) -> Vec<String> {
    svg.match_indices(tag)
        .map(|(i, _)| {
            let rest = &svg[i..];
            let rest = &rest[..rest.find('>').unwrap()];
            let key = format!(" {attr}=\"");
            let at = rest
                .find(&key)
                .unwrap_or_else(|| panic!("{attr} missing in {rest}"));
            let v = &rest[at + key.len()..];
            v[..v.find('"').unwrap()].to_string()
        })
        .collect()
}

/// The SVG split into lanes: (lane name, [(state, ms)]).
fn lanes(svg: &str) -> Vec<(String, Vec<(String, i64)>)> {
    svg.split("<g class=\"lane\"")
        .skip(1)
        .map(|g| {
            let g = &g[..g.find("</g>").unwrap()];
            let name = attrs(&format!("<g{g}"), "<g", "data-lane")[0].clone();
            let states = attrs(g, "<rect class=\"box\"", "data-state");
            let ms = attrs(g, "<rect class=\"box\"", "data-ms");
            (
                name,
                states
                    .into_iter()
                    .zip(ms.iter().map(|m| m.parse::<i64>().unwrap()))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn one_call_draws_a_session_lane_and_a_call_lane_with_each_state_and_its_duration() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("read a.txt");
    assert!(run.status.success(), "{}", run.stderr);
    let id = run.session();

    let t: Value = serde_json::from_str(&trace(&env, id.as_str(), "json")).unwrap();
    let states = |spans: &Value| -> Vec<String> {
        spans
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["state"].as_str().unwrap().to_string())
            .collect()
    };
    // Two model requests, each with its first token and its finish; the
    // tools ran between them.
    assert_eq!(
        states(&t["status"]),
        [
            "model request",
            "streaming",
            "tools",
            "model request",
            "streaming"
        ]
    );
    let call = &t["calls"][0];
    assert_eq!(call["outcome"], "completed");
    assert_eq!(states(&call["phases"]), ["pending", "running"]);
    // The phases lie end to end from the first state to the last.
    let phases = call["phases"].as_array().unwrap();
    let transitions = call["transitions"].as_array().unwrap();
    assert_eq!(phases[0]["start"], transitions[0]["at"]);
    assert_eq!(phases[0]["end"], phases[1]["start"]);
    assert_eq!(phases[1]["end"], transitions[2]["at"]);
    for p in phases {
        assert_eq!(
            p["ms"].as_i64().unwrap(),
            p["end"].as_i64().unwrap() - p["start"].as_i64().unwrap()
        );
    }

    let svg = trace(&env, id.as_str(), "svg");
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(!svg.contains("href"), "self-contained: nothing to fetch");
    let drawn = lanes(&svg);
    let want_call: Vec<(String, i64)> = phases
        .iter()
        .map(|p| {
            (
                p["state"].as_str().unwrap().to_string(),
                p["ms"].as_i64().unwrap(),
            )
        })
        .collect();
    let want_session: Vec<(String, i64)> = t["status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["state"].as_str().unwrap().to_string(),
                p["ms"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        drawn,
        [
            ("session".to_string(), want_session),
            ("call_1".to_string(), want_call)
        ]
    );
    assert_eq!(
        attrs(&svg, "<rect class=\"end\"", "data-state"),
        ["completed"]
    );
    assert_eq!(
        attrs(&svg, "<g class=\"lane\" data-lane=\"call_1\"", "data-tool"),
        ["read"]
    );
}

#[test]
fn two_hundred_calls_draw_two_hundred_lanes() {
    let env = Env::new();
    // 200 different files: the same call 200 times would (rightly) be
    // stopped by the doom-loop guard at the third.
    for i in 0..200 {
        env.file(&format!("f{i:03}.txt"), "alpha\n");
    }
    let calls: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("c{i:03}"), "name": "read", "arguments": {"filePath": format!("f{i:03}.txt")}}))
        .collect();
    env.cassette(json!([{"tool_calls": calls}, {"text": "done"}]));
    let run = env.run_json("read it 200 times");
    assert!(run.status.success(), "{}", run.stderr);
    let svg = trace(&env, run.session().as_str(), "svg");
    let drawn = lanes(&svg);
    assert_eq!(drawn.len(), 201);
    assert_eq!(drawn[0].0, "session");
    let names: Vec<String> = drawn[1..].iter().map(|(n, _)| n.clone()).collect();
    let want: Vec<String> = (0..200).map(|i| format!("c{i:03}")).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, want, "one lane per call");
    for (name, boxes) in &drawn[1..] {
        let states: Vec<&str> = boxes.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(states, ["pending", "running"], "{name}");
    }
    assert_eq!(attrs(&svg, "<rect class=\"end\"", "data-state").len(), 200);
    // Lanes are compact: the picture stays under 20 px a lane.
    let height: f64 = attrs(&svg, "<svg", "height")[0].parse().unwrap();
    assert!(height < 201.0 * 20.0, "{height}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_a_person_takes_to_answer_is_awaiting_permission_not_running() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "read it"}
    ]));
    let s = Server::start(&env, &[], &[]);
    let c = client();
    let id = new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;
    send(
        &c,
        "POST",
        &s.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
    )
    .await;
    let seen = until(&mut events, |e| e["type"] == "permission.asked").await;
    let rid = seen.last().unwrap()["id"].as_str().unwrap().to_string();
    // The person takes a while.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    send(
        &c,
        "POST",
        &s.url(&format!("/permission/{rid}/reply")),
        Some(json!({"reply": "once"})),
    )
    .await;
    until(&mut events, is_idle).await;

    let t: Value = serde_json::from_str(&trace(&env, &id, "json")).unwrap();
    let phases = t["calls"][0]["phases"].as_array().unwrap().clone();
    let states: Vec<&str> = phases
        .iter()
        .map(|p| p["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "awaiting permission", "running"]);
    assert_eq!(phases[1]["detail"], "read");
    assert!(phases[1]["ms"].as_i64().unwrap() >= 300, "{phases:?}");
    let svg = trace(&env, &id, "svg");
    let drawn = lanes(&svg);
    assert_eq!(
        drawn[1]
            .1
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>(),
        ["pending", "awaiting permission", "running"]
    );
    let text = trace(&env, &id, "text");
    assert!(text.contains("awaiting permission"), "{text}");
}

#[test]
fn retry_waits_and_hooks_have_rows_of_their_own() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"retry": {"initial_delay_ms": 50, "max_attempts": 3}}));
    env.cassette(json!([
        {"error": {"kind": "rate-limited", "message": "slow down", "retry_after_ms": 60}},
        {"text": "done"}
    ]));
    let run = env.run_json("hello");
    assert!(run.status.success(), "{}", run.stderr);
    let t: Value = serde_json::from_str(&trace(&env, run.session().as_str(), "json")).unwrap();
    let status: Vec<(String, Value)> = t["status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["state"].as_str().unwrap().to_string(),
                s["detail"].clone(),
            )
        })
        .collect();
    assert_eq!(status.len(), 4, "{status:?}");
    assert_eq!(status[0], ("model request".into(), Value::Null));
    assert_eq!(status[1].0, "retry wait");
    assert!(
        status[1]
            .1
            .as_str()
            .unwrap()
            .starts_with("attempt 1 failed: "),
        "{status:?}"
    );
    assert_eq!(status[2], ("model request".into(), json!("attempt 2")));
    assert_eq!(status[3].0, "streaming");
    let wait = &t["status"][1];
    assert!(wait["ms"].as_i64().unwrap() >= 60, "{wait}");
}

#[test]
fn each_hook_run_is_a_box_of_its_own() {
    let env = Env::new();
    env.config(json!({"plugins": [
        Env::fixtures_plugin(json!({})),
        {"name": "first", "path": plugin_wasm("warden_fixture_hooks.wasm"), "grants": {"env": ["FIXTURE_HOOK_1"]}},
        {"name": "second", "path": plugin_wasm("warden_fixture_hooks.wasm"), "grants": {"env": ["FIXTURE_HOOK_2"]}},
    ]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"x": 1}}]},
        {"text": "done"}
    ]));
    let mark = |label: &str| json!({"label": label, "before": "mark", "after": "mark"}).to_string();
    let (a, b) = (mark("first"), mark("second"));
    let run = env.run_json_with(
        "go",
        &[("FIXTURE_HOOK_1", Some(&a)), ("FIXTURE_HOOK_2", Some(&b))],
    );
    assert!(run.status.success(), "{}", run.stderr);
    let t: Value = serde_json::from_str(&trace(&env, run.session().as_str(), "json")).unwrap();
    let phases: Vec<(String, Value)> = t["calls"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["state"].as_str().unwrap().to_string(),
                p["detail"].clone(),
            )
        })
        .collect();
    assert_eq!(
        phases,
        [
            ("pending".to_string(), Value::Null),
            ("hook before".into(), json!("first")),
            ("hook before".into(), json!("second")),
            ("running".into(), Value::Null),
            ("hook after".into(), json!("first")),
            ("hook after".into(), json!("second")),
        ]
    );
    let drawn = lanes(&trace(&env, run.session().as_str(), "svg"));
    assert_eq!(
        drawn[1]
            .1
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>(),
        [
            "pending",
            "hook before",
            "hook before",
            "running",
            "hook after",
            "hook after"
        ]
    );
}

/// A failed call's reason is in the picture: hovering its end mark or its
/// outcome says why it failed, not only that it did.
#[test]
fn a_failed_call_says_why_in_the_svg() {
    let env = Env::new();
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "/etc/hostname"}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("read outside");
    assert!(run.status.success(), "{}", run.stderr);
    let svg = trace(&env, run.session().as_str(), "svg");
    let end = svg
        .split("<rect class=\"end\"")
        .nth(1)
        .expect("an end mark");
    let title = &end[end.find("<title>").unwrap() + 7..end.find("</title>").unwrap()];
    assert!(title.starts_with("error at +"), "{title}");
    assert!(title.contains("outside the working directory"), "{title}");
    assert!(
        svg.contains("<title>error: ") && svg.matches("outside the working directory").count() >= 2,
        "the outcome's label says it too: {svg}"
    );
}

/// On a session of seconds a hook of a millisecond is under a pixel;
/// `--call` narrows the picture to one call, where each of its hooks is
/// drawn at its size, and only that call's lane is drawn.
#[test]
fn zoomed_to_one_call_its_hooks_are_drawn_at_their_size() {
    let env = Env::new();
    env.config(json!({"plugins": [
        Env::fixtures_plugin(json!({})),
        {"name": "first", "path": plugin_wasm("warden_fixture_hooks.wasm"), "grants": {"env": ["FIXTURE_HOOK_1"]}},
    ]}));
    // The model takes 3 s before the call and after it.
    env.cassette(json!([
        {"delay_ms": 3000, "tool_calls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 100}}]},
        {"tool_calls": [{"id": "c2", "name": "echo", "arguments": {"x": 2}}]},
        {"delay_ms": 3000, "text": "done"}
    ]));
    let mark = json!({"label": "first", "before": "mark", "after": "mark"}).to_string();
    let run = env.run_json_with("go", &[("FIXTURE_HOOK_1", Some(&mark))]);
    assert!(run.status.success(), "{}", run.stderr);
    let session = run.session();
    // Each hook box's (ms, width in px).
    let hook_widths = |svg: &str| -> Vec<(i64, f64)> {
        let states = attrs(svg, "<rect class=\"box\"", "data-state");
        let ms = attrs(svg, "<rect class=\"box\"", "data-ms");
        let widths = attrs(svg, "<rect class=\"box\"", "width");
        states
            .iter()
            .zip(ms.iter().zip(widths))
            .filter(|(s, _)| s.starts_with("hook"))
            .map(|(_, (m, w))| (m.parse().unwrap(), w.parse().unwrap()))
            .collect()
    };
    let whole = trace(&env, session.as_str(), "svg");
    assert_eq!(lanes(&whole).len(), 3, "the session and two calls");
    let out = env
        .warden(&["trace", session.as_str(), "--format", "svg", "--call", "c1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let zoomed = String::from_utf8(out.stdout).unwrap();
    let drawn = lanes(&zoomed);
    assert_eq!(
        drawn.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        ["session", "c1"]
    );
    let (before, after) = (hook_widths(&whole), hook_widths(&zoomed));
    assert_eq!(before.len(), 4, "two hook runs a call: {before:?}");
    assert_eq!(after.len(), 2, "c1's own: {after:?}");
    // The scale: c1's 100 ms run is a sliver of 6 s whole and most of the
    // zoomed picture, which is c1 alone (however long its hooks took).
    let running = |svg: &str| -> f64 {
        let lane = &svg[svg.find("data-lane=\"c1\"").unwrap()..];
        let lane = &lane[..lane.find("</g>").unwrap()];
        let states = attrs(lane, "<rect class=\"box\"", "data-state");
        let widths = attrs(lane, "<rect class=\"box\"", "width");
        states
            .iter()
            .zip(widths)
            .find(|(s, _)| s.as_str() == "running")
            .map(|(_, w)| w.parse().unwrap())
            .unwrap()
    };
    let (w, z) = (running(&whole), running(&zoomed));
    assert!(z > w * 3.0, "c1's run: zoomed {z} px against {w} px whole");
    // Each hook is drawn at the zoomed scale: no narrower than before.
    for ((ms, w), (_, z)) in before.iter().take(2).zip(&after) {
        assert!(z >= w, "a {ms} ms hook: zoomed {z} px against {w} px whole");
    }
    // An unknown call is an error that lists the session's calls.
    let out = env
        .warden(&["trace", session.as_str(), "--call", "c9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no call c9 in this session; its calls are: c1, c2"),
        "{err}"
    );
}
