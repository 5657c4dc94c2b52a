use super::*;

#[test]
fn malformed_cassettes_say_what_is_wrong() {
    assert!(
        Cassette::parse("{")
            .unwrap_err()
            .contains("not a valid cassette")
    );
    assert!(
        Cassette::parse(r#"{"turns": [{}]}"#)
            .unwrap_err()
            .contains("turn 1 is empty")
    );
    assert!(
        Cassette::parse(r#"{"turns": [{"text": "a", "finish_reason": "done"}]}"#)
            .unwrap_err()
            .contains("unknown finish_reason \"done\"")
    );
    assert!(
        Cassette::parse(r#"{"turns": [{"txt": "a"}]}"#)
            .unwrap_err()
            .contains("unknown field `txt`")
    );
    assert!(
        Cassette::parse(r#"{"turns": [{"tool_calls": [{"id": "", "name": "read"}]}]}"#)
            .unwrap_err()
            .contains("non-empty")
    );
}

#[test]
fn text_streams_in_chunks_that_add_up() {
    let t = "one two three four five six seven";
    let c = chunks(t);
    assert!(c.len() > 1);
    assert_eq!(c.concat(), t);
}

#[test]
fn a_turn_with_a_call_but_stop_keeps_stop() {
    let turn = Turn {
        tool_calls: vec![ScriptedCall {
            id: "c".into(),
            name: "read".into(),
            arguments: Some(serde_json::json!({"filePath": "a"})),
            arguments_raw: None,
        }],
        finish_reason: Some("stop".into()),
        ..Turn::default()
    };
    let req = LlmRequest {
        model: "m".into(),
        system: vec![],
        messages: Default::default(),
        tools: vec![],
        max_output_tokens: None,
    };
    let ev = turn_events(&turn, 0, &req, 0);
    assert!(ev.contains(&LlmEvent::ToolCall {
        call_id: "c".into(),
        name: "read".into(),
        input: r#"{"filePath":"a"}"#.into(),
        provider_executed: false
    }));
    assert!(matches!(
        ev[ev.len() - 2],
        LlmEvent::FinishStep {
            reason: FinishReason::Stop,
            ..
        }
    ));
}

fn cassette(dir: &Path, turns: serde_json::Value) -> ScriptedProvider {
    let path = dir.join("cassette.json");
    std::fs::write(&path, serde_json::json!({ "turns": turns }).to_string()).unwrap();
    ScriptedProvider::load(&path).unwrap().keeping_requests()
}

fn request(messages: Vec<ChatMessage>) -> LlmRequest {
    LlmRequest {
        model: "m".into(),
        system: vec![],
        messages: messages.into_iter().map(Arc::new).collect(),
        tools: vec![],
        max_output_tokens: None,
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: vec![warden_protocol::llm::UserContent::Text { text: text.into() }],
    }
}

fn assistant(text: &str) -> ChatMessage {
    ChatMessage::Assistant {
        content: vec![warden_protocol::llm::AssistantContent::Text { text: text.into() }],
    }
}

/// The text a stream carries, or the error that stopped it.
async fn answer(p: &dyn Provider, r: LlmRequest) -> String {
    match p.stream(r).await {
        Ok(s) => s
            .filter_map(|e| async move {
                match e {
                    LlmEvent::TextDelta { text, .. } => Some(text),
                    _ => None,
                }
            })
            .collect::<Vec<_>>()
            .await
            .concat(),
        Err(e) => format!("error: {}", e.message),
    }
}

#[tokio::test]
async fn each_conversation_keeps_its_own_place_and_a_retry_takes_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let p = cassette(
        dir.path(),
        serde_json::json!([
            {"error": {"kind": "rate-limited", "message": "slow down"}},
            {"text": "first"},
            {"text": "second"}
        ]),
    );
    let a = p.conversation("ses_a").unwrap();
    let b = p.conversation("ses_b").unwrap();
    assert_eq!(
        answer(&*a, request(vec![user("hi")])).await,
        "error: slow down"
    );
    // The retry of the same request takes the next turn.
    assert_eq!(answer(&*a, request(vec![user("hi")])).await, "first");
    // Another session with the same prompt starts at the beginning.
    assert_eq!(
        answer(&*b, request(vec![user("hi")])).await,
        "error: slow down"
    );
    // A fresh view of a conversation keeps its place.
    let a_again = p.conversation("ses_a").unwrap();
    let next = request(vec![user("hi"), assistant("first"), user("more")]);
    assert_eq!(answer(&*a_again, next).await, "second");
    assert_eq!(p.requests().len(), 4);
}

#[tokio::test]
async fn a_conversation_first_seen_mid_way_starts_after_the_turns_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let p = cassette(
        dir.path(),
        serde_json::json!([{"text": "one"}, {"text": "two"}, {"text": "three"}]),
    );
    // As a fresh process resuming a session two model turns in.
    let resumed = p.conversation("ses_resumed").unwrap();
    let r = request(vec![
        user("a"),
        assistant("one"),
        user("b"),
        assistant("two"),
        user("c"),
    ]);
    assert_eq!(answer(&*resumed, r).await, "three");
    // A last assistant message is put in the model's mouth, not a turn taken.
    let last_step = p.conversation("ses_last_step").unwrap();
    let r = request(vec![user("a"), assistant("no steps are left")]);
    assert_eq!(answer(&*last_step, r).await, "one");
    // A fourth request runs past the cassette and says so.
    let e = answer(&*resumed, request(vec![user("a")])).await;
    assert!(
        e.contains("has 3 turns and this is request 4 of the session"),
        "{e}"
    );
}
