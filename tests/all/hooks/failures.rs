//! Hooks that crash or break the contract: the call fails closed, naming the
//! hook, and the host keeps serving; a hook set to fail open lets it through.

use serde_json::json;

use super::*;

#[tokio::test]
async fn a_trapping_hook_fails_the_call_naming_the_hook_and_the_next_call_runs() {
    let env = Env::new();
    env.config(json!({"plugins": [
        Env::fixtures_plugin(json!({})),
        fixture_hook("crashy", "FIXTURE_HOOK_T"),
        fixture_hook("late-crashy", "FIXTURE_HOOK_U"),
        fixture_hook("garbled", "FIXTURE_HOOK_V"),
    ]}));
    script(
        &env,
        &[
            &[("t1", "echo", json!({"n": 1}))],
            &[("t2", "echo", json!({"n": 2}))],
            &[("t3", "echo", json!({"n": 3}))],
            &[("t4", "echo", json!({"n": 4}))],
        ],
    );
    let t = json!({"label": "crashy", "before": "trap", "calls": ["t1"]}).to_string();
    let u = json!({"label": "late-crashy", "after": "trap", "calls": ["t3"]}).to_string();
    let v = json!({"label": "garbled", "before": "not-an-object", "calls": ["t4"]}).to_string();
    let (run, results) = run(
        &env,
        &[
            ("FIXTURE_HOOK_T", Some(&t)),
            ("FIXTURE_HOOK_U", Some(&u)),
            ("FIXTURE_HOOK_V", Some(&v)),
        ],
    );

    let t1 = &result(&results, "t1").2;
    assert!(
        t1.starts_with("Error: before hook crashy failed (plugin crashy ("),
        "{t1}"
    );
    assert!(t1.contains(") crashed: "), "{t1}");
    assert!(
        t1.contains("fixture hook crashy trapped before echo"),
        "{t1}"
    );
    assert!(
        t1.ends_with("; the call was blocked because hooks fail closed"),
        "{t1}"
    );
    // The host kept serving: the next call, through the same hooks, ran.
    assert_eq!(
        result(&results, "t2"),
        &("t2".into(), false, "{\"n\":2}".into())
    );

    // An after hook that crashes withholds the output the tool produced.
    let t3 = &result(&results, "t3").2;
    assert!(
        t3.starts_with("Error: after hook late-crashy failed (plugin late-crashy ("),
        "{t3}"
    );
    assert!(
        t3.contains("fixture hook late-crashy trapped after echo"),
        "{t3}"
    );
    assert!(
        t3.ends_with("; the tool's output was withheld because hooks fail closed"),
        "{t3}"
    );
    assert!(!t3.contains("{\"n\":3}"));

    let t4 = &result(&results, "t4").2;
    assert!(
        t4.starts_with("Error: before hook garbled failed (plugin garbled ("),
        "{t4}"
    );
    assert!(
        t4.contains("returned invalid data: a rewrite must be a JSON object of arguments"),
        "{t4}"
    );

    let stages = async |call: &str| -> Vec<(String, String)> {
        audit(&env, &run, call)
            .await
            .into_iter()
            .map(|r| (r.0, r.1))
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    // What the crashing guest printed (its panic) is kept with the call.
    assert_eq!(
        stages("t1").await,
        [
            pair("permission", "echo"),
            pair("stderr", "plugin:crashy"),
            pair("before", "hook:crashy")
        ],
        "the tool never ran"
    );
    let crashed = audit(&env, &run, "t1").await.pop().unwrap().3;
    assert!(
        crashed.contains("crashed") && crashed.contains("crashy"),
        "{crashed}"
    );
    assert_eq!(
        stages("t3").await,
        [
            pair("permission", "echo"),
            pair("before", "hook:crashy"),
            pair("before", "hook:late-crashy"),
            pair("before", "hook:garbled"),
            pair("tool", "echo"),
            pair("after", "hook:crashy"),
            pair("stderr", "plugin:late-crashy"),
            pair("after", "hook:late-crashy"),
        ]
    );
    for (id, end) in [
        ("t1", "error"),
        ("t2", "completed"),
        ("t3", "error"),
        ("t4", "error"),
    ] {
        assert_eq!(
            timeline(&env.ledger(), &run.session(), id).await,
            ["pending", "running", end],
            "{id}"
        );
    }
    assert_eq!(run.finished()["text"], "done");
}

#[tokio::test]
async fn a_fail_open_hook_that_traps_lets_the_call_through_and_the_audit_keeps_the_crash() {
    let env = Env::new();
    let mut lenient = fixture_hook("lenient", "FIXTURE_HOOK_L");
    lenient["fail_open"] = json!(true);
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({})), lenient]}));
    script(&env, &[&[("c1", "echo", json!({"n": 1}))]]);
    let l = json!({"label": "lenient", "before": "trap", "after": "trap"}).to_string();
    let (run, results) = run(&env, &[("FIXTURE_HOOK_L", Some(&l))]);
    assert_eq!(
        result(&results, "c1"),
        &("c1".into(), false, "{\"n\":1}".into())
    );
    let trail = audit(&env, &run, "c1").await;
    let stages: Vec<&str> = trail.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        stages,
        ["permission", "stderr", "before", "tool", "stderr", "after"]
    );
    for r in [&trail[2], &trail[5]] {
        assert_eq!(r.1, "hook:lenient");
        assert!(
            r.3.contains("crashed") && r.3.contains("fixture hook lenient trapped"),
            "{r:?}"
        );
    }
    // What it printed, its panic, is kept beside each crash.
    for r in [&trail[1], &trail[4]] {
        assert_eq!(r.1, "plugin:lenient");
        assert!(r.3.contains("fixture hook lenient trapped"), "{r:?}");
    }
    assert_eq!(
        timeline(&env.ledger(), &run.session(), "c1").await,
        ["pending", "running", "completed"]
    );
}
