//! The built-in file tools (`write`, `edit`, `list`, `glob`, `grep`)
//! through the whole loop: the real binary, a scripted model, and the
//! checks made on what the model was shown, on the ledger and on the files
//! left on disk. One module per tool.

use serde_json::{Value, json};
use warden_protocol::ToolState;

use crate::common::*;

mod edit;
mod glob;
mod grep;
mod list;
mod write;

/// One tool call: (call id, tool, arguments).
type Call<'a> = (&'a str, &'a str, Value);

/// What the model was shown for each call: (call id, is error, output).
type Results = Vec<(String, bool, String)>;

/// Run `turns` of tool calls (the calls of one turn may run concurrently),
/// then a final answer. Returns the run and the results the model was shown
/// in its last request.
fn run_turns(env: &Env, turns: Vec<Vec<Call>>) -> (Run, Results) {
    let mut script: Vec<Value> = turns
        .into_iter()
        .map(|calls| {
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args}))
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    script.push(json!({"text": "ok"}));
    env.cassette(Value::Array(script));
    let run = env.run_json("work on the files");
    assert!(run.status.success(), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let reqs = env.requests();
    let results = tool_results(reqs.last().unwrap());
    (run, results)
}

/// One turn of calls.
fn run_calls(env: &Env, calls: Vec<Call>) -> (Run, Results) {
    run_turns(env, vec![calls])
}

/// The output of a call that succeeded.
fn ok<'a>(results: &'a Results, id: &str) -> &'a str {
    let r = find(results, id);
    assert!(!r.1, "{id} should have succeeded: {}", r.2);
    &r.2
}

/// The error the model was shown for a call that failed.
fn err<'a>(results: &'a Results, id: &str) -> &'a str {
    let r = find(results, id);
    assert!(r.1, "{id} should have failed: {}", r.2);
    &r.2
}

fn find<'a>(results: &'a Results, id: &str) -> &'a (String, bool, String) {
    results
        .iter()
        .find(|r| r.0 == id)
        .unwrap_or_else(|| panic!("no result for {id} in {results:?}"))
}

/// The title and metadata the ledger holds for a completed call.
async fn completed(env: &Env, run: &Run, call: &str) -> (String, Value) {
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    match tool_parts(&msgs).into_iter().find(|(c, _)| c == call) {
        Some((
            _,
            ToolState::Completed {
                title, metadata, ..
            },
        )) => (title, metadata),
        other => panic!("{call} is not completed: {other:?}"),
    }
}

/// Every call went pending → running → its expected end, in the ledger.
async fn assert_ends(env: &Env, run: &Run, results: &Results) {
    let ledger = env.ledger();
    for (id, is_error, _) in results {
        let end = if *is_error { "error" } else { "completed" };
        assert_eq!(
            timeline(&ledger, &run.session(), id).await,
            ["pending", "running", end],
            "{id}"
        );
    }
}

/// A file outside the project (beside it), and symlinks in the project
/// leading to it (`escape.txt`) and to its folder (`up/`).
fn outside_secret(env: &Env) -> std::path::PathBuf {
    let secret = env.root.path().join("secret.txt");
    std::fs::write(&secret, "top secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, env.project().join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(env.root.path(), env.project().join("up")).unwrap();
    secret
}
