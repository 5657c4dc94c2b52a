//! The loop's mechanics against a plain-Rust tool host and a scripted model
//! (the integration tests repeat the important ones through the real binary
//! and real wasm guests).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use warden_protocol::llm::AssistantContent;
use warden_protocol::{
    ChatMessage, Event, LlmEvent, LlmRequest, MessageInfo, ModelRef, PartBody, ToolState,
};

use super::*;
use crate::ledger::PromptState;
use crate::tool::{
    AfterDecision, BeforeDecision, CallContext, CallObserver, GuestError, GuestRef, HookCall,
    HookDef, HookHost, PatternSource, Registry, ToolDef, ToolOutput, ToolSource,
};
use warden_llm::scripted::ScriptedProvider;
use warden_llm::{ModelInfo, Prices, ResolvedModel};

/// `echo` returns its arguments; `fail` always fails. Hooks are given by
/// the test: `rewriter` rewrites the arguments to `{"path": "rewritten"}`,
/// any other allows.
#[derive(Default)]
struct RustTools {
    ran: Mutex<Vec<String>>,
    hooks: Vec<HookDef>,
}

#[async_trait::async_trait]
impl ToolSource for RustTools {
    fn tools(&self) -> Vec<ToolDef> {
        ["echo", "fail"]
            .iter()
            .map(|id| ToolDef {
                id: id.to_string(),
                description: format!("the {id} tool"),
                parameters: json!({"type": "object"}),
                permission: id.to_string(),
                pattern: PatternSource::Arg("path".into()),
                guest: GuestRef {
                    plugin: "rust".into(),
                    hash: "0".repeat(64),
                },
                mapped: true,
                server: None,
            })
            .collect()
    }
    async fn execute(
        &self,
        tool: &ToolDef,
        _ctx: &CallContext,
        arguments: &str,
        _o: Arc<dyn CallObserver>,
    ) -> std::result::Result<ToolOutput, GuestError> {
        self.ran
            .lock()
            .unwrap()
            .push(format!("{} {arguments}", tool.id));
        match tool.id.as_str() {
            "echo" => Ok(ToolOutput {
                output: format!("echo {arguments}"),
                title: "echo".into(),
                metadata: json!({}),
            }),
            _ => Err(GuestError::Failed("it failed".into())),
        }
    }
}

#[async_trait::async_trait]
impl HookHost for RustTools {
    fn hooks(&self) -> Vec<HookDef> {
        self.hooks.clone()
    }
    async fn before(&self, call: &HookCall<'_>) -> std::result::Result<BeforeDecision, GuestError> {
        let (hook, tool) = (call.hook, call.tool);
        self.ran
            .lock()
            .unwrap()
            .push(format!("hook {} {tool}", hook.guest.plugin));
        Ok(match hook.guest.plugin.as_str() {
            "rewriter" => BeforeDecision::Rewrite(json!({"path": "rewritten"}).to_string()),
            _ => BeforeDecision::Allow,
        })
    }
    async fn after(
        &self,
        _: &HookCall<'_>,
        _: &ToolOutput,
    ) -> std::result::Result<AfterDecision, GuestError> {
        Ok(AfterDecision::Keep)
    }
}

struct OneModel(Arc<dyn warden_llm::Provider>, Option<u64>);

impl ModelResolver for OneModel {
    fn resolve(&self, model: &ModelRef) -> warden_llm::Result<ResolvedModel> {
        Ok(ResolvedModel {
            info: ModelInfo {
                reference: model.clone(),
                context_limit: self.1,
                output_limit: None,
                prices: Prices::default(),
            },
            provider: self.0.clone(),
        })
    }
}

struct Setup {
    core: Core,
    provider: Arc<ScriptedProvider>,
    tools: Arc<RustTools>,
    session: SessionInfo,
    _dir: tempfile::TempDir,
}

async fn setup(cassette: Value, config: &str) -> Setup {
    setup_with(cassette, config, RustTools::default(), None).await
}

/// [`setup`] with these tools, and optionally another model than the cassette.
async fn setup_with(
    cassette: Value,
    config: &str,
    tools: RustTools,
    model: Option<Arc<dyn warden_llm::Provider>>,
) -> Setup {
    setup_in(
        Ledger::in_memory(Bus::new()).unwrap(),
        cassette,
        config,
        tools,
        model,
    )
    .await
}

/// [`setup_with`] on this ledger.
async fn setup_in(
    ledger: Ledger,
    cassette: Value,
    config: &str,
    tools: RustTools,
    model: Option<Arc<dyn warden_llm::Provider>>,
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cassette.json");
    std::fs::write(&path, cassette.to_string()).unwrap();
    let provider = Arc::new(ScriptedProvider::load(&path).unwrap().keeping_requests());
    let tools = Arc::new(tools);
    let core = Core::new(
        ledger,
        Registry::of(tools.clone()),
        Arc::new(OneModel(
            model.unwrap_or_else(|| provider.clone() as Arc<dyn warden_llm::Provider>),
            cassette["context_limit"].as_u64(),
        )),
        Config::parse(config).unwrap(),
        CoreOptions::default(),
    )
    .unwrap();
    let session = core.create_session(dir.path(), "test").await.unwrap();
    Setup {
        core,
        provider,
        tools,
        session,
        _dir: dir,
    }
}

fn prompt(s: &Setup, text: &str) -> PromptInput {
    PromptInput {
        session_id: s.session.id.clone(),
        text: text.into(),
        model: Some(ModelRef {
            provider: "scripted".into(),
            model: "cassette".into(),
        }),
        ..PromptInput::default()
    }
}

/// (tool, status, error) of every recorded tool part change, in order.
async fn tool_timeline(s: &Setup) -> Vec<(String, String)> {
    s.core
        .ledger()
        .part_events(&s.session.id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.part.body {
            PartBody::Tool { call_id, state, .. } => Some((call_id, state.status().to_string())),
            _ => None,
        })
        .collect()
}

/// The session's audit trail, in order.
async fn audit(s: &Setup) -> Vec<crate::ledger::AuditEntry> {
    s.core.ledger().audit_trail(&s.session.id).await.unwrap()
}

async fn tool_states(s: &Setup) -> Vec<ToolState> {
    s.core
        .ledger()
        .messages(&s.session.id)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|m| m.parts)
        .filter_map(|p| p.tool_state().cloned())
        .collect()
}

fn tool_results(req: &LlmRequest) -> Vec<(String, bool, String)> {
    req.messages
        .iter()
        .filter_map(|m| match &**m {
            ChatMessage::Tool { content } => Some(content),
            _ => None,
        })
        .flatten()
        .map(|r| (r.call_id.clone(), r.is_error, r.output.clone()))
        .collect()
}

fn call(id: &str, tool: &str, args: Value) -> Value {
    json!({"id": id, "name": tool, "arguments": args})
}

#[tokio::test]
async fn a_tool_call_then_an_answer_takes_two_requests() {
    let s = setup(
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({"path": "a"}))]},
            {"text": "done"}
        ]}),
        "{}",
    )
    .await;
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(answer.text(), "done");
    let reqs = s.provider.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0]
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["echo", "fail"]
    );
    assert_eq!(
        tool_results(&reqs[1]),
        vec![("c1".into(), false, r#"echo {"path":"a"}"#.into())]
    );
    assert_eq!(
        tool_timeline(&s).await,
        vec![
            ("c1".into(), "pending".into()),
            ("c1".into(), "running".into()),
            ("c1".into(), "completed".into())
        ]
    );
    // The second request followed one model turn.
    let turns = reqs[1]
        .messages
        .iter()
        .filter(|m| matches!(&***m, warden_protocol::ChatMessage::Assistant { .. }))
        .count();
    assert_eq!(turns, 1);
}

/// The write path of a prompt, transaction by transaction. A step of one
/// call is three: its header; the call's pending and running states with
/// the step's start; the call's result with the step's end (its header,
/// step-finish and phase marks). The answer's step writes its text as it
/// begins (with the step's start) and as it ends.
#[tokio::test]
async fn a_step_of_one_call_is_three_transactions() {
    use crate::ledger::counted::Counted;
    let store = Arc::new(crate::ledger::SqliteStore::in_memory().unwrap());
    let (counted, calls) = Counted::new(store);
    let s = setup_in(
        Ledger::new(counted, Bus::new()),
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({"path": "a"}))]},
            {"text": "done"}
        ]}),
        "{}",
        RustTools::default(),
        None,
    )
    .await;
    let mut events = s.core.bus().subscribe();
    let from = calls.lock().unwrap().len();
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(answer.text(), "done");
    let writes: Vec<&str> = calls.lock().unwrap()[from..]
        .iter()
        .filter(|c| c.wrote)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        writes,
        [
            // The prompt, queued and taken.
            "enqueue_prompt",
            "acquire_lease",
            "take_prompt",
            "put_message", // its header
            "put_part",    // its text
            "touch_session",
            // The step with the call.
            "put_message", // its header
            "write_step",  // its start, the call pending and running
            "write_step",  // the call completed, the step's end
            // The answer.
            "put_message", // its header
            "write_step",  // its start and its text begun
            "put_part",    // its text ended
            "write_step",  // its end
            "settle_prompt",
            "release_lease",
        ]
    );
    assert_eq!(
        tool_timeline(&s).await,
        [
            ("c1".to_string(), "pending".to_string()),
            ("c1".into(), "running".into()),
            ("c1".into(), "completed".into())
        ]
    );
    // A call held back while its arguments streamed keeps the time it
    // began: the timeline's times never go back.
    let ats: Vec<i64> = s
        .core
        .ledger()
        .part_events(&s.session.id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at)
        .collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]), "{ats:?}");
    // Each state was shown once, in order, and the step began first.
    let mut shown = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::PartUpdated { part, .. } = &*event {
            shown.push(match &part.body {
                PartBody::Tool { state, .. } => state.status().to_string(),
                PartBody::StepStart {} => "step-start".into(),
                PartBody::StepFinish { .. } => "step-finish".into(),
                PartBody::Text { .. } => "text".into(),
                _ => "other".into(),
            });
        }
    }
    // (The prompt's text first.)
    assert_eq!(
        shown[..6],
        [
            "text",
            "step-start",
            "pending",
            "running",
            "completed",
            "step-finish"
        ]
    );
}

#[tokio::test]
async fn stop_with_an_open_tool_call_does_not_end_the_loop() {
    let s = setup(
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({}))], "finish_reason": "stop"},
            {"text": "done"}
        ]}),
        "{}",
    )
    .await;
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    let reqs = s.provider.requests();
    assert_eq!(reqs.len(), 2, "the tool result had to be sent back");
    assert_eq!(tool_results(&reqs[1]).len(), 1);
}

#[tokio::test]
async fn three_identical_calls_ask_doom_loop_and_nobody_attached_denies() {
    let same = call("x", "echo", json!({"path": "a"}));
    let mut turns = Vec::new();
    for i in 0..3 {
        let mut c = same.clone();
        c["id"] = json!(format!("c{i}"));
        turns.push(json!({"tool_calls": [c]}));
    }
    turns.push(json!({"text": "never reached"}));
    let s = setup(json!({ "turns": turns }), "{}").await;
    let mut events = s.core.bus().subscribe();
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(
        s.provider.requests().len(),
        3,
        "the loop stopped after the denial"
    );
    assert_eq!(
        s.tools.ran.lock().unwrap().len(),
        2,
        "the third call never ran"
    );
    let states = tool_states(&s).await;
    assert_eq!(states.len(), 3);
    match &states[2] {
        ToolState::Error {
            error,
            interrupted: false,
            ..
        } => assert!(error.contains("doom_loop"), "{error}"),
        other => panic!("{other:?}"),
    }
    let mut asked = None;
    while let Ok(e) = events.try_recv() {
        if let Event::PermissionAsked { request } = &*e {
            asked = Some(request.clone());
        }
    }
    let asked = asked.expect("a doom_loop question was published");
    assert_eq!(asked.permission, "doom_loop");
    assert_eq!(asked.patterns, vec!["echo".to_string()]);
}

#[tokio::test]
async fn a_doom_loop_a_rule_denies_goes_on_until_the_model_is_plainly_stuck() {
    // A rule's deny of doom_loop is an error the model reads (it may try
    // something else), but a model that repeats the call anyway is stuck:
    // the loop stops after six in a row, saying so, not never.
    let same = call("x", "echo", json!({"path": "a"}));
    let mut turns = Vec::new();
    for i in 0..8 {
        let mut c = same.clone();
        c["id"] = json!(format!("c{i}"));
        turns.push(json!({"tool_calls": [c]}));
    }
    turns.push(json!({"text": "never reached"}));
    let s = setup(
        json!({ "turns": turns }),
        r#"{"permission": {"doom_loop": "deny"}}"#,
    )
    .await;
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(s.provider.requests().len(), 6, "stopped at the sixth");
    assert_eq!(
        s.tools.ran.lock().unwrap().len(),
        2,
        "only the first two ran"
    );
    let states = tool_states(&s).await;
    assert_eq!(states.len(), 6);
    for st in &states[2..] {
        assert!(
            matches!(st, ToolState::Error { error, .. } if error.contains("doom_loop")),
            "{st:?}"
        );
    }
    match &answer.info {
        MessageInfo::Assistant(a) => assert!(
            matches!(&a.error, Some(warden_protocol::MessageError::Stopped { message })
                if message.contains("called `echo` 6 times in a row")),
            "{:?}",
            a.error
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_last_step_offers_no_tools_and_says_so() {
    let s = setup(
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({}))]},
            {"text": "out of steps"}
        ]}),
        r#"{"agent": {"build": {"steps": 2}}}"#,
    )
    .await;
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    let reqs = s.provider.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!reqs[0].tools.is_empty());
    assert!(reqs[1].tools.is_empty());
    match reqs[1].messages.last().map(|m| &**m) {
        Some(ChatMessage::Assistant { content }) => {
            assert_eq!(
                content,
                &vec![AssistantContent::Text {
                    text: system::MAX_STEPS.into()
                }]
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_calls_become_error_parts_and_the_model_is_told() {
    let s = setup(
        json!({"turns": [
            {"tool_calls": [
                {"id": "c1", "name": "nope", "arguments": {}},
                {"id": "c2", "name": "echo", "arguments_raw": "{\"path\": "},
                {"id": "c3", "name": "echo", "arguments": [1, 2]},
                {"id": "c4", "name": "fail", "arguments": {}}
            ]},
            {"text": "ok"}
        ]}),
        "{}",
    )
    .await;
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    let reqs = s.provider.requests();
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|(_, is_error, _)| *is_error));
    assert!(
        results[0]
            .2
            .contains("unknown tool `nope`; the tools available are: echo, fail"),
        "{}",
        results[0].2
    );
    assert!(results[1].2.contains("not valid JSON"), "{}", results[1].2);
    assert!(
        results[2]
            .2
            .contains("must be a JSON object, but the model sent an array"),
        "{}",
        results[2].2
    );
    assert_eq!(results[3].2, "Error: it failed");
    assert!(
        s.tools
            .ran
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.starts_with("fail"))
    );
    let timeline = tool_timeline(&s).await;
    for c in ["c1", "c2", "c3", "c4"] {
        let states: Vec<&str> = timeline
            .iter()
            .filter(|(id, _)| id == c)
            .map(|(_, st)| st.as_str())
            .collect();
        assert_eq!(states, ["pending", "running", "error"], "{c}");
    }
}

#[tokio::test]
async fn a_denied_call_never_reaches_the_host() {
    let s = setup(
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({"path": "secret.env"}))]},
            {"text": "told it was denied"}
        ]}),
        r#"{"permission": {"echo": {"*.env": "deny"}}}"#,
    )
    .await;
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert!(s.tools.ran.lock().unwrap().is_empty());
    // A rule's denial is an error the model reads: the loop goes on.
    assert_eq!(s.provider.requests().len(), 2);
    assert_eq!(answer.text(), "told it was denied");
    match &tool_states(&s).await[0] {
        ToolState::Error { error, .. } => assert!(
            error.contains("denied by the rule `echo *.env deny`"),
            "{error}"
        ),
        other => panic!("{other:?}"),
    }
    let audit = s.core.ledger().audit_trail(&s.session.id).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].stage.as_str(), audit[0].decision.as_str()),
        ("permission", "denied")
    );
}

#[tokio::test]
async fn provider_errors_end_on_the_message_not_in_a_panic() {
    let s = setup(
        json!({"turns": [{"error": {"kind": "bad-request", "message": "no such model", "status": 400}}]}),
        "{}",
    ).await;
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    match &answer.info {
        MessageInfo::Assistant(a) => assert_eq!(
            a.error,
            Some(warden_protocol::MessageError::Provider {
                message: "no such model".into(),
                status: Some(400)
            })
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.core.status(&s.session.id), SessionStatus::Idle);
}

#[tokio::test]
async fn retryable_errors_are_retried_with_status_events() {
    let s = setup(
        json!({"turns": [
            {"error": {"kind": "rate-limited", "message": "slow down", "status": 429, "retry_after_ms": 10}},
            {"text": "ok"}
        ]}),
        "{}",
    ).await;
    let mut events = s.core.bus().subscribe();
    let answer = s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(answer.text(), "ok");
    let mut statuses = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let Event::SessionStatus { status, .. } = &*e {
            statuses.push(status.clone());
        }
    }
    assert_eq!(statuses.len(), 4, "{statuses:?}");
    assert_eq!(statuses[0], SessionStatus::Busy);
    assert!(
        matches!(&statuses[1], SessionStatus::Retry { attempt: 1, message, .. } if message.contains("slow down"))
    );
    assert_eq!(statuses[2], SessionStatus::Busy);
    assert_eq!(statuses[3], SessionStatus::Idle);
}

fn texts(m: &ChatMessage) -> String {
    serde_json::to_string(m).unwrap()
}

#[tokio::test]
async fn a_step_over_the_context_limit_is_summarised_and_the_task_goes_on() {
    let s = setup(
        json!({"context_limit": 1000, "turns": [
            {"tool_calls": [call("c1", "echo", json!({"path": "a"}))], "usage": {"input": 900, "output": 200}},
            {"text": "SUMMARY: the user asked to echo a; it echoed.", "usage": {"input": 950, "output": 30}},
            {"text": "done", "usage": {"input": 120, "output": 5}}
        ]}),
        "{}",
    ).await;
    let answer = s.core.prompt(prompt(&s, "echo a")).await.unwrap();
    assert_eq!(answer.text(), "done");
    let reqs = s.provider.requests();
    assert_eq!(reqs.len(), 3);

    // The summary request: the whole history, no tools, the summary prompts.
    assert_eq!(reqs[1].system, vec![compaction::SUMMARY_SYSTEM.to_string()]);
    assert!(reqs[1].tools.is_empty());
    assert_eq!(
        tool_results(&reqs[1]).len(),
        1,
        "the summary sees the tool result"
    );
    assert!(texts(reqs[1].messages.last().unwrap()).contains(compaction::SUMMARY_PROMPT));

    // The next request starts from the summary; old tool output is not sent again.
    let after = &reqs[2].messages;
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(texts(&after[0]).contains("What did we do so far?"));
    assert!(texts(&after[1]).contains("SUMMARY: the user asked to echo a"));
    assert!(texts(&after[2]).contains(compaction::CONTINUE));
    assert!(tool_results(&reqs[2]).is_empty());
    assert!(
        !reqs[2].tools.is_empty(),
        "tools are back after the summary"
    );

    let msgs = s.core.ledger().messages(&s.session.id).await.unwrap();
    let summaries: Vec<_> = msgs
        .iter()
        .filter_map(history::assistant)
        .filter(|a| a.summary)
        .collect();
    assert_eq!(summaries.len(), 1);
    assert!(summaries[0].error.is_none());
}

#[tokio::test]
async fn a_context_overflow_error_is_compacted_then_retried() {
    let s = setup(
        json!({"context_limit": 100000, "turns": [
            {"error": {"kind": "context-overflow", "message": "prompt is too long", "status": 400}},
            {"text": "SUMMARY: nothing yet."},
            {"text": "answered after compaction"}
        ]}),
        "{}",
    )
    .await;
    let answer = s.core.prompt(prompt(&s, "hello")).await.unwrap();
    assert_eq!(answer.text(), "answered after compaction");
    let reqs = s.provider.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].system, vec![compaction::SUMMARY_SYSTEM.to_string()]);
    assert!(texts(&reqs[2].messages[1]).contains("SUMMARY: nothing yet."));
    let msgs = s.core.ledger().messages(&s.session.id).await.unwrap();
    let first = msgs.iter().filter_map(history::assistant).next().unwrap();
    assert!(matches!(
        first.error,
        Some(warden_protocol::MessageError::ContextOverflow { .. })
    ));
    let overflow_flag = msgs
        .iter()
        .flat_map(|m| m.parts.iter())
        .find_map(|p| match p.body {
            PartBody::Compaction { overflow, .. } => Some(overflow),
            _ => None,
        });
    assert_eq!(overflow_flag, Some(true));
}

#[tokio::test]
async fn overflowing_again_right_after_a_compaction_stops_instead_of_looping() {
    let s = setup(
        json!({"context_limit": 100, "turns": [
            {"text": "big", "usage": {"input": 500, "output": 1}, "finish_reason": "tool-calls"},
            {"text": "SUMMARY"},
            {"text": "still big", "usage": {"input": 500, "output": 1}, "finish_reason": "tool-calls"},
            {"text": "never"}
        ]}),
        "{}",
    ).await;
    let mut events = s.core.bus().subscribe();
    s.core.prompt(prompt(&s, "hello")).await.unwrap();
    assert_eq!(s.provider.requests().len(), 3);
    let mut warned = false;
    while let Ok(e) = events.try_recv() {
        if let Event::SessionWarning { message, .. } = &*e {
            warned |= message.contains("even after compaction");
        }
    }
    assert!(warned);
}

fn hook(plugin: &str, before: &[&str]) -> HookDef {
    HookDef {
        guest: GuestRef {
            plugin: plugin.into(),
            hash: "1".repeat(64),
        },
        before: before
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into(),
        after: Vec::new().into(),
        fail_open: false,
    }
}

#[tokio::test]
async fn a_call_that_fails_after_a_hook_rewrote_it_records_the_rewritten_input() {
    let tools = RustTools {
        hooks: vec![hook("rewriter", &["fail", "echo"])],
        ..RustTools::default()
    };
    let s = setup_with(
        json!({"turns": [
            {"tool_calls": [call("c1", "fail", json!({"path": "a"}))]},
            {"tool_calls": [call("c2", "echo", json!({"path": "b"}))]},
            {"text": "done"}
        ]}),
        "{}",
        tools,
        None,
    )
    .await;
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    let rewritten = json!({"path": "rewritten"});
    let states = tool_states(&s).await;
    assert_eq!(states.len(), 2, "{states:?}");
    match &states[0] {
        ToolState::Error {
            input,
            error,
            interrupted: false,
            ..
        } => {
            assert_eq!(input, &rewritten, "a failed call keeps what it ran with");
            assert_eq!(error, "it failed");
        }
        other => panic!("{other:?}"),
    }
    match &states[1] {
        ToolState::Completed { input, .. } => assert_eq!(input, &rewritten),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        *s.tools.ran.lock().unwrap(),
        [
            "hook rewriter fail",
            r#"fail {"path":"rewritten"}"#,
            "hook rewriter echo",
            r#"echo {"path":"rewritten"}"#,
        ]
    );
    assert_eq!(
        tool_timeline(&s).await,
        [
            ("c1".to_string(), "pending".to_string()),
            ("c1".to_string(), "running".to_string()),
            ("c1".to_string(), "error".to_string()),
            ("c2".to_string(), "pending".to_string()),
            ("c2".to_string(), "running".to_string()),
            ("c2".to_string(), "completed".to_string()),
        ]
    );
    // The audit rows of the failed call were written with its error.
    let c1: Vec<(String, String, String)> = s
        .core
        .ledger()
        .audit_trail(&s.session.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.call_id.as_deref() == Some("c1"))
        .map(|a| (a.stage, a.subject, a.outcome.unwrap_or_default()))
        .collect();
    let row = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        c1,
        [
            row("permission", "fail", "ok"),
            row("before", "hook:rewriter", "rewrite"),
            row("permission", "fail", "ok"),
            row("tool", "fail", "it failed"),
        ]
    );
}

#[tokio::test]
async fn hook_tool_patterns_are_globs_with_alternatives() {
    let tools = RustTools {
        hooks: vec![
            hook("braces", &["{echo,fail}"]),
            hook("class", &["[ef]cho"]),
            hook("other", &["{read,write}"]),
        ],
        ..RustTools::default()
    };
    let s = setup_with(
        json!({"turns": [
            {"tool_calls": [call("c1", "echo", json!({"path": "a"}))]},
            {"text": "done"}
        ]}),
        "{}",
        tools,
        None,
    )
    .await;
    s.core.prompt(prompt(&s, "go")).await.unwrap();
    assert_eq!(
        *s.tools.ran.lock().unwrap(),
        [
            "hook braces echo",
            "hook class echo",
            r#"echo {"path":"a"}"#
        ]
    );
}

/// A model whose stream the test writes event by event.
struct Remote(Mutex<std::collections::VecDeque<tokio::sync::mpsc::UnboundedReceiver<LlmEvent>>>);

#[async_trait::async_trait]
impl warden_llm::Provider for Remote {
    async fn stream(
        &self,
        _: LlmRequest,
    ) -> std::result::Result<warden_llm::EventStream, warden_protocol::ProviderError> {
        let rx = self.0.lock().unwrap().pop_front().ok_or_else(|| {
            warden_protocol::ProviderError::new(
                warden_protocol::llm::ErrorKind::BadRequest,
                "no more streams",
            )
        })?;
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|e| (e, rx))
        })))
    }
}

fn tool_call_event(id: &str, args: Value) -> LlmEvent {
    LlmEvent::ToolCall {
        call_id: id.into(),
        name: "echo".into(),
        input: args.to_string(),
        provider_executed: false,
    }
}

fn finish(reason: warden_protocol::FinishReason) -> [LlmEvent; 2] {
    [
        LlmEvent::FinishStep {
            reason,
            raw_reason: None,
            usage: Default::default(),
        },
        LlmEvent::Finish {
            reason,
            usage: Default::default(),
        },
    ]
}

/// A prompt under way on a model whose two steps the test streams by hand,
/// with a person attached to answer questions and the bus watched.
type Attended = (
    Setup,
    [tokio::sync::mpsc::UnboundedSender<LlmEvent>; 2],
    tokio::sync::broadcast::Receiver<Arc<Event>>,
    tokio::task::JoinHandle<crate::Result<MessageWithParts>>,
    crate::permission::AttachGuard,
);

async fn attended(config: &str) -> Attended {
    use tokio::sync::mpsc::unbounded_channel;
    let (step1, rx1) = unbounded_channel();
    let (step2, rx2) = unbounded_channel();
    let remote = Arc::new(Remote(Mutex::new([rx1, rx2].into())));
    let s = setup_with(
        json!({"turns": []}),
        config,
        RustTools::default(),
        Some(remote as Arc<dyn warden_llm::Provider>),
    )
    .await;
    let _attached = s.core.permissions().attach();
    let events = s.core.bus().subscribe();
    let core = s.core.clone();
    let input = prompt(&s, "go");
    let run = tokio::spawn(async move { core.prompt(input).await });
    (s, [step1, step2], events, run, _attached)
}

#[tokio::test]
async fn an_always_answer_applies_at_once_to_a_later_call_of_the_same_step() {
    use warden_protocol::{FinishReason, PermissionReply};
    let (s, [step1, step2], mut events, run, _attached) =
        attended(r#"{"permission": {"echo": "ask"}}"#).await;

    step1.send(LlmEvent::StartStep).unwrap();
    step1
        .send(tool_call_event("c1", json!({"path": "a"})))
        .unwrap();
    // The first call is asked about; the answer is `always`.
    let asked = loop {
        if let Event::PermissionAsked { request } = &*events.recv().await.unwrap() {
            break request.clone();
        }
    };
    assert_eq!(asked.permission, "echo");
    assert_eq!(asked.patterns, ["a"]);
    s.core
        .permissions()
        .reply(&asked.id, PermissionReply::Always)
        .await
        .unwrap();
    // The first call ends before the model makes its second.
    loop {
        if let Event::PartUpdated { part, .. } = &*events.recv().await.unwrap()
            && part.call_id() == Some("c1")
            && part.tool_state().is_some_and(|s| s.is_terminal())
        {
            break;
        }
    }
    // Only then does the model make its second call, in the same step.
    step1
        .send(tool_call_event("c2", json!({"path": "a"})))
        .unwrap();
    for e in finish(FinishReason::ToolCalls) {
        step1.send(e).unwrap();
    }
    drop(step1);
    step2.send(LlmEvent::StartStep).unwrap();
    step2
        .send(LlmEvent::TextDelta {
            id: "t".into(),
            text: "done".into(),
        })
        .unwrap();
    for e in finish(FinishReason::Stop) {
        step2.send(e).unwrap();
    }
    drop(step2);
    let answer = run.await.unwrap().unwrap();
    assert_eq!(answer.text(), "done");

    let mut asked_again = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(&*e, Event::PermissionAsked { .. }) {
            asked_again += 1;
        }
    }
    assert_eq!(asked_again, 0, "the second call was not asked about");
    assert_eq!(
        *s.tools.ran.lock().unwrap(),
        [r#"echo {"path":"a"}"#, r#"echo {"path":"a"}"#]
    );
    let trail: Vec<[String; 5]> = audit(&s)
        .await
        .into_iter()
        .filter(|a| a.stage != "tool")
        .map(|a| {
            [
                a.call_id.unwrap_or_default(),
                a.stage,
                a.subject,
                a.decision,
                a.rule.unwrap_or_default(),
            ]
        })
        .collect();
    let row = |a: &str, b: &str, c: &str, d: &str, e: &str| [a, b, c, d, e].map(str::to_string);
    assert_eq!(
        trail,
        [
            row("c1", "ask", "echo", "asked:always", "a"),
            row("c2", "permission", "echo", "allowed", "echo a allow"),
        ]
    );
}

#[tokio::test]
async fn the_doom_question_waits_in_its_call_while_the_stream_goes_on() {
    use warden_protocol::{FinishReason, PermissionReply};
    let (s, [step1, step2], mut events, run, _attached) =
        attended(r#"{"permission": {"doom_loop": "ask"}}"#).await;
    // The waits below are bounded only so that a stream loop held by the
    // question fails the test instead of hanging it: not a measure of speed.
    let bound = std::time::Duration::from_secs(20);

    step1.send(LlmEvent::StartStep).unwrap();
    for id in ["c0", "c1", "c2"] {
        step1
            .send(tool_call_event(id, json!({"path": "a"})))
            .unwrap();
    }
    let asked = tokio::time::timeout(bound, async {
        loop {
            if let Event::PermissionAsked { request } = &*events.recv().await.unwrap() {
                break request.clone();
            }
        }
    })
    .await
    .expect("the doom_loop question was asked");
    assert_eq!(asked.permission, "doom_loop");
    assert_eq!(asked.patterns, ["echo"]);

    // Unanswered, it holds only its own call: the model's next text is
    // written while the question waits.
    step1
        .send(LlmEvent::TextDelta {
            id: "t".into(),
            text: "meanwhile".into(),
        })
        .unwrap();
    step1.send(LlmEvent::TextEnd { id: "t".into() }).unwrap();
    tokio::time::timeout(bound, async {
        loop {
            if let Event::PartUpdated { part, .. } = &*events.recv().await.unwrap()
                && matches!(&part.body, PartBody::Text { text, .. } if text == "meanwhile")
            {
                break;
            }
        }
    })
    .await
    .expect("the text the model streamed after the asked call was written");
    assert_eq!(
        s.tools.ran.lock().unwrap().len(),
        2,
        "the asked call has not run"
    );

    s.core
        .permissions()
        .reply(&asked.id, PermissionReply::Once)
        .await
        .unwrap();
    for e in finish(FinishReason::ToolCalls) {
        step1.send(e).unwrap();
    }
    drop(step1);
    say(step2, "done");
    let answer = run.await.unwrap().unwrap();
    assert_eq!(answer.text(), "done");
    assert_eq!(s.tools.ran.lock().unwrap().len(), 3, "allowed once, it ran");

    // The question's row is the call's own, before its tool's.
    let rows: Vec<[String; 3]> = audit(&s)
        .await
        .into_iter()
        .filter(|a| a.call_id.as_deref() == Some("c2"))
        .map(|a| [a.stage, a.subject, a.decision])
        .collect();
    let row = |a: &str, b: &str, c: &str| [a, b, c].map(str::to_string);
    assert_eq!(rows.first(), Some(&row("ask", "doom_loop", "asked:once")));
    assert_eq!(rows.last().map(|r| r[0].as_str()), Some("tool"), "{rows:?}");
}

/// A core on the ledger at `location` (a SQLite path or a PostgreSQL URL)
/// acting as its own host (`holder`), answering with `model`.
async fn host_on(location: &str, holder: &str, model: Arc<dyn warden_llm::Provider>) -> Core {
    let store = crate::ledger::location::open_store(location).await.unwrap();
    let ledger = Ledger::new(store, Bus::new());
    Core::new(
        ledger,
        Registry::of(Arc::new(RustTools::default())),
        Arc::new(OneModel(model, None)),
        Config::parse("{}").unwrap(),
        CoreOptions {
            holder: Some(holder.into()),
            ..CoreOptions::default()
        },
    )
    .unwrap()
}

/// Send a whole text answer down one model stream.
fn say(step: tokio::sync::mpsc::UnboundedSender<LlmEvent>, text: &str) {
    step.send(LlmEvent::StartStep).unwrap();
    step.send(LlmEvent::TextDelta {
        id: "t".into(),
        text: text.into(),
    })
    .unwrap();
    for e in finish(warden_protocol::FinishReason::Stop) {
        step.send(e).unwrap();
    }
}

#[tokio::test]
async fn prompts_accepted_by_two_hosts_are_answered_once_each_in_the_order_the_ledger_took_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    two_hosts_queue_prompts(&path.to_string_lossy()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_accepted_by_two_hosts_on_postgresql_are_answered_once_each_in_order() {
    two_hosts_queue_prompts(&warden_pg_harness::database()).await;
}

/// Two hosts on one ledger, A running a first prompt ("first") when this
/// returns. A's model answers from the streams in `steps`, one per step; B
/// has no model answers at all: if it ran a step, its prompt would fail.
struct TwoHosts {
    a: Core,
    b: Core,
    session: SessionInfo,
    steps: std::vec::IntoIter<tokio::sync::mpsc::UnboundedSender<LlmEvent>>,
    first: tokio::task::JoinHandle<Result<MessageWithParts>>,
    _dir: tempfile::TempDir,
}

impl TwoHosts {
    async fn start(location: &str, steps: usize) -> TwoHosts {
        use tokio::sync::mpsc::unbounded_channel;
        let dir = tempfile::tempdir().unwrap();
        let (senders, streams): (Vec<_>, Vec<_>) = (0..steps).map(|_| unbounded_channel()).unzip();
        let a = host_on(
            location,
            "host-a",
            Arc::new(Remote(Mutex::new(streams.into()))),
        )
        .await;
        let b = host_on(
            location,
            "host-b",
            Arc::new(Remote(Mutex::new(Default::default()))),
        )
        .await;
        let session = a.create_session(dir.path(), "two hosts").await.unwrap();
        let mut events = a.bus().subscribe();
        let first = tokio::spawn({
            let (a, p) = (a.clone(), input(&session.id, "first"));
            async move { a.prompt(p).await }
        });
        loop {
            if let Event::SessionStatus { status, .. } = &*events.recv().await.unwrap()
                && *status == SessionStatus::Busy
            {
                break;
            }
        }
        TwoHosts {
            a,
            b,
            session,
            steps: senders.into_iter(),
            first,
            _dir: dir,
        }
    }
}

fn input(session: &SessionId, text: &str) -> PromptInput {
    PromptInput {
        session_id: session.clone(),
        text: text.into(),
        model: Some(ModelRef {
            provider: "remote".into(),
            model: "m".into(),
        }),
        ..PromptInput::default()
    }
}

async fn two_hosts_queue_prompts(location: &str) {
    // A is running the first prompt when B accepts the second and A the third.
    let TwoHosts {
        a,
        b,
        session,
        mut steps,
        first,
        _dir,
    } = TwoHosts::start(location, 3).await;
    let input = |text: &str| input(&session.id, text);
    let second_number = b.accept(&input("second")).await.unwrap();
    let second = tokio::spawn({
        let (b, s) = (b.clone(), session.id.clone());
        async move { b.answer(&s, second_number).await }
    });
    let third = tokio::spawn({
        let (a, p) = (a.clone(), input("third"));
        async move { a.prompt(p).await }
    });
    say(steps.next().unwrap(), "one");
    say(steps.next().unwrap(), "two");
    say(steps.next().unwrap(), "three");

    let answers = [
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
        third.await.unwrap().unwrap(),
    ];
    assert_eq!(answers.map(|m| m.text()), ["one", "two", "three"]);
    let history: Vec<(String, String)> = b
        .ledger()
        .messages(&session.id)
        .await
        .unwrap()
        .iter()
        .map(|m| (m.info.role().to_string(), m.text()))
        .collect();
    let turn = |u: &str, a: &str| {
        [
            ("user".to_string(), u.to_string()),
            ("assistant".into(), a.into()),
        ]
    };
    assert_eq!(
        history,
        [
            turn("first", "one"),
            turn("second", "two"),
            turn("third", "three")
        ]
        .concat(),
        "each prompt written once, answered once, in the ledger's order"
    );
    // Every prompt is settled with its own answer; none is left open.
    assert!(
        a.ledger()
            .open_prompts(&session.id)
            .await
            .unwrap()
            .is_empty()
    );
    let settled = b
        .ledger()
        .queued_prompt(second_number)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(settled.state, PromptState::Answered { .. }),
        "{settled:?}"
    );
    assert!(
        a.ledger().leases().await.unwrap().is_empty(),
        "the lease was given back"
    );
}

#[tokio::test]
async fn a_waiter_on_a_sqlite_file_another_host_runs_reads_only_when_the_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    waits_without_looking(&path.to_string_lossy()).await;
}

#[tokio::test]
async fn a_waiter_on_postgresql_reads_only_when_another_host_sends_a_notice() {
    waits_without_looking(&warden_pg_harness::database()).await;
}

/// B waits for a prompt A runs: it reads the prompt's row when it starts
/// waiting and then only when something may have changed, not while A's
/// step is quiet; A's answer to it reaches B once A settles it.
async fn waits_without_looking(location: &str) {
    use crate::hosts::wait::LOOKS;
    let TwoHosts {
        b,
        session,
        mut steps,
        first,
        ..
    } = TwoHosts::start(location, 2).await;
    let input = |text: &str| input(&session.id, text);
    let number = b.accept(&input("second")).await.unwrap();
    let second = tokio::spawn({
        let (b, s) = (b.clone(), session.id.clone());
        async move { b.answer(&s, number).await }
    });
    while LOOKS.with(|l| l.get()) == 0 {
        tokio::task::yield_now().await;
    }
    // Let B's first look and A's reaction to the queued prompt settle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = LOOKS.with(|l| l.get());
    // A's step is quiet (its model sends nothing, its lease needs no
    // renewal yet): B reads nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        LOOKS.with(|l| l.get()),
        before,
        "B looked with nothing changed"
    );

    say(steps.next().unwrap(), "one");
    say(steps.next().unwrap(), "two");
    assert_eq!(first.await.unwrap().unwrap().text(), "one");
    assert_eq!(
        second.await.unwrap().unwrap().text(),
        "two",
        "A answered B's prompt"
    );
}

#[tokio::test]
async fn a_prompt_queued_by_a_host_that_stopped_is_answered_by_the_next_runner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let cassette = dir.path().join("cassette.json");
    std::fs::write(
        &cassette,
        json!({"turns": [{"text": "answered later"}]}).to_string(),
    )
    .unwrap();
    let scripted = Arc::new(ScriptedProvider::load(&cassette).unwrap());
    let b = host_on(&path.to_string_lossy(), "host-b", scripted).await;
    let session = b.create_session(dir.path(), "left behind").await.unwrap();
    // A accepts a prompt and stops before running it (its core is dropped).
    {
        let a = host_on(
            &path.to_string_lossy(),
            "host-a",
            Arc::new(Remote(Mutex::new(Default::default()))),
        )
        .await;
        a.accept(&PromptInput {
            session_id: session.id.clone(),
            text: "hello".into(),
            model: Some(ModelRef {
                provider: "scripted".into(),
                model: "cassette".into(),
            }),
            ..PromptInput::default()
        })
        .await
        .unwrap();
    }
    // B's sweep finds it and runs the session.
    assert_eq!(
        b.orphaned().await.unwrap(),
        std::slice::from_ref(&session.id)
    );
    let answer = b.run(&session.id).await.unwrap();
    assert_eq!(answer.text(), "answered later");
    assert!(b.orphaned().await.unwrap().is_empty());
    assert!(
        b.ledger()
            .open_prompts(&session.id)
            .await
            .unwrap()
            .is_empty()
    );
}
