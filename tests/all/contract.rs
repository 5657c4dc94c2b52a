//! The contract's released versions keep working: components built against
//! `warden:plugin@0.1.0` and committed as built (`tests/guests/v0.1.0/`)
//! load into this host and run, a tool and a hook, through the real binary.

use serde_json::{Value, json};
use warden_protocol::ToolState;

use crate::common::*;

fn guest(file: &str) -> String {
    format!(
        "{}/../../tests/guests/v0.1.0/{file}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[tokio::test]
async fn a_tool_and_a_hook_built_against_0_1_0_still_load_and_run() {
    let env = Env::new();
    env.config(json!({"plugins": [
        {"name": "old_tools", "path": guest("warden_fixtures.wasm"), "tools": {"echo": {"permission": "echo"}}},
        {"name": "old_hook", "path": guest("warden_fixture_hooks.wasm"), "grants": {"env": ["FIXTURE_HOOK_OLD"]}},
    ]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"x": 1}}]},
        {"text": "done"}
    ]));
    let script = json!({"label": "old", "before": "mark", "after": "mark"}).to_string();
    let run = env.run_json_with("go", &[("FIXTURE_HOOK_OLD", Some(&script))]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);

    // The model saw the tool's output with the hook's marks on both sides.
    let results = tool_results(env.requests().last().unwrap());
    let (_, is_error, output) = results
        .iter()
        .find(|r| r.0 == "c1")
        .unwrap_or_else(|| panic!("no result for c1: {results:?}"));
    assert!(!is_error, "{output}");
    let (echoed, after) = output.split_once('\n').unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(echoed).unwrap(),
        json!({"x": 1, "trail": ["before:old"]})
    );
    assert_eq!(after, "after:old");

    let ledger = env.ledger();
    assert_eq!(
        timeline(&ledger, &run.session(), "c1").await,
        ["pending", "running", "completed"]
    );
    let msgs = ledger.messages(&run.session()).await.unwrap();
    match tool_parts(&msgs).into_iter().find(|(c, _)| c == "c1") {
        Some((_, ToolState::Completed { output: o, .. })) => assert_eq!(&o, output),
        other => panic!("{other:?}"),
    }
    let listed = env.warden(&["plugin", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("old_tools") && listed.contains("old_hook"),
        "{listed}"
    );
}
