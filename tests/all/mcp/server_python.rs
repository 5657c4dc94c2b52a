//! The `/warden/mcp` endpoint of `warden serve` driven by the reference Python SDK
//! (PyPI `mcp`, pinned) over streamable HTTP: the same rules hold as for a
//! session, and the audit names the Python client.

use std::process::Command;

use serde_json::Value;

use super::{audit_rows, deps, row};
use crate::common::*;
use crate::server::Server;

#[tokio::test]
async fn the_python_sdk_calls_a_warden_plugin_over_streamable_http() {
    let python = deps::python("mcp", "2.3.0");
    let env = Env::new();
    env.file("notes.txt", "hello from warden\n");
    env.file("secret.env", "TOKEN=1\n");
    env.config(serde_json::json!({"permission": {"read": {"*.env": "deny"}}}));
    let server = Server::launch(&env, &[], &[]);
    let base = &server.base;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp/python_client.py"
    );
    let out = Command::new("timeout")
        .arg("120")
        .arg(&python)
        .arg(script)
        .arg(format!("{base}/warden/mcp"))
        .arg(crate::server::TEST_TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["tools"], serde_json::json!(BUILTIN_TOOLS));
    assert_eq!(seen["allowed"]["isError"], false, "{seen}");
    assert!(
        seen["allowed"]["structuredContent"]["output"]
            .as_str()
            .unwrap()
            .contains("hello from warden"),
        "{seen}"
    );
    assert_eq!(seen["denied"]["isError"], true);
    assert_eq!(
        seen["denied"]["content"][0]["text"],
        "permission denied: `read` on `secret.env` is denied by the rule `read *.env deny`; the call did not run"
    );

    let ledger = env.ledger();
    let sessions = ledger.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].title, "mcp: python-sdk-client 0.3.0");
    let caller = "mcp:python-sdk-client 0.3.0";
    assert_eq!(
        audit_rows(&ledger.audit_trail(&sessions[0].id).await.unwrap()),
        vec![
            row("mcp_1", "caller", caller, "called", "read"),
            row("mcp_1", "permission", "read", "allowed", "ok"),
            row("mcp_1", "tool", "read", "ran", "ok"),
            row("mcp_2", "caller", caller, "called", "read"),
            row("mcp_2", "permission", "read", "denied", "refused"),
        ]
    );
}
