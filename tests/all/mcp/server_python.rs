//! The `/warden/mcp` endpoint of `warden serve` driven by the reference Python SDK
//! (PyPI `mcp`, pinned) over streamable HTTP: the same rules hold as for a
//! session, and the audit names the Python client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{audit_rows, deps, row};
use crate::common::*;

pub(super) struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `warden serve --port 0`, and the address it printed.
pub(super) fn serve(env: &Env) -> (Serve, String) {
    let mut child = env
        .warden(&["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (Serve(child), base)
}

#[test]
fn the_python_sdk_calls_a_warden_plugin_over_streamable_http() {
    let python = deps::python("mcp", "2.3.0");
    let env = Env::new();
    env.file("notes.txt", "hello from warden\n");
    env.file("secret.env", "TOKEN=1\n");
    env.config(serde_json::json!({"permission": {"read": {"*.env": "deny"}}}));
    let (_server, base) = serve(&env);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp/python_client.py"
    );
    let out = Command::new("timeout")
        .arg("120")
        .arg(&python)
        .arg(script)
        .arg(format!("{base}/warden/mcp"))
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
    let sessions = ledger.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].title, "mcp: python-sdk-client 0.3.0");
    let caller = "mcp:python-sdk-client 0.3.0";
    assert_eq!(
        audit_rows(&ledger.audit_trail(&sessions[0].id).unwrap()),
        vec![
            row("mcp_1", "caller", caller, "called", "read"),
            row("mcp_1", "permission", "read", "allowed", "ok"),
            row("mcp_1", "tool", "read", "ran", "ok"),
            row("mcp_2", "caller", caller, "called", "read"),
            row("mcp_2", "permission", "read", "denied", "refused"),
        ]
    );
}
