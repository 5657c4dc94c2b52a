//! `warden acp` driven by the Agent Client Protocol's official TypeScript
//! SDK (pinned, installed by the tests; tests/acp/client.mjs), and by raw
//! lines for what no SDK would send: the tool state machine as
//! `tool_call` / `tool_call_update`, asks answered in the editor, a cancel
//! mid-call, a stored session loaded as its history, and bad JSON-RPC
//! answered with errors while the agent keeps serving.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};
use warden_protocol::{SessionId, ToolState};

use crate::common::{Env, tool_parts};

const SDK: &str = "@agentclientprotocol/sdk";
const SDK_VERSION: &str = "2.4.0";

/// The SDK installed, with the client script beside it (node resolves its
/// imports from where the script is).
fn client_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = crate::mcp::deps::npm(SDK, SDK_VERSION);
        std::fs::write(dir.join("client.mjs"), include_str!("../acp/client.mjs")).unwrap();
        dir
    })
}

/// Run the client with `plan` against `warden acp ARGS` (the env's data
/// dir, no user config); what it saw.
fn drive(env: &Env, args: &[&str], answers: Value, steps: Value) -> Value {
    let mut warden_args = vec![
        "acp".to_string(),
        "--dir".into(),
        env.project().display().to_string(),
    ];
    warden_args.extend(args.iter().map(|a| a.to_string()));
    let plan =
        json!({"args": warden_args, "cwd": env.project(), "answers": answers, "steps": steps});
    let out = Command::new("timeout")
        .arg("120")
        .arg("node")
        .arg(client_dir().join("client.mjs"))
        .arg(env!("CARGO_BIN_EXE_warden"))
        .arg(plan.to_string())
        .env("WARDEN_DATA_DIR", env.data())
        .env("XDG_CONFIG_HOME", env.root.path().join("user-config"))
        .env_remove("WARDEN_CONFIG")
        .env_remove("WARDEN_LOG")
        .output()
        .unwrap_or_else(|e| {
            panic!("these tests need node.js 20+ ({e}); install it (apt-get install nodejs npm)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the ACP client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the client printed no JSON ({e}):\n{stdout}"));
    assert_eq!(seen["exit"], 0, "warden acp did not exit cleanly: {seen:#}");
    seen
}

fn scripted(env: &Env) -> String {
    format!(
        "scripted:{}",
        env.root.path().join("cassette.json").display()
    )
}

/// The entries of the log that have `key`, in order.
fn entries<'a>(seen: &'a Value, key: &str) -> Vec<&'a Value> {
    seen["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.get(key))
        .collect()
}

/// Each tool call's statuses in the order they were sent (`pending` when
/// the protocol's default was left out), by call id, in first-seen order.
fn call_story(seen: &Value) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for u in entries(seen, "update") {
        let kind = u["sessionUpdate"].as_str().unwrap();
        if kind != "tool_call" && kind != "tool_call_update" {
            continue;
        }
        let id = u["toolCallId"].as_str().unwrap().to_string();
        let status = u["status"].as_str().unwrap_or("pending").to_string();
        match out.iter_mut().find(|(i, _)| *i == id) {
            Some((_, statuses)) => statuses.push(status),
            None => {
                assert_eq!(
                    kind, "tool_call",
                    "a call is announced before it is updated: {u}"
                );
                out.push((id, vec![status]));
            }
        }
    }
    out
}

/// The text of the agent's message chunks, joined.
fn said(seen: &Value, kind: &str) -> String {
    entries(seen, "update")
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect()
}

fn last_update_of<'a>(seen: &'a Value, call: &str) -> &'a Value {
    entries(seen, "update")
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == call)
        .unwrap()
}

#[tokio::test]
async fn an_editor_prompts_a_read_streams_pending_in_progress_completed_then_loads_it_back() {
    let env = Env::new();
    env.file("hello.txt", "hi from the project\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "hello.txt"}}]},
        {"text": "The file says hi."}
    ]));
    let model = scripted(&env);
    let seen = drive(
        &env,
        &["--model", &model],
        json!([]),
        json!([{"do": "initialize"}, {"do": "new", "cwd": env.project()}, {"do": "prompt", "text": "read hello.txt"}]),
    );
    let init = entries(&seen, "initialize")[0];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentInfo"]["name"], "warden");

    let story = call_story(&seen);
    assert_eq!(story.len(), 1, "{story:?}");
    assert_eq!(story[0].1, ["pending", "in_progress", "completed"]);
    let call = story[0].0.clone();
    let updates = entries(&seen, "update");
    let announced = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(announced["kind"], "read");
    let running = updates
        .iter()
        .find(|u| u["status"] == "in_progress")
        .unwrap();
    let path = env.project().join("hello.txt").display().to_string();
    assert_eq!(running["locations"], json!([{"path": path}]));
    assert_eq!(running["rawInput"], json!({"filePath": "hello.txt"}));
    let done = last_update_of(&seen, &call);
    let output = done["content"][0]["content"]["text"].as_str().unwrap();
    assert!(output.contains("hi from the project"), "{done}");
    // The call ends before the answer streams, and the answer comes last.
    let done_at = updates
        .iter()
        .position(|u| u["status"] == "completed")
        .unwrap();
    let text_at = updates
        .iter()
        .position(|u| u["sessionUpdate"] == "agent_message_chunk")
        .unwrap();
    assert!(done_at < text_at, "{updates:#?}");
    assert_eq!(said(&seen, "agent_message_chunk"), "The file says hi.");
    assert!(
        said(&seen, "user_message_chunk").is_empty(),
        "the prompt is not echoed"
    );
    assert_eq!(entries(&seen, "prompt")[0]["stopReason"], "end_turn");

    // The ledger has it, and the call's trail names the editor first.
    let session = SessionId(seen["sessionId"].as_str().unwrap().to_string());
    let ledger = env.ledger();
    let calls = tool_parts(&ledger.messages(&session).await.unwrap());
    assert!(
        matches!(calls[0].1, ToolState::Completed { .. }),
        "{calls:?}"
    );
    let trail = ledger.audit_trail(&session).await.unwrap();
    let first = trail
        .iter()
        .find(|e| e.call_id.as_deref() == Some("call_1"))
        .unwrap();
    assert_eq!(
        (
            first.stage.as_str(),
            first.subject.as_str(),
            first.decision.as_str()
        ),
        ("caller", "acp:acp-test-editor 9.1", "called")
    );

    // Another editor process loads it: the history comes back as updates,
    // the same call id and final state, then the load's answer.
    let loaded = drive(
        &env,
        &["--model", &model],
        json!([]),
        json!([{"do": "initialize"}, {"do": "load", "sessionId": session.0, "cwd": env.project()}, {"do": "list"}]),
    );
    assert_eq!(said(&loaded, "user_message_chunk"), "read hello.txt");
    assert_eq!(said(&loaded, "agent_message_chunk"), "The file says hi.");
    assert_eq!(
        call_story(&loaded),
        [(call.clone(), vec!["completed".to_string()])]
    );
    let replayed = last_update_of(&loaded, &call);
    assert_eq!(replayed["locations"], json!([{"path": path}]));
    assert_eq!(replayed["content"], done["content"]);
    let order: Vec<&str> = entries(&loaded, "update")
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["user_message_chunk", "tool_call", "agent_message_chunk"]
    );
    let log = loaded["log"].as_array().unwrap();
    let load_at = log.iter().position(|e| e.get("load").is_some()).unwrap();
    let last_update = log.iter().rposition(|e| e.get("update").is_some()).unwrap();
    assert!(
        last_update < load_at,
        "the replay comes before the load's answer"
    );
    let listed = &entries(&loaded, "list")[0]["sessions"];
    assert_eq!(listed[0]["sessionId"], session.0);
    assert_eq!(listed[0]["cwd"], env.project().display().to_string());
}

#[tokio::test]
async fn asks_go_to_the_editor_once_always_reject_and_a_client_that_cannot_ask_is_refused() {
    let env = Env::new();
    env.file("hello.txt", "hi\n");
    env.config(json!({"permission": {"read": "ask"}}));
    let read = |id: &str| json!({"tool_calls": [{"id": id, "name": "read", "arguments": {"filePath": "hello.txt"}}]});
    env.cassette(json!([
        read("c1"), {"text": "read once"},
        read("c2"),
        read("c3"),
        read("c4"), {"text": "read always"},
        read("c5"), {"text": "read again"}
    ]));
    let model = scripted(&env);
    let prompt = |t: &str| json!({"do": "prompt", "text": t});
    let seen = drive(
        &env,
        &["--model", &model],
        json!(["allow_once", "reject_once", "error", "allow_always"]),
        json!([{"do": "initialize"}, {"do": "new", "cwd": env.project()},
               prompt("one"), prompt("two"), prompt("three"), prompt("four"), prompt("five")]),
    );
    let asks = entries(&seen, "ask");
    assert_eq!(
        asks.len(),
        4,
        "the fifth read is allowed by the always: {asks:#?}"
    );
    assert_eq!(
        asks[0]["options"],
        json!([
            ["allow_once", "allow_once"],
            ["allow_always", "allow_always"],
            ["reject_once", "reject_once"],
            ["reject_always", "reject_always"]
        ])
    );
    let story = call_story(&seen);
    assert_eq!(story.len(), 5, "{story:?}");
    // Each ask is about the call the editor was shown.
    for (ask, (call, _)) in asks.iter().zip(&story) {
        assert_eq!(ask["toolCallId"], call.as_str());
    }
    let ends: Vec<&str> = story
        .iter()
        .map(|(_, s)| s.last().unwrap().as_str())
        .collect();
    assert_eq!(
        ends,
        ["completed", "failed", "failed", "completed", "completed"]
    );
    let why = |i: usize| {
        last_update_of(&seen, &story[i].0)["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(why(1).contains("rejected"), "{}", why(1));
    assert!(
        why(2).contains("nobody was attached"),
        "a client that cannot ask gets the unattended answer: {}",
        why(2)
    );
    let stops: Vec<&Value> = entries(&seen, "prompt")
        .iter()
        .map(|p| &p["stopReason"])
        .collect();
    assert_eq!(stops, ["end_turn"; 5]);

    // The always became a literal session rule, and the rejections none.
    let session = SessionId(seen["sessionId"].as_str().unwrap().to_string());
    let rules = env.ledger().session(&session).await.unwrap().permission;
    let rules: Vec<(String, String, String)> = rules
        .iter()
        .map(|r| {
            (
                r.permission.clone(),
                r.pattern.clone(),
                r.action.as_str().to_string(),
            )
        })
        .collect();
    assert_eq!(rules, [("read".into(), "hello.txt".into(), "allow".into())]);
}

#[tokio::test]
async fn reject_always_adds_a_literal_deny_for_the_session() {
    let env = Env::new();
    env.file("hello.txt", "hi\n");
    env.config(json!({"permission": {"read": "ask"}}));
    let read = |id: &str| json!({"tool_calls": [{"id": id, "name": "read", "arguments": {"filePath": "hello.txt"}}]});
    env.cassette(json!([read("c1"), read("c2"), {"text": "denied twice"}]));
    let model = scripted(&env);
    let seen = drive(
        &env,
        &["--model", &model],
        json!(["reject_always"]),
        json!([{"do": "initialize"}, {"do": "new", "cwd": env.project()},
               {"do": "prompt", "text": "one"}, {"do": "prompt", "text": "two"}]),
    );
    assert_eq!(
        entries(&seen, "ask").len(),
        1,
        "the second read is denied without asking"
    );
    let ends: Vec<String> = call_story(&seen)
        .into_iter()
        .map(|(_, s)| s.last().unwrap().clone())
        .collect();
    assert_eq!(ends, ["failed", "failed"]);
    let session = SessionId(seen["sessionId"].as_str().unwrap().to_string());
    let rules = env.ledger().session(&session).await.unwrap().permission;
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (rules[0].pattern.as_str(), rules[0].action.as_str()),
        ("hello.txt", "deny")
    );
}

#[tokio::test]
async fn a_cancel_mid_call_interrupts_the_guest_and_the_prompt_answers_cancelled() {
    let env = Env::new();
    let model = sleeping(&env, 1);
    let seen = drive(
        &env,
        &["--model", &model],
        json!([]),
        json!([{"do": "initialize"}, {"do": "new", "cwd": env.project()},
               {"do": "prompt", "text": "sleep", "cancelOn": "in_progress"}]),
    );
    assert_eq!(entries(&seen, "cancel").len(), 1);
    assert_eq!(entries(&seen, "prompt")[0]["stopReason"], "cancelled");
    let story = call_story(&seen);
    assert_eq!(
        story[0].1,
        ["pending", "in_progress", "failed"],
        "{story:?}"
    );
    assert!(
        said(&seen, "agent_message_chunk").is_empty(),
        "the model was not asked again"
    );
    let session = SessionId(seen["sessionId"].as_str().unwrap().to_string());
    let calls = tool_parts(&env.ledger().messages(&session).await.unwrap());
    match &calls[0].1 {
        ToolState::Error { error, .. } => {
            assert_eq!(error, "the session was aborted before the call finished");
        }
        other => panic!("the call should have ended in error: {other:?}"),
    }
}

#[test]
fn a_retry_and_the_models_reasoning_are_shown_as_thoughts() {
    let env = Env::new();
    env.config(json!({"retry": {"max_attempts": 3, "initial_delay_ms": 10, "factor": 2.0, "max_delay_ms": 50}}));
    env.cassette(json!([
        {"error": {"kind": "rate-limited", "message": "slow down", "retry_after_ms": 10}},
        {"reasoning": "The user greets me.", "text": "Hello."}
    ]));
    let model = scripted(&env);
    let seen = drive(
        &env,
        &["--model", &model],
        json!([]),
        json!([{"do": "initialize"}, {"do": "new", "cwd": env.project()}, {"do": "prompt", "text": "hi"}]),
    );
    let thoughts: Vec<&str> = entries(&seen, "update")
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(thoughts.len(), 2, "{thoughts:?}");
    assert!(
        thoughts[0].contains("slow down") && thoughts[0].contains("attempt 1"),
        "{}",
        thoughts[0]
    );
    assert_eq!(thoughts[1], "The user greets me.");
    assert_eq!(said(&seen, "agent_message_chunk"), "Hello.");
    assert_eq!(entries(&seen, "prompt")[0]["stopReason"], "end_turn");
}

#[test]
fn a_compaction_is_a_thought_or_for_a_client_that_shows_them_its_own_updates() {
    let script = json!([
        {"error": {"kind": "context-overflow", "message": "prompt is too long", "status": 400}},
        {"text": "SUMMARY: nothing yet."},
        {"text": "answered after compaction"}
    ]);
    let kinds = |seen: &Value| -> Vec<(String, String)> {
        entries(seen, "update")
            .iter()
            .map(|u| {
                let kind = u["sessionUpdate"].as_str().unwrap().to_string();
                let what = u["content"]["text"]
                    .as_str()
                    .or(u["status"].as_str())
                    .unwrap_or_default()
                    .to_string();
                (kind, what)
            })
            .collect()
    };
    let pairs = |want: &[(&str, &str)]| -> Vec<(String, String)> {
        want.iter()
            .map(|(k, w)| (k.to_string(), w.to_string()))
            .collect()
    };
    for shows in [false, true] {
        let env = Env::new();
        env.cassette(script.clone());
        let model = scripted(&env);
        let caps = if shows {
            json!({"session": {"compaction": {}}})
        } else {
            json!({})
        };
        let seen = drive(
            &env,
            &["--model", &model],
            json!([]),
            json!([{"do": "initialize", "capabilities": caps}, {"do": "new", "cwd": env.project()},
                   {"do": "prompt", "text": "hello"}]),
        );
        assert_eq!(entries(&seen, "prompt")[0]["stopReason"], "end_turn");
        let want = if shows {
            pairs(&[
                ("compaction_update", "in_progress"),
                ("compaction_summary_chunk", "SUMMARY: nothing yet."),
                ("compaction_update", "completed"),
                ("agent_message_chunk", "answered after compaction"),
            ])
        } else {
            pairs(&[
                (
                    "agent_thought_chunk",
                    "warden is compacting the conversation: earlier messages will be sent as a summary.",
                ),
                ("agent_thought_chunk", "SUMMARY: nothing yet."),
                ("agent_message_chunk", "answered after compaction"),
            ])
        };
        assert_eq!(kinds(&seen), want, "shows compaction: {shows}");
        if shows {
            let ids: Vec<&Value> = entries(&seen, "update")
                .into_iter()
                .filter_map(|u| u.get("compactionId"))
                .collect();
            assert_eq!(ids.len(), 3);
            assert!(
                ids.iter().all(|id| *id == ids[0]),
                "one compaction: {ids:?}"
            );
        }
    }
}

/// `warden acp` on raw lines: each answer by its id.
struct Raw {
    child: std::process::Child,
    lines: BufReader<std::process::ChildStdout>,
}

impl Raw {
    fn start(env: &Env) -> Raw {
        Raw::start_with(env, &[])
    }

    fn start_with(env: &Env, args: &[&str]) -> Raw {
        let project = env.project().display().to_string();
        let mut argv = vec!["acp", "--dir", &project];
        argv.extend_from_slice(args);
        let mut child = env
            .warden(&argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        Raw { child, lines }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&mut self) -> Value {
        let mut line = String::new();
        assert!(
            self.lines.read_line(&mut line).unwrap() > 0,
            "warden acp closed its output"
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Send a line and read the one answer it gets.
    fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        self.next()
    }

    /// Read until a message that `stop` accepts; every message read, it last.
    fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.next();
            let last = stop(&message);
            seen.push(message);
            if last {
                return seen;
            }
        }
    }

    /// Initialize as an editor and open a session in the project; its id.
    fn open(&mut self, env: &Env) -> String {
        let init = self.ask(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
        let new = self.ask(&format!(
            r#"{{"jsonrpc":"2.0","id":"new","method":"session/new","params":{{"cwd":{},"mcpServers":[]}}}}"#,
            json!(env.project())
        ));
        new["result"]["sessionId"].as_str().unwrap().to_string()
    }

    fn exited(&mut self, secs: u64) -> std::process::ExitStatus {
        exited(&mut self.child, secs)
    }
}

/// Wait for warden to exit, at most `secs` (a hang fails the test instead
/// of holding the suite).
fn exited(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    for _ in 0..secs * 20 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("warden acp did not exit within {secs} s");
}

fn prompt_line(id: u32, session: &str, text: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"text","text":{}}}]}}}}"#,
        json!(text)
    )
}

/// An env whose model calls `sleep` for a minute, once per prompt: a prompt
/// that answers in less was cancelled.
fn sleeping(env: &Env, prompts: usize) -> String {
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 120000}))]}));
    let mut script = Vec::new();
    for n in 0..prompts {
        script.push(json!({"tool_calls": [{"id": format!("call_{n}"), "name": "sleep", "arguments": {"ms": 60000}}]}));
        script.push(json!({"text": "slept"}));
    }
    env.cassette(Value::Array(script));
    scripted(env)
}

/// Every tool call of the session ended (none is left pending or running).
async fn calls_all_ended(env: &Env, session: &str) -> Vec<ToolState> {
    let session = SessionId(session.to_string());
    let calls = tool_parts(&env.ledger().messages(&session).await.unwrap());
    let states: Vec<ToolState> = calls.into_iter().map(|(_, state)| state).collect();
    assert!(
        states
            .iter()
            .all(|s| matches!(s, ToolState::Completed { .. } | ToolState::Error { .. })),
        "{states:?}"
    );
    states
}

#[tokio::test]
async fn a_cancel_sent_right_behind_its_prompt_is_heard_and_the_session_is_free_again() {
    let env = Env::new();
    let model = sleeping(&env, 2);
    let mut acp = Raw::start_with(&env, &["--model", &model]);
    let session = acp.open(&env);
    let cancel = format!(
        r#"{{"jsonrpc":"2.0","method":"session/cancel","params":{{"sessionId":"{session}"}}}}"#
    );
    for id in [30, 31] {
        // One write: the cancel is read before the prompt's run has started.
        acp.send(&format!("{}\n{cancel}", prompt_line(id, &session, "sleep")));
        let seen = acp.until(|m| m["id"] == id);
        let answer = seen.last().unwrap();
        assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
        assert!(
            !seen
                .iter()
                .any(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"),
            "the model was not asked again: {seen:?}"
        );
    }
    // Closing the session right behind a prompt cancels it the same way.
    acp.send(&format!(
        "{}\n{}",
        prompt_line(32, &session, "sleep"),
        format_args!(
            r#"{{"jsonrpc":"2.0","id":33,"method":"session/close","params":{{"sessionId":"{session}"}}}}"#
        )
    ));
    let seen = acp.until(|m| m["id"] == 32);
    assert_eq!(
        seen.last().unwrap()["result"]["stopReason"],
        "cancelled",
        "{seen:?}"
    );
    for state in calls_all_ended(&env, &session).await {
        let ToolState::Error { error, .. } = state else {
            panic!("a cancelled call ends in error: {state:?}")
        };
        assert_eq!(error, "the session was aborted before the call finished");
    }
    drop(acp.child.stdin.take());
    assert!(acp.exited(30).success());
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_call_aborts_the_run_and_warden_exits() {
    let env = Env::new();
    let model = sleeping(&env, 1);
    let mut acp = Raw::start_with(&env, &["--model", &model]);
    let session = acp.open(&env);
    acp.send(&prompt_line(40, &session, "sleep"));
    acp.until(|m| m["params"]["update"]["status"] == "in_progress");
    // Opening it again while its prompt runs would lose the prompt's cancel.
    let load = acp.ask(&format!(
        r#"{{"jsonrpc":"2.0","id":41,"method":"session/load","params":{{"sessionId":"{session}","cwd":{},"mcpServers":[]}}}}"#,
        json!(env.project())
    ));
    let (c, m) = error_of(&load);
    assert_eq!((c, m.contains("running a prompt")), (-32602, true), "{m}");
    drop(acp.child.stdin.take());
    assert!(acp.exited(30).success());
    let states = calls_all_ended(&env, &session).await;
    assert!(
        matches!(&states[..], [ToolState::Error { error, .. }] if error == "the session was aborted before the call finished"),
        "{states:?}"
    );
}

#[test]
fn a_client_that_stops_reading_is_let_go_though_its_stdin_stays_open() {
    let env = Env::new();
    let mut acp = Raw::start(&env);
    acp.open(&env);
    // The client closes its end of warden's output but keeps writing.
    let Raw { mut child, lines } = acp;
    drop(lines);
    let stdin = child.stdin.as_mut().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\"}\n")
        .unwrap();
    stdin.flush().unwrap();
    let status = exited(&mut child, 30);
    assert!(status.success(), "{status:?}");
    drop(child.stdin.take());
}

fn error_of(answer: &Value) -> (i64, String) {
    let e = &answer["error"];
    assert!(e.is_object(), "an error was expected: {answer}");
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

#[test]
fn bad_json_rpc_is_answered_with_errors_and_the_agent_keeps_serving() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let mut acp = Raw::start(&env);
    let cases = [
        ("{not json", -32700, "not JSON"),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]",
            -32600,
            "batch",
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"session/new\",\"params\":{\"cwd\":\"/\",\"mcpServers\":[]}}",
            -32600,
            "initialize",
        ),
        (
            "{\"id\":3,\"method\":\"initialize\",\"params\":{}}",
            -32600,
            "jsonrpc",
        ),
    ];
    for (line, code, says) in cases {
        let (c, m) = error_of(&acp.ask(line));
        assert_eq!(c, code, "{line}: {m}");
        assert!(m.contains(says), "{line}: {m}");
    }
    // What the client says of itself is stored without its control characters.
    let init = acp.ask(r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"edi\u0007tor\n","version":"2"}}}"#);
    assert_eq!(init["id"], "i");
    assert_eq!(init["result"]["protocolVersion"], 1);
    let (c, m) = error_of(&acp.ask(r#"{"jsonrpc":"2.0","id":"i2","method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#));
    assert_eq!(
        (c, m.contains("initialized already")),
        (-32600, true),
        "{m}"
    );
    let project = env.project().display().to_string();
    let new = |id: u32, cwd: &str, extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"session/new","params":{{"cwd":{},"mcpServers":[{extra}]}}}}"#,
            json!(cwd)
        )
    };
    let cases = [
        (r#"{"jsonrpc":"2.0","id":10,"method":"no/such"}"#.to_string(), -32601, "no method"),
        (r#"{"jsonrpc":"2.0","id":11,"method":"session/new","params":{"cwd":7}}"#.to_string(), -32602, "session/new"),
        (new(12, "relative/dir", ""), -32602, "absolute"),
        (new(13, &outside.path().display().to_string(), ""), -32602, "outside the directory warden serves"),
        (r#"{"jsonrpc":"2.0","id":14,"method":"session/prompt","params":{"sessionId":"ses_nope","prompt":[{"type":"text","text":"hi"}]}}"#.to_string(), -32002, "not open"),
        (r#"{"jsonrpc":"2.0","id":15,"method":"session/load","params":{"sessionId":"ses_nope","cwd":"/","mcpServers":[]}}"#.to_string(), -32602, "outside"),
    ];
    for (line, code, says) in &cases {
        let (c, m) = error_of(&acp.ask(line));
        assert_eq!(c, *code, "{line}: {m}");
        assert!(m.contains(says), "{line}: {m}");
    }
    // Params may be left out where every field is optional.
    let listed = acp.ask(r#"{"jsonrpc":"2.0","id":16,"method":"session/list"}"#);
    assert_eq!(listed["result"]["sessions"], json!([]), "{listed}");
    // Notifications get no answer, even bad ones; the next request is answered.
    acp.send(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"ses_nope"}}"#);
    acp.send(r#"{"jsonrpc":"2.0","method":"session/cancel","params":7}"#);
    let answer = acp.ask(&new(
        20,
        &project,
        r#"{"name":"theirs","command":"/bin/sh","args":["-c","touch pwned"],"env":[]}"#,
    ));
    assert_eq!(answer["id"], 20, "{answer}");
    let session = answer["result"]["sessionId"].as_str().unwrap().to_string();
    assert!(session.starts_with("ses_"), "{answer}");
    assert_eq!(
        answer["result"]["_meta"]["warden"]["ignoredMcpServers"],
        json!(["theirs"])
    );
    assert!(
        !env.project().join("pwned").exists(),
        "a client's MCP server is never started"
    );
    let listed = acp.ask(r#"{"jsonrpc":"2.0","id":22,"method":"session/list"}"#);
    assert_eq!(
        listed["result"]["sessions"][0]["title"], "acp:editor 2",
        "{listed}"
    );
    let prompt = format!(
        r#"{{"jsonrpc":"2.0","id":21,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"image","data":"AA==","mimeType":"image/png"}}]}}}}"#
    );
    let (c, m) = error_of(&acp.ask(&prompt));
    assert_eq!(c, -32602, "{m}");
    assert!(m.contains("image"), "{m}");
    drop(acp.child.stdin.take());
    let status = acp.child.wait().unwrap();
    assert!(
        status.success(),
        "warden acp ends cleanly when its client hangs up"
    );
}
