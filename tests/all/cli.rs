//! The seed scenario end to end, and the commands that read the ledger.

use serde_json::{Value, json};

use crate::common::*;

const PACKAGE: &str = r#"{
  "name": "demo",
  "scripts": {
    "build": "tsc",
    "test": "vitest run"
  }
}
"#;

fn seed(env: &Env) -> Run {
    env.file("package.json", PACKAGE);
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "The scripts are build (tsc) and test (vitest run)."}
    ]));
    env.run_json("Read package.json and tell me which scripts it has.")
}

#[tokio::test]
async fn the_seed_scenario_reads_then_answers_in_two_requests() {
    let env = Env::new();
    let run = seed(&env);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);

    // Live, in order: the tool part's states, then the session back to idle.
    assert_eq!(
        run.tool_states(),
        [
            ("call_1", "pending"),
            ("call_1", "running"),
            ("call_1", "completed")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(run.statuses(), ["busy", "idle"]);
    assert_eq!(
        run.finished()["text"],
        "The scripts are build (tsc) and test (vitest run)."
    );

    // What the model was shown: the read tool, then its result paired with the call.
    let reqs = env.requests();
    assert_eq!(reqs.len(), 2, "two model requests, and the loop ended");
    assert_eq!(offered(&reqs[0]), BUILTIN_TOOLS);
    assert!(tool_results(&reqs[0]).is_empty());
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 1);
    let (call, is_error, output) = &results[0];
    assert_eq!((call.as_str(), *is_error), ("call_1", false));
    assert!(
        output.contains("     4\t    \"build\": \"tsc\","),
        "{output}"
    );
    let assistant = &reqs[1]["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"][0],
        json!({"type": "tool-call", "call_id": "call_1", "name": "read", "input": {"filePath": "package.json"}})
    );

    // The same transitions were recorded in the ledger, with times.
    let ledger = env.ledger();
    let session = run.session();
    assert_eq!(
        timeline(&ledger, &session, "call_1").await,
        ["pending", "running", "completed"]
    );
    let msgs = ledger.messages(&session).await.unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m.info.role()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    let kinds: Vec<&str> = msgs[1].parts.iter().map(|p| p.body.kind()).collect();
    assert_eq!(kinds, ["step-start", "tool", "step-finish"]);
    // The run gave its lease back before the process exited.
    assert_eq!(ledger.leases().await.unwrap(), []);
}

#[test]
fn text_mode_shows_the_transitions_and_the_answer() {
    let env = Env::new();
    env.file("package.json", PACKAGE);
    let cassette = env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "Two scripts: build and test."}
    ]));
    let out = env
        .warden(&[
            "run",
            "--model",
            &format!("scripted:{}", cassette.display()),
            "which scripts?",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "  read  call_1  pending");
    assert_eq!(
        lines[1],
        "  read  call_1  running    {\"filePath\":\"package.json\"}"
    );
    assert!(
        lines[2].starts_with("  read  call_1  completed  "),
        "{}",
        lines[2]
    );
    assert!(lines[2].ends_with("  package.json"), "{}", lines[2]);
    assert_eq!(lines[3], "");
    assert_eq!(lines[4], "Two scripts: build and test.");
}

#[test]
fn the_demo_runs_offline_and_says_where_the_ledger_is() {
    let env = Env::new();
    let out = env.warden(&["demo"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order = [
        "  read  call_1  pending",
        "  read  call_1  running",
        "  read  call_1  completed",
        "`build`: `tsc && vite build`",
        "ledger:",
    ];
    let mut at = 0;
    for needle in order {
        let found = stdout[at..]
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing after byte {at}:\n{stdout}"));
        at += found + needle.len();
    }
    assert!(
        stdout.contains(&env.data().join("ledger.db").display().to_string()),
        "{stdout}"
    );
}

#[test]
fn trace_lists_each_state_with_times_and_the_boundary_decisions() {
    let env = Env::new();
    let run = seed(&env);
    let session = run.session();
    let out = env
        .warden(&["trace", session.as_str(), "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let trace: Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = &trace["calls"][0];
    assert_eq!(call["call_id"], "call_1");
    assert_eq!(call["tool"], "read");
    let statuses: Vec<&str> = call["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "running", "completed"]);
    let t = call["transitions"].as_array().unwrap();
    assert!(t[0]["since_previous_ms"].is_null());
    assert!(t[1]["since_previous_ms"].as_i64().unwrap() >= 0);
    assert!(t[2]["at"].as_i64().unwrap() >= t[0]["at"].as_i64().unwrap());
    let audit: Vec<(String, String)> = call["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["stage"].as_str().unwrap().into(),
                a["decision"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        audit,
        [
            ("permission".to_string(), "allowed".to_string()),
            ("tool".into(), "ran".into())
        ]
    );

    let text = env.warden(&["trace", session.as_str()]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("read  call_1"), "{text}");
    assert!(text.contains("completed"), "{text}");
}

#[test]
fn sessions_can_be_listed_shown_and_exported() {
    let env = Env::new();
    let run = seed(&env);
    let session = run.session();

    let list = env
        .warden(&["session", "list", "--format", "json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], session.as_str());
    assert_eq!(list[0]["directory"], env.project().display().to_string());

    let show = env
        .warden(&["session", "show", session.as_str()])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains(
            "tool read call_1 {\"filePath\":\"package.json\"} -> completed: package.json"
        ),
        "{show}"
    );

    assert!(!show.contains("    | "), "outputs only when asked: {show}");
    // With --outputs, the call's whole output under it: the read tool's
    // numbered lines of package.json.
    let shown = env
        .warden(&["session", "show", session.as_str(), "--outputs"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    let output: Vec<&str> = shown
        .lines()
        .filter_map(|l| l.strip_prefix("    | "))
        .collect();
    assert!(!output.is_empty(), "{shown}");
    for line in PACKAGE.lines() {
        assert!(
            output.iter().any(|o| o.ends_with(line)),
            "{line:?} not in the output shown: {shown}"
        );
    }

    let export = env
        .warden(&["session", "export", session.as_str()])
        .output()
        .unwrap();
    let export: Value = serde_json::from_slice(&export.stdout).unwrap();
    assert_eq!(export["session"]["id"], session.as_str());
    assert_eq!(export["messages"].as_array().unwrap().len(), 3);
    let statuses: Vec<&str> = export["part_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["part"]["type"] == "tool")
        .map(|e| e["part"]["state"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "running", "completed"]);
    assert_eq!(export["audit"].as_array().unwrap().len(), 2);
}

/// Run `warden ARGS` on a pseudo-terminal (util-linux `script`), answer the
/// first permission question with `answer`, and return everything printed.
fn on_a_terminal(env: &Env, args: &str, answer: &str) -> String {
    use std::io::{Read, Write};
    let cmd = format!("{} {args}", env!("CARGO_BIN_EXE_warden"));
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(env.project())
        .env("WARDEN_DATA_DIR", env.data())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script runs the binary on a pseudo-terminal");
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("[r]eject: ") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the question never came: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(format!("{answer}\n").as_bytes())
        .unwrap();
    stdout.read_to_end(&mut seen).unwrap();
    child.wait().unwrap();
    String::from_utf8_lossy(&seen).replace('\r', "")
}

#[test]
fn a_terminal_answers_permission_questions() {
    let env = Env::new();
    env.file("a.txt", "hello\n");
    env.config(json!({"permission": {"read": "ask"}}));
    let cassette = env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "it says hello"}
    ]));
    let args = format!("run --model scripted:{} 'read a.txt'", cassette.display());
    let out = on_a_terminal(&env, &args, "o");
    assert!(
        out.contains("allow read on a.txt? [o]nce / [a]lways / [r]eject: "),
        "{out}"
    );
    assert!(out.contains("permission allowed once"), "{out}");
    assert!(out.contains("read  c1  completed"), "{out}");
    assert!(out.contains("it says hello"), "{out}");

    let env = Env::new();
    env.file("a.txt", "hello\n");
    env.config(json!({"permission": {"read": "ask"}}));
    let cassette = env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "never"}
    ]));
    let args = format!("run --model scripted:{} 'read a.txt'", cassette.display());
    let out = on_a_terminal(&env, &args, "r");
    assert!(out.contains("permission denied"), "{out}");
    assert!(out.contains("the user rejected it"), "{out}");
    assert!(
        !out.contains("never"),
        "the loop stopped at the rejection: {out}"
    );
}
