//! The ledger on PostgreSQL, through the real binary: a session run on a
//! throwaway cluster (pg-harness) and read back by the other commands, a
//! ledger moved from SQLite with `warden ledger migrate`, and locations
//! that are not ledgers refused plainly.

use serde_json::{Value, json};
use warden_core::ledger::location::open_store;
use warden_core::{Bus, Ledger};

use crate::common::*;

fn seed(env: &Env) {
    env.file("notes.txt", "one\ntwo\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "notes.txt"}}]},
        {"text": "It has two lines."}
    ]));
}

async fn ledger_at(location: &str) -> Ledger {
    Ledger::new(open_store(location).await.unwrap(), Bus::new())
}

fn export(env: &Env, location: &str, session: &str) -> Value {
    let out = env
        .warden(&["session", "export", session])
        .env("WARDEN_LEDGER", location)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn a_session_runs_on_postgres_and_every_command_reads_it_there() {
    let db = warden_pg_harness::database();
    let env = Env::new();
    seed(&env);
    let run = env.run_json_with("How many lines?", &[("WARDEN_LEDGER", Some(&db))]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "It has two lines.");
    assert_eq!(
        run.tool_states(),
        [
            ("call_1", "pending"),
            ("call_1", "running"),
            ("call_1", "completed")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // Nothing went to the data dir's SQLite file.
    assert!(!env.data().join("ledger.db").exists());

    // The rows are in PostgreSQL, with the timeline and the audit trail.
    let session = run.session();
    let ledger = ledger_at(&db).await;
    assert_eq!(
        timeline(&ledger, &session, "call_1").await,
        ["pending", "running", "completed"]
    );
    let msgs = ledger.messages(&session).await.unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m.info.role()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    assert!(
        ledger
            .audit_trail(&session)
            .await
            .unwrap()
            .iter()
            .any(|e| e.subject == "read"),
        "the call's decision is in the audit trail"
    );

    // `--ledger` reads the same; so does the config's `ledger` key.
    let list = env
        .warden(&["session", "list", "--format", "json", "--ledger", &db])
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed[0]["id"], session.0);
    env.config(json!({"ledger": db}));
    let traced = env.warden(&["trace", &session.0]).output().unwrap();
    assert!(
        traced.status.success(),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );
    assert!(String::from_utf8_lossy(&traced.stdout).contains("read"));
}

#[tokio::test]
async fn a_ledger_moves_from_sqlite_to_postgres_and_a_second_move_verifies_it() {
    let db = warden_pg_harness::database();
    let env = Env::new();
    seed(&env);
    let run = env.run_json("How many lines?");
    assert!(run.status.success(), "{}", run.stderr);
    let session = run.session();
    let file = env.data().join("ledger.db");
    let from = format!("sqlite:{}", file.display());

    let moved = env
        .warden(&["ledger", "migrate", "--from", &from, "--to", &db])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&moved.stdout);
    assert!(
        moved.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    assert!(said.contains("1 copied, 0 already there"), "{said}");

    // The same session, whole: messages, timeline and audit trail.
    assert_eq!(
        export(&env, &file.display().to_string(), &session.0),
        export(&env, &db, &session.0)
    );

    let again = env
        .warden(&["ledger", "migrate", "--from", &from, "--to", &db])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{said}");
    assert!(
        said.contains("0 copied, 1 already there and the same"),
        "{said}"
    );

    // The moved session goes on at its new home.
    env.cassette(json!([{"text": "Still two."}]));
    let resumed = env
        .warden(&["session", "resume", &session.0, "--format", "json"])
        .env("WARDEN_LEDGER", &db)
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let ledger = ledger_at(&db).await;
    assert_eq!(ledger.messages(&session).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_location_that_is_no_ledger_is_refused_saying_what_is_accepted() {
    let env = Env::new();
    let out = env
        .warden(&["session", "list", "--ledger", "mysql://u@127.0.0.1/x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("is not a ledger location"), "{err}");
    assert!(err.contains("postgres://"), "{err}");

    // A server that is not there: the error names it, without the password.
    let out = env
        .warden(&[
            "session",
            "list",
            "--ledger",
            "postgres://u:hunter2@127.0.0.1:1/x",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("127.0.0.1:1"), "{err}");
    assert!(!err.contains("hunter2"), "the password was shown: {err}");
}

/// The PostgreSQL server stops while a tool call runs: the write that
/// completes the call fails, the run stops at once saying the ledger is
/// unavailable (exit code 1), nothing written before is lost, and once the
/// server is back `session resume` marks the call interrupted in the ledger
/// and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_stopped_mid_step_leaves_no_call_open_after_resume() {
    use std::io::{BufRead as _, BufReader};
    use warden_protocol::ToolState;
    let cluster = warden_pg_harness::private_cluster();
    let db = cluster.database().unwrap();
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 60000}))]}));
    let cassette = env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "sleep", "arguments": {"ms": 1500}}]},
        {"text": "done"}
    ]));
    let mut child = env
        .warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!("scripted:{}", cassette.display()),
            "sleep a while",
        ])
        .env("WARDEN_LEDGER", &db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut session = None;
    for line in lines.by_ref() {
        let event = flat(serde_json::from_str(&line.unwrap()).unwrap());
        if session.is_none() && event["type"] == "session.status" {
            session = Some(event["sessionID"].as_str().unwrap().to_string());
        }
        if event["type"] == "message.part.updated" && event["part"]["state"]["status"] == "running"
        {
            break;
        }
    }
    let session = session.expect("the run reported its session");
    cluster.stop().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{rest:?}");
    assert!(
        stderr.contains("the ledger is unavailable") && stderr.contains("PostgreSQL"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let finished = rest.last().map(|l| flat(serde_json::from_str(l).unwrap()));
    assert!(
        finished
            .as_ref()
            .is_some_and(|f| f["type"] == "run.finished"
                && f["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("the ledger is unavailable"))),
        "{rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.contains("\"type\":\"session.error\"")),
        "the event stream said the step stopped: {rest:?}"
    );

    cluster.restart().unwrap();
    let ledger = ledger_at(&db).await;
    let sid = warden_protocol::SessionId(session.clone());
    let before = tool_parts(&ledger.messages(&sid).await.unwrap());
    assert!(
        matches!(before.as_slice(), [(_, ToolState::Running { .. })]),
        "the call is left as the ledger last had it: {before:?}"
    );
    let resumed = Run::from(
        env.warden(&["session", "resume", &session, "--format", "json"])
            .env("WARDEN_LEDGER", &db)
            .output()
            .unwrap(),
    );
    assert!(resumed.status.success(), "{}", resumed.stderr);
    assert_eq!(resumed.finished()["text"], "done");
    assert!(resumed.events.iter().any(|e| {
        e["type"] == "session.warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("marked interrupted: sleep (call_1)"))
    }));
    let after = tool_parts(&ledger.messages(&sid).await.unwrap());
    assert!(
        matches!(
            after.as_slice(),
            [(
                _,
                ToolState::Error {
                    interrupted: true,
                    ..
                }
            )]
        ),
        "{after:?}"
    );
    assert_eq!(
        timeline(&ledger, &sid, "call_1").await,
        ["pending", "running", "error"]
    );
}
