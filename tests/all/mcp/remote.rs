//! A remote MCP server (streamable HTTP, with headers) as a tool in a
//! warden session: one warden's `/warden/mcp` endpoint used by another warden's
//! session. The calling session's rules allow the tool; the serving warden
//! still checks its own rules and audits the call under the caller.

use serde_json::json;

use super::{audit_rows, row};
use crate::common::*;
use crate::server::Server;

#[tokio::test]
async fn a_remote_mcp_server_is_a_tool_behind_both_wardens_rules() {
    let serving = Env::new();
    serving.file("notes.txt", "notes on the serving side\n");
    serving.file("secret.env", "TOKEN=1\n");
    serving.config(json!({"permission": {"read": {"*.env": "deny"}}}));
    let server = Server::launch(&serving, &[], &[]);
    let base = &server.base;

    let env = Env::new();
    env.config(json!({
        "mcp": {"peer": {"type": "remote", "url": format!("{base}/warden/mcp"), "headers": {"x-team": "infra", "authorization": format!("Bearer {}", crate::server::TEST_TOKEN)}}},
        "permission": {"peer_read": "allow"}
    }));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "call_1", "name": "peer_read", "arguments": {"filePath": "notes.txt"}},
            {"id": "call_2", "name": "peer_read", "arguments": {"filePath": "secret.env"}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json("read the peer's notes");
    assert!(run.status.success(), "{}", run.stderr);
    let requests = env.requests();
    assert!(offered(&requests[0]).contains(&"peer_read".to_string()));
    let mut results = tool_results(requests.last().unwrap());
    results.sort();
    assert_eq!(results[0].0, "call_1");
    assert!(!results[0].1, "{:?}", results[0]);
    assert!(
        results[0].2.contains("notes on the serving side"),
        "{:?}",
        results[0]
    );
    // Allowed here, denied there: the serving warden's rule holds.
    assert_eq!(
        results[1],
        (
            "call_2".into(),
            true,
            "Error: permission denied: `read` on `secret.env` is denied by the rule `read *.env deny`; the call did not run".into()
        )
    );
    let ledger = serving.ledger();
    let sessions = ledger.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert!(
        sessions[0].title.starts_with("mcp: "),
        "{}",
        sessions[0].title
    );
    let caller = format!("mcp:{}", sessions[0].title.trim_start_matches("mcp: "));
    let mut rows = audit_rows(&ledger.audit_trail(&sessions[0].id).await.unwrap());
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut first: Vec<_> = rows.iter().filter(|r| r.0 == "mcp_1").cloned().collect();
    let mut second: Vec<_> = rows.iter().filter(|r| r.0 == "mcp_2").cloned().collect();
    assert_eq!(rows.len(), first.len() + second.len());
    for r in first.iter_mut().chain(second.iter_mut()) {
        r.0 = String::new();
    }
    let allowed = vec![
        row("", "caller", &caller, "called", "read"),
        row("", "permission", "read", "allowed", "ok"),
        row("", "tool", "read", "ran", "ok"),
    ];
    let denied = vec![
        row("", "caller", &caller, "called", "read"),
        row("", "permission", "read", "denied", "refused"),
    ];
    assert!(
        (first == allowed && second == denied) || (first == denied && second == allowed),
        "{rows:?}"
    );
}
