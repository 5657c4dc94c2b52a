//! MCP servers are native processes outside the sandbox, configured by the
//! operator: a rule that allows everything does not run them unasked, and a
//! server that hangs, floods the tool list, offers colliding names or
//! returns megabytes is refused with its name, not let through.

use serde_json::{Value, json};

use super::hostile_mcp;
use crate::common::*;

fn with_server(mode: &str, extra: Value, permission: Value) -> Value {
    let mut server = hostile_mcp(mode, None);
    for (k, v) in extra.as_object().unwrap() {
        server[k] = v.clone();
    }
    // A refusal must not end the turn: the model reads it and goes on.
    json!({"mcp": {"srv": server}, "permission": permission,
           "experimental": {"continue_loop_on_deny": true}})
}

#[test]
fn a_server_that_hangs_floods_or_collides_stops_the_start_naming_it() {
    for (mode, extra, said) in [
        (
            "silent",
            json!({"startup_timeout_ms": 1500}),
            "MCP server srv: it did not start and list its tools within 1500 ms (startup_timeout_ms)",
        ),
        (
            "many",
            json!({}),
            "MCP server srv: it offers 5000 tools; warden takes at most 256 from one server",
        ),
        (
            "collide",
            json!({}),
            "MCP server srv: its tool \"a_b\" would be offered as srv_a_b, which is already tool \"a.b\" of MCP server srv's",
        ),
    ] {
        let env = Env::new();
        env.config(with_server(mode, extra, json!({})));
        env.cassette(json!([{"text": "never"}]));
        let run = env.run_json("hi");
        assert!(!run.status.success(), "{mode}");
        assert!(run.stderr.contains(said), "{mode}: {}", run.stderr);
        assert!(env.requests().is_empty(), "{mode}: the model was asked");
    }
}

#[test]
fn a_huge_result_is_refused_and_the_next_call_still_runs() {
    let env = Env::new();
    env.config(with_server(
        "huge",
        json!({"max_output_kb": 64}),
        json!({"srv_*": "allow"}),
    ));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "huge", "name": "srv_huge", "arguments": {}},
            {"id": "echo", "name": "srv_echo", "arguments": {"message": "still here"}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json("flood");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    assert!(results[0].1, "{:?}", results[0]);
    assert!(
        results[0].2.contains("over its output cap of 65536 bytes"),
        "{}",
        results[0].2
    );
    assert_eq!(results[1], ("echo".into(), false, "still here".into()));
}

#[test]
fn a_rule_allowing_everything_does_not_run_an_mcp_tool_but_one_naming_it_does() {
    let env = Env::new();
    let echo = json!([
        {"tool_calls": [{"id": "e", "name": "srv_echo", "arguments": {"message": "hi"}}]},
        {"text": "done"}
    ]);
    env.config(with_server("ok", json!({}), json!({"*": "allow"})));
    env.cassette(echo.clone());
    let run = env.run_json("echo");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].2.contains("`srv_echo` on `*` needs approval"),
        "{}",
        results[0].2
    );
    for (rule, runs) in [
        (json!({"srv_echo": "allow"}), true),
        (json!({"srv_*": "allow"}), true),
        (json!({"srv*": "allow"}), false),
        (json!({"s*_echo": "allow"}), false),
    ] {
        env.config(with_server("ok", json!({}), rule.clone()));
        env.cassette(echo.clone());
        let run = env.run_json("echo");
        assert!(run.status.success(), "{}", run.stderr);
        // Requests are recorded run after run: this run's is the last.
        let results = tool_results(env.requests().last().unwrap());
        assert_eq!(!results[0].1, runs, "{rule}: {results:?}");
        if runs {
            assert_eq!(results[0].2, "hi");
        }
    }
}
