//! A runner paused past its lease writes nothing once another process took
//! its session over: every write is fenced by the lease's epoch in the
//! write's own transaction, and the lease is checked before each step and
//! each model request.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use warden_protocol::SessionId;

use crate::common::*;
use crate::server::{Server, client, is_idle, model, new_session, send, subscribe, until};

/// Everything the ledger holds about a session.
#[derive(Debug, PartialEq)]
struct Snapshot {
    messages: Vec<warden_protocol::MessageWithParts>,
    timeline: Vec<warden_core::ledger::PartEvent>,
    audit: Vec<warden_core::ledger::AuditEntry>,
}

impl Snapshot {
    async fn of(env: &Env, session: &SessionId) -> Snapshot {
        let ledger = env.ledger();
        Snapshot {
            messages: ledger.messages(session).await.unwrap(),
            timeline: ledger.part_events(session).await.unwrap(),
            audit: ledger.audit_trail(session).await.unwrap(),
        }
    }

    /// Rows: messages, parts, timeline, audit.
    fn counts(&self) -> (usize, usize, usize, usize) {
        (
            self.messages.len(),
            self.messages.iter().map(|m| m.parts.len()).sum(),
            self.timeline.len(),
            self.audit.len(),
        )
    }
}

pub(crate) fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("`kill` runs (procps or coreutils)");
    assert!(status.success(), "kill {sig} {pid}");
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_its_lease_writes_nothing_after_another_took_its_session_over() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 60000}))]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "sleep", "arguments": {"ms": 2000}}]},
        {"text": "finished"}
    ]));
    // Each server records the model requests it sent in a file of its own.
    let (a_sent, b_sent) = (
        env.root.path().join("a-requests.jsonl"),
        env.root.path().join("b-requests.jsonl"),
    );
    let (a_rec, b_rec) = (a_sent.display().to_string(), b_sent.display().to_string());
    let a = Server::launch(
        &env,
        &["--allow-scripted"],
        &[
            ("WARDEN_LEASE_TTL_MS", "1000"),
            ("WARDEN_SCRIPTED_RECORD", &a_rec),
        ],
    );
    let _b = Server::launch(
        &env,
        &["--allow-scripted"],
        &[
            ("WARDEN_LEASE_TTL_MS", "1000"),
            ("WARDEN_SCRIPTED_RECORD", &b_rec),
        ],
    );
    let c = client();

    for round in 1..=3 {
        let id = new_session(&c, &a, &env).await;
        let session = SessionId(id.clone());
        let mut events = subscribe(a.url(&format!("/event?session={id}"))).await;
        let (status, _) = send(
            &c,
            "POST",
            &a.url(&format!("/session/{id}/prompt_async")),
            Some(json!({"parts": [{"type": "text", "text": "sleep"}], "model": model(&env)})),
        )
        .await;
        assert_eq!(status, 204);
        until(&mut events, |e| e["part"]["state"]["status"] == "running").await;

        // Pause A mid-call, past its lease: B takes the session over and
        // finishes it (the call A was running ends as interrupted).
        signal(a.pid(), "-STOP");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let taken_over = loop {
            // The lease first: once B has let it go, everything B wrote is
            // committed, and the snapshot taken after it is B's last word.
            let released = env
                .ledger()
                .leases()
                .await
                .unwrap()
                .iter()
                .all(|(s, _, _)| s != &session);
            let snap = Snapshot::of(&env, &session).await;
            if released && snap.messages.last().is_some_and(|m| m.text() == "finished") {
                break snap;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: B did not take the session over: {:#?}",
                snap.messages
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let calls = tool_parts(&taken_over.messages);
        assert_eq!(calls.len(), 1, "round {round}: {calls:?}");
        assert!(
            matches!(
                calls[0].1,
                warden_protocol::ToolState::Error {
                    interrupted: true,
                    ..
                }
            ),
            "round {round}: {:?}",
            calls[0].1
        );
        assert_eq!(
            lines(&a_sent),
            round,
            "A asked the model once per round, before the pause"
        );
        assert_eq!(
            lines(&b_sent),
            round,
            "B asked once per round, to finish the session"
        );

        // Resume A: its call returns and its heartbeat finds the lease gone;
        // its run ends (the session goes idle on A) having written nothing.
        signal(a.pid(), "-CONT");
        until(&mut events, is_idle).await;
        let after = Snapshot::of(&env, &session).await;
        assert_eq!(
            after.counts(),
            taken_over.counts(),
            "round {round}: rows (messages, parts, timeline, audit) before and after A resumed"
        );
        assert_eq!(
            after, taken_over,
            "round {round}: A changed the ledger after losing the lease"
        );
        assert_eq!(
            lines(&a_sent),
            round,
            "round {round}: A sent a model request after losing the lease"
        );
        assert_eq!(lines(&b_sent), round);

        // A still serves: its view of the session is idle.
        let (_, view) = send(&c, "GET", &a.url(&format!("/session/{id}")), None).await;
        assert_eq!(view["status"]["type"], "idle", "round {round}");
    }
}
