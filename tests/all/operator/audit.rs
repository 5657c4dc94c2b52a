//! `warden audit` across sessions.

use serde_json::{Value, json};

use crate::common::*;

fn audit(env: &Env, args: &[&str]) -> Vec<(String, String, String)> {
    let mut all = vec!["audit", "--format", "json"];
    all.extend_from_slice(args);
    let out = env.warden(&all).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["stage"].as_str().unwrap().to_string(),
                r["subject"].as_str().unwrap().to_string(),
                r["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row(stage: &str, subject: &str, decision: &str) -> (String, String, String) {
    (stage.into(), subject.into(), decision.into())
}

#[tokio::test]
async fn the_audit_is_queried_across_sessions_by_plugin_decision_and_time() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.file("b.env", "SECRET=1\n");
    env.config(json!({"permission": {"read": {"*.env": "deny"}}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "one"}
    ]));
    let first = env.run_json("read a");
    assert!(first.status.success(), "{}", first.stderr);
    env.cassette(json!([
        {"tool_calls": [
            {"id": "c2", "name": "read", "arguments": {"filePath": "b.env"}},
            {"id": "c3", "name": "glob", "arguments": {"pattern": "*.txt"}}
        ]},
        {"text": "two"}
    ]));
    let second = env.run_json("read b");
    assert!(second.status.success(), "{}", second.stderr);
    assert_ne!(first.session(), second.session());

    // Everything refused, in both sessions: the .env read.
    assert_eq!(
        audit(&env, &["--decision", "denied"]),
        [row("permission", "read", "denied")]
    );
    // What the read plugin did, and what was decided about it, in both sessions.
    assert_eq!(
        audit(&env, &["--plugin", "read"]),
        [
            row("permission", "read", "allowed"),
            row("tool", "read", "ran"),
            row("permission", "read", "denied"),
        ]
    );
    let allowed = audit(&env, &["--decision", "allowed"]);
    assert_eq!(
        allowed,
        [
            row("permission", "read", "allowed"),
            row("permission", "glob", "allowed"),
        ]
    );
    assert_eq!(audit(&env, &["--since", "1h"]).len(), 5);
    assert_eq!(audit(&env, &["--since", "2999-01-01T00:00:00Z"]), []);

    // For people: a table whose columns line up.
    let out = env
        .warden(&["audit", "--decision", "denied"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let col = lines[0].find("DECISION").unwrap();
    assert_eq!(&lines[1][col..col + "denied".len()], "denied", "{text}");

    let bad = env
        .warden(&["audit", "--since", "last week"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is neither an age"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let unknown = env.warden(&["audit", "--plugin", "nope"]).output().unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no plugin named \"nope\""));
}
