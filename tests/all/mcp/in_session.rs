//! An MCP server from npm (the reference "everything" server, pinned) used
//! as a tool inside a scripted warden session: offered under its prefixed
//! name, asked about before it runs (nobody to ask → denied, and the server
//! is never called), run once a rule allows it, audited, and started with
//! only the environment the config names.

use serde_json::{Value, json};
use warden_protocol::ToolState;

use super::{audit_rows, deps, row};
use crate::common::*;

const EVERYTHING: (&str, &str) = ("@modelcontextprotocol/server-everything", "2026.8.31");

fn everything_config(permission: Value) -> Value {
    let dir = deps::npm(EVERYTHING.0, EVERYTHING.1);
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    json!({
        "mcp": {"everything": {
            "type": "local",
            "command": ["node", entry.display().to_string(), "stdio"],
            "environment": {"GREETING": "hello from the config"}
        }},
        "permission": permission,
    })
}

#[tokio::test]
async fn an_mcp_tool_is_asked_about_first_and_refused_with_nobody_to_ask() {
    let env = Env::new();
    env.config(everything_config(json!({})));
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "everything_echo", "arguments": {"message": "hi"}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("echo hi");
    // Nobody could approve it: the loop stops there, saying so.
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let requests = env.requests();
    assert_eq!(requests.len(), 1);
    assert!(offered(&requests[0]).contains(&"everything_echo".to_string()));
    let ledger = env.ledger();
    let session = run.session();
    let parts = tool_parts(&ledger.messages(&session).await.unwrap());
    assert_eq!(parts.len(), 1);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("expected an error, got {:?}", parts[0].1)
    };
    assert_eq!(
        error,
        "permission denied: `everything_echo` on `*` needs approval and nobody was attached to give it; allow it in the config to run unattended"
    );
    // The ask was the only thing that happened: no tool row, the server was never called.
    assert_eq!(
        audit_rows(&ledger.audit_trail(&session).await.unwrap()),
        vec![row(
            "call_1",
            "ask",
            "everything_echo",
            "asked:reject",
            "refused"
        )]
    );
}

#[tokio::test]
async fn an_allowed_mcp_tool_runs_with_only_the_named_environment() {
    let env = Env::new();
    env.config(everything_config(
        json!({"everything_echo": "allow", "everything_get-env": "allow"}),
    ));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "call_1", "name": "everything_echo", "arguments": {"message": "hi"}},
            {"id": "call_2", "name": "everything_get-env", "arguments": {}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json_with("echo hi", &[("SECRET_TOKEN", Some("must-not-leak"))]);
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(env.requests().last().unwrap());
    assert_eq!(results[0], ("call_1".into(), false, "Echo: hi".into()));
    assert_eq!(results[1].0, "call_2");
    assert!(!results[1].1, "{}", results[1].2);
    let seen: Value = serde_json::from_str(&results[1].2).unwrap();
    assert_eq!(seen, json!({"GREETING": "hello from the config"}));

    let ledger = env.ledger();
    let session = run.session();
    let mut rows = audit_rows(&ledger.audit_trail(&session).await.unwrap());
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        rows,
        vec![
            row("call_1", "permission", "everything_echo", "allowed", "ok"),
            row("call_1", "tool", "everything_echo", "ran", "ok"),
            row(
                "call_2",
                "permission",
                "everything_get-env",
                "allowed",
                "ok"
            ),
            row("call_2", "tool", "everything_get-env", "ran", "ok"),
        ]
    );
    let trail = ledger.audit_trail(&session).await.unwrap();
    let tool_row = trail.iter().find(|a| a.stage == "tool").unwrap();
    assert!(
        tool_row
            .plugin_hash
            .as_deref()
            .unwrap()
            .starts_with("mcp-server:"),
        "{:?}",
        tool_row.plugin_hash
    );
}

#[test]
fn plugin_list_says_an_mcp_server_is_not_sandboxed() {
    let env = Env::new();
    env.config(everything_config(json!({})));
    let out = env.warden(&["plugin", "list"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("mcp:everything"))
        .unwrap_or_else(|| panic!("no MCP line in:\n{text}"));
    assert!(
        line.starts_with("mcp:everything (MCP server)  local command `node "),
        "{line}"
    );
    assert!(line.contains("env [GREETING]"), "{line}");
    assert!(
        line.contains("NOT sandboxed by warden: it runs with your user's rights, outside every grant; its tools everything_* ask before each call unless a rule allows them"),
        "{line}"
    );
}
