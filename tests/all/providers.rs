//! Real provider adapters end to end: the `warden` binary talks HTTP to a
//! loopback server speaking OpenAI Chat Completions, Anthropic Messages or
//! OpenAI Responses, runs the read tool the model asks for, and sends the
//! result back. The requests the server received show what the model was
//! shown.

use std::process::Command;

use serde_json::{Value, json};
use warden_protocol::MessageInfo;

use crate::common::*;
use crate::mock_provider::*;

/// Variables that would point warden at a real provider or a proxy.
const OUTSIDE: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// `warden ARGS` cut off from any real provider.
pub fn warden(env: &Env, args: &[&str]) -> Command {
    let mut c = env.warden(args);
    for v in OUTSIDE {
        c.env_remove(v);
    }
    c
}

/// `warden run --format json --model MODEL PROMPT` with extra environment.
pub fn run_model(env: &Env, model: &str, prompt: &str, vars: &[(&str, &str)]) -> Run {
    let mut c = warden(env, &["run", "--format", "json", "--model", model, prompt]);
    for (k, v) in vars {
        c.env(k, v);
    }
    Run::from(c.output().unwrap())
}

/// The system prompt the build agent gets in this project.
fn system_prompt(env: &Env) -> String {
    let agents = warden_core::agent::Agents::from_config(&warden_core::Config::default()).unwrap();
    let agent = agents.get("build").unwrap();
    warden_core::session::system::prompt(agent, &env.project().to_string_lossy()).join("\n\n")
}

const NOTES: &str = "remember the milk\n";
const READ_RESULT: &str = "     1\tremember the milk\n";

#[tokio::test]
async fn openai_chat_runs_a_tool_and_sends_its_result_back_paired_with_the_call() {
    let env = Env::new();
    env.file("notes.txt", NOTES);
    let server = MockProvider::start(vec![
        chat_tool_call("call_1", "read", &json!({"filePath": "notes.txt"})),
        chat_text("Your notes say to remember the milk.", 200, 9),
    ]);
    env.config(json!({"provider": {"openai": {
        "base_url": format!("{}/v1", server.url()),
        "api_key_env": "WARDEN_TEST_KEY",
        "models": {"gpt-test": {"context_limit": 100000, "output_limit": 1000,
                                "prices": {"input": 1.0, "output": 2.0}}}
    }}}));
    let run = run_model(
        &env,
        "openai/gpt-test",
        "what do my notes say?",
        &[("WARDEN_TEST_KEY", "sk-test")],
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.tool_states(),
        [
            ("call_1", "pending"),
            ("call_1", "running"),
            ("call_1", "completed")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        run.finished()["text"],
        "Your notes say to remember the milk."
    );

    let reqs = server.received();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/chat/completions")
        );
        assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(r.body["model"], "gpt-test");
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
        assert_eq!(
            r.body["max_tokens"], 1000,
            "a compatible server gets max_tokens"
        );
    }
    let first = &reqs[0].body;
    assert_eq!(
        first["messages"],
        json!([
            {"role": "system", "content": system_prompt(&env)},
            {"role": "user", "content": "what do my notes say?"},
        ])
    );
    let tools = first["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read", "write", "edit", "list", "glob", "grep"]);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "read");
    assert!(
        tools[0]["function"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Read a text file")
    );
    assert_eq!(
        tools[0]["function"]["parameters"]["required"],
        json!(["filePath"])
    );

    // The second request: the call, then its result under the same id.
    let second = &reqs[1].body;
    assert_eq!(
        second["messages"].as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "what do my notes say?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"filePath\":\"notes.txt\"}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": READ_RESULT}),
        ]
    );

    // Tokens and cost of each step, from the stream's usage and the configured prices.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    let steps: Vec<(u64, u64, f64)> = msgs
        .iter()
        .filter_map(|m| match &m.info {
            MessageInfo::Assistant(a) => Some((a.tokens.input, a.tokens.output, a.cost)),
            MessageInfo::User(_) => None,
        })
        .collect();
    assert_eq!(steps, [(50, 10, 70.0 / 1e6), (200, 9, 218.0 / 1e6)]);
}

#[tokio::test]
async fn anthropic_sends_thinking_back_with_its_signature_and_results_as_tool_result_blocks() {
    let env = Env::new();
    env.file("notes.txt", NOTES);
    let server = MockProvider::start(vec![
        anthropic_turn(
            Some(("I should read the notes.", "SIG123")),
            "Let me look.",
            Some(("toolu_1", "read", &json!({"filePath": "notes.txt"}))),
        ),
        anthropic_turn(None, "Remember the milk.", None),
    ]);
    env.config(json!({"provider": {"anthropic": {"base_url": server.url()}}}));
    let run = run_model(
        &env,
        "anthropic/claude-sonnet-4-5",
        "what do my notes say?",
        &[("ANTHROPIC_API_KEY", "sk-ant-test")],
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "Remember the milk.");

    let reqs = server.received();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("x-api-key"), Some("sk-ant-test"));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.body["model"], "claude-sonnet-4-5");
        assert_eq!(r.body["system"], system_prompt(&env));
        assert_eq!(r.body["max_tokens"], 32000, "the Claude 4 family's default");
        assert_eq!(r.body["stream"], true);
    }
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["read", "write", "edit", "list", "glob", "grep"]);
    assert_eq!(tools[0]["input_schema"]["required"], json!(["filePath"]));
    assert_eq!(
        reqs[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "what do my notes say?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should read the notes.", "signature": "SIG123"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"filePath": "notes.txt"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": READ_RESULT},
            ]},
        ])
    );
    // Usage: input and cache reads from message_start, output from message_delta.
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    match &msgs[1].info {
        MessageInfo::Assistant(a) => {
            assert_eq!(
                (a.tokens.input, a.tokens.output, a.tokens.cache.read),
                (120, 40, 30)
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn openai_responses_api_through_a_configured_provider() {
    let env = Env::new();
    env.file("notes.txt", NOTES);
    let call = [
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "read", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{\"filePath\":"}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "\"notes.txt\"}"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "read", "arguments": "{\"filePath\":\"notes.txt\"}"}}),
        json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 30, "output_tokens": 5}}}),
    ];
    let answer = [
        json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress"}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Milk."}),
        json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 60, "output_tokens": 2}}}),
    ];
    let sse = |events: &[Value]| {
        Reply::sse(
            events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                .collect::<String>(),
        )
    };
    let server = MockProvider::start(vec![sse(&call), sse(&answer)]);
    env.config(json!({"provider": {"lab": {
        "api": "openai-responses", "base_url": format!("{}/v1", server.url())
    }}}));
    let run = run_model(&env, "lab/some-model", "notes?", &[]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "Milk.");
    let reqs = server.received();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_eq!(
        reqs[0].header("authorization"),
        None,
        "no key configured, none sent"
    );
    assert_eq!(reqs[0].body["instructions"], system_prompt(&env));
    assert_eq!(
        reqs[1].body["input"],
        json!([
            {"role": "user", "content": "notes?"},
            {"type": "function_call", "call_id": "call_9", "name": "read", "arguments": "{\"filePath\":\"notes.txt\"}"},
            {"type": "function_call_output", "call_id": "call_9", "output": READ_RESULT},
        ])
    );
}

#[test]
fn with_no_config_openai_base_url_points_at_a_compatible_server() {
    let env = Env::new();
    let server = MockProvider::start(vec![chat_text("Hello from a local model.", 5, 5)]);
    let run = run_model(
        &env,
        "openai/qwen3",
        "hi",
        &[("OPENAI_BASE_URL", &format!("{}/v1", server.url()))],
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.finished()["text"], "Hello from a local model.");
    let reqs = server.received();
    assert_eq!(reqs[0].header("authorization"), None);
    assert_eq!(reqs[0].body["model"], "qwen3");
    assert!(
        reqs[0].body.get("max_tokens").is_none(),
        "no limit known, none sent"
    );
}

#[tokio::test]
async fn a_missing_key_is_an_error_naming_the_variable_and_writes_nothing() {
    let env = Env::new();
    let out = warden(&env, &["run", "--model", "openai/gpt-4o", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no API key: set the environment variable OPENAI_API_KEY"),
        "{stderr}"
    );
    let out = warden(
        &env,
        &["run", "--model", "anthropic/claude-sonnet-4-5", "hi"],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    assert!(env.ledger().sessions().await.unwrap().is_empty());
}

#[test]
fn a_bad_provider_config_is_refused_with_its_path() {
    let env = Env::new();
    env.config(json!({"provider": {"local": {"api": "openai-chat"}}}));
    let out = warden(&env, &["run", "--model", "local/m", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("provider.local: set \"base_url\""),
        "{stderr}"
    );
}

#[test]
fn the_documented_provider_config_is_valid() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md"))
        .unwrap();
    let section = doc.split("### Real providers").nth(1).unwrap();
    let block = section
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .unwrap();
    let config = warden_core::Config::parse(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
    assert_eq!(
        config.provider.keys().collect::<Vec<_>>(),
        ["gateway", "lab", "ollama", "openai"]
    );
}
