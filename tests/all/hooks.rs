//! tool.execute.before / after hooks through the real binary: the order
//! they run in, rewrites checked again against permission, blocks, the two
//! example hooks (`guard-writes`, `redact`), and hooks that crash, failing
//! closed or, when configured so, open.
//!
//! Most cases use the scriptable fixture hook (plugins/fixtures-hooks),
//! loaded under several names, each scripted by the `FIXTURE_HOOK_*`
//! variable its entry is granted.

use serde_json::{Value, json};
use warden_protocol::ToolState;

use crate::common::*;

mod failures;
mod guard_writes;
mod redact;

/// A config entry loading the fixture hook as `name`, scripted by `var`.
fn fixture_hook(name: &str, var: &str) -> Value {
    json!({"name": name, "path": plugin_wasm("warden_fixture_hooks.wasm"), "grants": {"env": [var]}})
}

/// One turn of calls (id, tool, arguments) per entry of `turns`, then an answer.
fn script(env: &Env, turns: &[&[(&str, &str, Value)]]) {
    let mut t: Vec<Value> = turns
        .iter()
        .map(|calls| {
            let calls: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args}))
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    t.push(json!({"text": "done"}));
    env.cassette(Value::Array(t));
}

fn run(env: &Env, vars: &[(&str, Option<&str>)]) -> (Run, Vec<(String, bool, String)>) {
    let run = env.run_json_with("go", vars);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("panicked at host"), "{}", run.stderr);
    let results = tool_results(env.requests().last().unwrap());
    (run, results)
}

fn result<'a>(results: &'a [(String, bool, String)], id: &str) -> &'a (String, bool, String) {
    results
        .iter()
        .find(|r| r.0 == id)
        .unwrap_or_else(|| panic!("no result for {id}: {results:?}"))
}

/// (stage, subject, decision, outcome) of one call's audit trail, in order.
async fn audit(env: &Env, run: &Run, call: &str) -> Vec<(String, String, String, String)> {
    env.ledger()
        .audit_trail(&run.session())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.call_id.as_deref() == Some(call))
        .map(|a| {
            (
                a.stage,
                a.subject,
                a.decision,
                a.outcome.unwrap_or_default(),
            )
        })
        .collect()
}

fn row(
    stage: &str,
    subject: &str,
    decision: &str,
    outcome: &str,
) -> (String, String, String, String) {
    (
        stage.into(),
        subject.into(),
        decision.into(),
        outcome.into(),
    )
}

async fn state(env: &Env, run: &Run, call: &str) -> ToolState {
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    tool_parts(&msgs)
        .into_iter()
        .find(|(c, _)| c == call)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no part for {call}"))
}

#[tokio::test]
async fn hooks_run_in_config_order_before_and_after_and_the_audit_says_so() {
    let env = Env::new();
    env.config(json!({"plugins": [
        Env::fixtures_plugin(json!({})),
        fixture_hook("first", "FIXTURE_HOOK_1"),
        fixture_hook("second", "FIXTURE_HOOK_2"),
        fixture_hook("third", "FIXTURE_HOOK_3"),
    ]}));
    script(&env, &[&[("c1", "echo", json!({"x": 1}))]]);
    let mark = |label: &str| json!({"label": label, "before": "mark", "after": "mark"}).to_string();
    let (a, b, c) = (mark("first"), mark("second"), mark("third"));
    let (run, results) = run(
        &env,
        &[
            ("FIXTURE_HOOK_1", Some(&a)),
            ("FIXTURE_HOOK_2", Some(&b)),
            ("FIXTURE_HOOK_3", Some(&c)),
        ],
    );

    // The tool saw the arguments as the before hooks left them, in order; the
    // model saw the output as the after hooks left it, in order.
    let (_, is_error, output) = result(&results, "c1");
    assert!(!is_error, "{output}");
    let (echoed, after) = output.split_once('\n').unwrap();
    let trail = json!(["before:first", "before:second", "before:third"]);
    assert_eq!(
        serde_json::from_str::<Value>(echoed).unwrap(),
        json!({"x": 1, "trail": trail})
    );
    assert_eq!(after, "after:first\nafter:second\nafter:third");
    match state(&env, &run, "c1").await {
        ToolState::Completed {
            input, output: o, ..
        } => {
            assert_eq!(
                input,
                json!({"x": 1, "trail": trail}),
                "the ledger keeps the rewritten input"
            );
            assert_eq!(&o, output);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        timeline(&env.ledger(), &run.session(), "c1").await,
        ["pending", "running", "completed"]
    );

    // Each rewrite is followed by a permission check of the new arguments.
    let expected = vec![
        row("permission", "echo", "allowed", "ok"),
        row("before", "hook:first", "ran", "rewrite"),
        row("permission", "echo", "allowed", "ok"),
        row("before", "hook:second", "ran", "rewrite"),
        row("permission", "echo", "allowed", "ok"),
        row("before", "hook:third", "ran", "rewrite"),
        row("permission", "echo", "allowed", "ok"),
        row("tool", "echo", "ran", "ok"),
        row("after", "hook:first", "ran", "rewrite"),
        row("after", "hook:second", "ran", "rewrite"),
        row("after", "hook:third", "ran", "rewrite"),
    ];
    assert_eq!(audit(&env, &run, "c1").await, expected);

    // `session export` carries the same trail.
    let out = env
        .warden(&["session", "export", run.session().as_str()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let export: Value = serde_json::from_slice(&out.stdout).unwrap();
    let exported: Vec<(String, String, String, String)> = export["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["call_id"] == "c1")
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (s("stage"), s("subject"), s("decision"), s("outcome"))
        })
        .collect();
    assert_eq!(exported, expected);
    let statuses: Vec<&str> = export["part_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["part"]["type"] == "tool")
        .map(|e| e["part"]["state"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "running", "completed"]);
}

#[tokio::test]
async fn a_rewrite_is_checked_again_so_it_cannot_reach_a_denied_path() {
    let env = Env::new();
    env.config(json!({
        "permission": {"edit": {"*": "allow", "secret/*": "deny"}},
        "plugins": [
            fixture_hook("to-secret", "FIXTURE_HOOK_A"),
            fixture_hook("to-moved", "FIXTURE_HOOK_B"),
        ]
    }));
    script(
        &env,
        &[&[
            (
                "w1",
                "write",
                json!({"filePath": "open/x.txt", "content": "x"}),
            ),
            (
                "w2",
                "write",
                json!({"filePath": "orig/y.txt", "content": "y"}),
            ),
        ]],
    );
    let a = json!({"before": "rewrite", "calls": ["w1"], "set": {"filePath": "secret/x.txt"}})
        .to_string();
    let b = json!({"before": "rewrite", "calls": ["w2"], "set": {"filePath": "moved/y.txt"}})
        .to_string();
    let run = env.run_json_with(
        "go",
        &[("FIXTURE_HOOK_A", Some(&a)), ("FIXTURE_HOOK_B", Some(&b))],
    );
    assert!(run.status.success(), "{}", run.stderr);
    // A hook's block is an error part the model reads; the loop goes on
    // (only a person's rejection stops it), and the ledger holds it.
    assert_eq!(env.requests().len(), 2);
    match state(&env, &run, "w1").await {
        ToolState::Error { input, error, .. } => {
            // The error part keeps the rewritten arguments, as a completed
            // part does (issue 10): the record says what was refused.
            assert_eq!(input["filePath"], "secret/x.txt");
            assert_eq!(
                error,
                "permission denied: `edit` on `secret/x.txt` is denied by the rule `edit secret/* deny`; the call did not run"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!env.project().join("secret/x.txt").exists());
    assert!(!env.project().join("open/x.txt").exists());
    assert_eq!(
        audit(&env, &run, "w1").await,
        [
            row("permission", "write", "allowed", "ok"),
            row("before", "hook:to-secret", "ran", "rewrite"),
            row("permission", "write", "denied", "refused"),
        ]
    );

    match state(&env, &run, "w2").await {
        ToolState::Completed { input, output, .. } => {
            assert_eq!(input["filePath"], "moved/y.txt");
            assert_eq!(output, "Created moved/y.txt (1 byte, 1 line).");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(env.project().join("moved/y.txt")).unwrap(),
        "y"
    );
    assert!(!env.project().join("orig").exists());
    for id in ["w1", "w2"] {
        let end = if id == "w1" { "error" } else { "completed" };
        assert_eq!(
            timeline(&env.ledger(), &run.session(), id).await,
            ["pending", "running", end]
        );
    }
}

#[tokio::test]
async fn a_blocking_or_asking_hook_stops_the_call_before_the_tool() {
    let env = Env::new();
    env.file("a.txt", "a\n");
    // A denial stops the loop by default; going on lets the model see every result.
    env.config(json!({
        "plugins": [fixture_hook("blocker", "FIXTURE_HOOK_B"), fixture_hook("asker", "FIXTURE_HOOK_C")],
        "experimental": {"continue_loop_on_deny": true}
    }));
    script(
        &env,
        &[&[
            (
                "b1",
                "write",
                json!({"filePath": "a.txt", "content": "blocked"}),
            ),
            (
                "q1",
                "edit",
                json!({"filePath": "a.txt", "oldString": "a", "newString": "asked"}),
            ),
            ("r1", "read", json!({"filePath": "a.txt"})),
        ]],
    );
    let b = json!({"label": "blocker", "before": "block", "calls": ["b1"]}).to_string();
    let c = json!({"label": "asker", "before": "ask", "calls": ["q1"]}).to_string();
    let (run, results) = run(
        &env,
        &[("FIXTURE_HOOK_B", Some(&b)), ("FIXTURE_HOOK_C", Some(&c))],
    );
    assert_eq!(
        result(&results, "b1").2,
        "Error: blocked by hook blocker: fixture blocker blocks write"
    );
    assert_eq!(
        result(&results, "q1").2,
        "Error: hook asker asked for approval (fixture asker wants a person to approve) and it was not given"
    );
    assert_eq!(
        result(&results, "r1").2,
        "     1\ta\n",
        "other calls are untouched"
    );
    assert_eq!(
        std::fs::read_to_string(env.project().join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        audit(&env, &run, "b1").await,
        [
            row("permission", "write", "allowed", "ok"),
            row(
                "before",
                "hook:blocker",
                "ran",
                "block: fixture blocker blocks write"
            ),
        ]
    );
    let q1: Vec<String> = audit(&env, &run, "q1")
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(
        q1,
        ["permission", "before", "before", "ask"],
        "no tool stage"
    );
}
