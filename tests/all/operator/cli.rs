//! The command line's manners: the session id, prompts from a file or
//! standard input, no spinner down a pipe, config errors with their place,
//! a help that lists every command.

use std::io::Write;
use std::process::Stdio;

use serde_json::json;

use crate::common::*;

fn cassette(env: &Env) -> String {
    env.cassette(json!([{"text": "hello"}]))
        .display()
        .to_string()
}

#[tokio::test]
async fn run_prints_the_session_id_and_pipes_only_the_answer() {
    let env = Env::new();
    let model = format!("scripted:{}", cassette(&env));
    let out = env
        .warden(&["run", "--model", &model, "hi"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stdout, "hello\n",
        "the answer alone, no spinner, down a pipe"
    );
    let sessions = env.ledger().sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        stderr,
        format!(
            "session {0}  (warden trace {0} shows where its time went)\n",
            sessions[0].id
        )
    );
}

#[test]
fn the_prompt_comes_from_a_file_or_standard_input() {
    let env = Env::new();
    let model = format!("scripted:{}", cassette(&env));
    // Larger than one argument may be (128 KiB).
    let big = "x".repeat(200 * 1024);
    let file = env.file("prompt.md", &big);
    let out = env
        .warden(&[
            "run",
            "--model",
            &model,
            "--file",
            &file.display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = env.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["messages"][0]["role"], "user");
    assert!(
        seen[0]["messages"][0]
            .to_string()
            .contains(&format!("\"{big}\"")),
        "the whole file"
    );

    let mut child = env
        .warden(&["run", "--model", &model])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from standard input")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = env.requests();
    assert_eq!(seen.len(), 2);
    assert!(
        seen[1]["messages"][0]
            .to_string()
            .contains("\"from standard input\""),
        "{}",
        seen[1]["messages"][0]
    );

    let both = env
        .warden(&["run", "--model", &model, "--file", "x", "hi"])
        .output()
        .unwrap();
    assert!(
        !both.status.success(),
        "a prompt and a file are one too many"
    );
}

#[test]
fn a_config_type_error_names_its_place() {
    let env = Env::new();
    env.config(
        json!({"plugins": [{"name": "x", "path": "x.wasm", "grants": {"memory_mb": "big"}}]}),
    );
    let out = env.warden(&["plugin", "list"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid config: plugins[0].grants.memory_mb: invalid type: string \"big\", expected u64"),
        "{stderr}"
    );
}

#[test]
fn the_help_lists_every_command() {
    let env = Env::new();
    let out = env.warden(&["--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let listed: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        [
            "run", "demo", "session", "trace", "audit", "serve", "mcp", "acp", "ledger", "trust",
            "plugin", "help"
        ]
    );
    assert!(!help.contains("run, demo, session, trace."), "{help}");
    let trace = env.warden(&["trace", "--help"]).output().unwrap();
    let trace = String::from_utf8(trace.stdout).unwrap();
    assert!(trace.contains("One JSON document"), "{trace}");
    assert!(trace.contains("svg"), "{trace}");
}
