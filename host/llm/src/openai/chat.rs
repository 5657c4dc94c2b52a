//! The Chat Completions request: `POST {base_url}/chat/completions`.
//!
//! The system prompt is one `system` message (several confuse some local
//! chat templates); each assistant message carries its text and its
//! `tool_calls`; each result is a `tool` message naming its call's id.
//! Reasoning is not sent back: OpenAI keeps none, and DeepSeek refuses
//! `reasoning_content` in input messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use warden_protocol::llm::{AssistantContent, ChatMessage, UserContent};
use warden_protocol::{LlmRequest, ToolSpec};

/// How this endpoint wants the output limit named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_completion_tokens`: OpenAI's own API (its reasoning models refuse `max_tokens`).
    MaxCompletionTokens,
    /// `max_tokens`: what compatible servers understand.
    MaxTokens,
}

/// The request body, serialised straight from the request: a long session
/// sends its whole history every step, so nothing is copied on the way.
pub fn body<'a>(
    req: &'a LlmRequest,
    field: MaxTokensField,
    options: Option<&'a Map<String, Value>>,
) -> Body<'a> {
    Body {
        req,
        field,
        options,
        encoded: None,
    }
}

/// One message's wire elements, as JSON text.
type Elements = Arc<[Box<RawValue>]>;

/// A message as last sent, with its wire form. The `Weak` keeps the
/// message's address from being reused by another while the entry exists,
/// so an equal address is the very same (immutable) message.
type Entry = (Weak<ChatMessage>, Elements);

/// How many conversations one provider keeps the encodings of: the
/// sessions that use this model at once, each sending its own history.
const CONVERSATIONS: usize = 16;

/// The wire form of each conversation message, kept with the shared message
/// (by its `Arc`) for as long as the conversation sends it: a long session's
/// request re-encodes only what its last step added, and copies the rest.
/// Kept per conversation (told apart by their first message), so sessions
/// sharing a model do not evict each other's.
#[derive(Default)]
pub struct Encoded {
    conversations: Mutex<Vec<Conversation>>,
}

/// One conversation's messages as last sent, in order.
#[derive(Default)]
struct Conversation {
    sent: Vec<Entry>,
    /// When it was last sent (a counter), to know which one to forget.
    used: u64,
}

impl Conversation {
    fn starts_with(&self, m: Option<&Arc<ChatMessage>>) -> bool {
        match (self.sent.first(), m) {
            (Some((w, _)), Some(m)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(m)),
            _ => false,
        }
    }

    /// Bring the entries in line with `req`'s messages: those sent before
    /// (in the same place, as a growing conversation has them, or anywhere
    /// else, after a compaction) keep their encoding; the others are encoded;
    /// those no longer sent are dropped.
    fn refresh(&mut self, req: &LlmRequest) -> serde_json::Result<()> {
        let mut before = std::mem::take(&mut self.sent).into_iter();
        let mut elsewhere: Option<HashMap<*const ChatMessage, Entry>> = None;
        self.sent.reserve(req.messages.len());
        for m in &req.messages {
            let at = Arc::as_ptr(m);
            let kept = match &mut elsewhere {
                None => match before.next() {
                    Some(e) if std::ptr::eq(e.0.as_ptr(), at) => Some(e),
                    Some(e) => {
                        let mut map: HashMap<_, _> = std::iter::once(e)
                            .chain(before.by_ref())
                            .map(|e| (e.0.as_ptr(), e))
                            .collect();
                        let found = map.remove(&at);
                        elsewhere = Some(map);
                        found
                    }
                    None => None,
                },
                Some(map) => map.remove(&at),
            };
            let entry = match kept {
                Some(e) => e,
                None => (Arc::downgrade(m), Arc::from(encode(m)?)),
            };
            self.sent.push(entry);
        }
        Ok(())
    }
}

impl Encoded {
    /// The conversation `req` continues, refreshed to its messages; taken
    /// out while the body is written (see [`Encoded::keep`]).
    fn take(&self, req: &LlmRequest) -> serde_json::Result<Conversation> {
        let mut all = self.conversations.lock().unwrap_or_else(|p| p.into_inner());
        // A conversation whose first message nobody holds is over.
        all.retain(|c| c.sent.first().is_some_and(|(w, _)| w.strong_count() > 0));
        let used = all.iter().map(|c| c.used).max().unwrap_or(0) + 1;
        let mut conversation = match all.iter().position(|c| c.starts_with(req.messages.first())) {
            Some(i) => all.swap_remove(i),
            None => Conversation::default(),
        };
        drop(all);
        conversation.used = used;
        conversation.refresh(req)?;
        Ok(conversation)
    }

    /// Keep `conversation` for the next request, forgetting the one sent
    /// longest ago when there are too many.
    fn keep(&self, conversation: Conversation) {
        let mut all = self.conversations.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= CONVERSATIONS
            && let Some(oldest) = (0..all.len()).min_by_key(|&i| all[i].used)
        {
            all.swap_remove(oldest);
        }
        all.push(conversation);
    }
}

impl<'a> Body<'a> {
    /// Take each message's wire form from `encoded`, and keep new ones there.
    pub fn with_encoded(mut self, encoded: &'a Encoded) -> Body<'a> {
        self.encoded = Some(encoded);
        self
    }
}

/// See [`body`].
pub struct Body<'a> {
    req: &'a LlmRequest,
    field: MaxTokensField,
    options: Option<&'a Map<String, Value>>,
    encoded: Option<&'a Encoded>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The model's configured `options` go in as given (temperature,
        // `reasoning_effort`, a local server's own knobs), over the defaults.
        let given = |k: &str| self.options.is_some_and(|o| o.contains_key(k));
        let mut map = s.serialize_map(None)?;
        if !given("model") {
            map.serialize_entry("model", &self.req.model)?;
        }
        if !given("messages") {
            map.serialize_entry("messages", &Messages(self.req, self.encoded))?;
        }
        if !given("stream") {
            map.serialize_entry("stream", &true)?;
        }
        if !given("stream_options") {
            map.serialize_entry("stream_options", &json!({"include_usage": true}))?;
        }
        if !self.req.tools.is_empty() && !given("tools") {
            let tools: Vec<Tool<'_>> = self.req.tools.iter().map(Tool::from).collect();
            map.serialize_entry("tools", &tools)?;
        }
        if let Some(max) = self.req.max_output_tokens {
            let key = match self.field {
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
                MaxTokensField::MaxTokens => "max_tokens",
            };
            if !given(key) {
                map.serialize_entry(key, &max)?;
            }
        }
        for (k, v) in self.options.into_iter().flatten() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The system prompt, then the conversation.
struct Messages<'a>(&'a LlmRequest, Option<&'a Encoded>);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let req = self.0;
        let mut seq = s.serialize_seq(None)?;
        let system = req.system_parts();
        if !system.is_empty() {
            seq.serialize_element(&Wire::System {
                content: Joined(&system),
            })?;
        }
        match self.1 {
            Some(encoded) => {
                let conversation = encoded.take(req).map_err(S::Error::custom)?;
                for (_, wire) in &conversation.sent {
                    for element in wire.iter() {
                        seq.serialize_element(element)?;
                    }
                }
                encoded.keep(conversation);
            }
            None => {
                for m in &req.messages {
                    for element in encode(m).map_err(S::Error::custom)? {
                        seq.serialize_element(&element)?;
                    }
                }
            }
        }
        seq.end()
    }
}

/// One conversation message as the wire elements it becomes: none (an
/// assistant message with nothing to send), one, or one per tool result.
fn encode(m: &ChatMessage) -> serde_json::Result<Vec<Box<RawValue>>> {
    let raw = serde_json::value::to_raw_value;
    let mut out = Vec::new();
    match m {
        ChatMessage::User { content } => {
            let text: Vec<&str> = content
                .iter()
                .map(|UserContent::Text { text }| text.as_str())
                .collect();
            out.push(raw(&Wire::User {
                content: Joined(&text),
            })?);
        }
        ChatMessage::Assistant { content } => {
            let mut text = Vec::new();
            let mut tool_calls = Vec::new();
            for c in content {
                match c {
                    AssistantContent::Text { text: t } => text.push(t.as_str()),
                    AssistantContent::Reasoning { .. } => {}
                    AssistantContent::ToolCall {
                        call_id,
                        name,
                        input,
                    } => tool_calls.push(Call {
                        id: call_id,
                        kind: "function",
                        function: Function {
                            name,
                            arguments: Arguments(input),
                        },
                    }),
                }
            }
            let text_empty = text.iter().all(|t| t.is_empty());
            if !(text_empty && tool_calls.is_empty()) {
                out.push(raw(&Wire::Assistant {
                    content: (!text_empty).then_some(Concatenated(&text)),
                    tool_calls,
                })?);
            }
        }
        ChatMessage::Tool { content } => {
            for r in content {
                out.push(raw(&Wire::Tool {
                    tool_call_id: &r.call_id,
                    content: &r.output,
                })?);
            }
        }
    }
    Ok(out)
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Wire<'a> {
    System {
        content: Joined<'a>,
    },
    User {
        content: Joined<'a>,
    },
    Assistant {
        /// `null` when the message only calls tools.
        content: Option<Concatenated<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: Arguments<'a>,
}

/// The call's input as the JSON text the API wants, written without an
/// intermediate string.
struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

/// Texts as one string, separated by a blank line.
struct Joined<'a>(&'a [&'a str]);

impl Serialize for Joined<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [one] => s.serialize_str(one),
            many => s.serialize_str(&many.join("\n\n")),
        }
    }
}

/// Texts as one string, as they were streamed.
struct Concatenated<'a>(&'a [&'a str]);

impl Serialize for Concatenated<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [one] => s.serialize_str(one),
            many => s.serialize_str(&many.concat()),
        }
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> From<&'a ToolSpec> for Tool<'a> {
    fn from(t: &'a ToolSpec) -> Tool<'a> {
        Tool {
            kind: "function",
            function: ToolFunction {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        }
    }
}

/// Put the model's configured `options` into a body built as a [`Value`]
/// (the Responses and Anthropic requests), over the defaults.
pub fn merge_options(body: &mut Value, options: Option<&Map<String, Value>>) {
    if let (Some(obj), Some(options)) = (body.as_object_mut(), options) {
        for (k, v) in options {
            obj.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::llm::ToolResultContent;

    fn request() -> LlmRequest {
        LlmRequest {
            model: "gpt-4o".into(),
            system: vec!["be brief".into(), "<env>x</env>".into()],
            messages: vec![
                ChatMessage::User {
                    content: vec![UserContent::Text {
                        text: "read a.txt".into(),
                    }],
                },
                ChatMessage::Assistant {
                    content: vec![
                        AssistantContent::Reasoning {
                            text: "hmm".into(),
                            metadata: None,
                        },
                        AssistantContent::ToolCall {
                            call_id: "call_1".into(),
                            name: "read".into(),
                            input: json!({"filePath": "a.txt"}),
                        },
                    ],
                },
                ChatMessage::Tool {
                    content: vec![ToolResultContent {
                        call_id: "call_1".into(),
                        name: "read".into(),
                        output: "1\ta".into(),
                        is_error: false,
                    }],
                },
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: Some(1000),
        }
    }

    #[test]
    fn the_whole_body() {
        let mut options = Map::new();
        options.insert("temperature".into(), json!(0));
        let body = serde_json::to_value(body(
            &request(),
            MaxTokensField::MaxCompletionTokens,
            Some(&options),
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief\n\n<env>x</env>"},
                    {"role": "user", "content": "read a.txt"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"filePath\":\"a.txt\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "1\ta"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {"type": "object"}}}],
                "max_completion_tokens": 1000,
                "temperature": 0,
            })
        );
    }

    #[test]
    fn no_tools_no_limit_and_reasoning_only_messages_are_left_out() {
        let mut req = request();
        req.tools.clear();
        req.max_output_tokens = None;
        req.messages = vec![ChatMessage::Assistant {
            content: vec![AssistantContent::Reasoning {
                text: "only thinking".into(),
                metadata: None,
            }],
        }]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
        let body = serde_json::to_value(body(&req, MaxTokensField::MaxTokens, None)).unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
        assert!(body.get("tools").is_none());
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn options_replace_defaults_once_and_texts_keep_their_shape() {
        let mut req = request();
        req.messages = vec![
            ChatMessage::User {
                content: vec![
                    UserContent::Text { text: "a".into() },
                    UserContent::Text { text: "b".into() },
                ],
            },
            ChatMessage::Assistant {
                content: vec![
                    AssistantContent::Text { text: "x".into() },
                    AssistantContent::Text { text: "y".into() },
                ],
            },
        ]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
        let mut options = Map::new();
        options.insert("stream_options".into(), json!({"include_usage": false}));
        options.insert("max_completion_tokens".into(), json!(5));
        let text = serde_json::to_string(&body(
            &req,
            MaxTokensField::MaxCompletionTokens,
            Some(&options),
        ))
        .unwrap();
        assert_eq!(text.matches("\"stream_options\"").count(), 1, "{text}");
        assert_eq!(
            text.matches("\"max_completion_tokens\"").count(),
            1,
            "{text}"
        );
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["stream_options"], json!({"include_usage": false}));
        assert_eq!(body["max_completion_tokens"], json!(5));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "be brief\n\n<env>x</env>"},
                {"role": "user", "content": "a\n\nb"},
                {"role": "assistant", "content": "xy"},
            ])
        );
    }

    /// The kept wire form of each message of the conversation `first`
    /// starts, in order.
    fn kept_wire(encoded: &Encoded, first: &Arc<ChatMessage>) -> Vec<Elements> {
        let all = encoded.conversations.lock().unwrap();
        let c = all
            .iter()
            .find(|c| c.starts_with(Some(first)))
            .expect("kept");
        c.sent.iter().map(|(_, e)| e.clone()).collect()
    }

    fn user_says(text: &str) -> Arc<ChatMessage> {
        Arc::new(ChatMessage::User {
            content: vec![UserContent::Text { text: text.into() }],
        })
    }

    #[test]
    fn kept_encodings_give_the_same_bytes_and_follow_the_conversation() {
        let encoded = Encoded::default();
        let mut req = request();
        let plain =
            |r: &LlmRequest| serde_json::to_vec(&body(r, MaxTokensField::MaxTokens, None)).unwrap();
        let kept = |r: &LlmRequest| {
            serde_json::to_vec(&body(r, MaxTokensField::MaxTokens, None).with_encoded(&encoded))
                .unwrap()
        };
        assert_eq!(kept(&req), plain(&req));
        let first = req.messages[0].clone();
        let round1 = kept_wire(&encoded, &first);
        assert_eq!(round1.len(), 3);

        // The next step shares the three messages and adds one: only that
        // one is encoded.
        req.messages.push(user_says("next"));
        assert_eq!(kept(&req), plain(&req));
        let round2 = kept_wire(&encoded, &first);
        assert_eq!(round2.len(), 4);
        assert!(
            round1.iter().zip(&round2).all(|(a, b)| Arc::ptr_eq(a, b)),
            "a shared message is encoded once"
        );

        // Another session on the same model, in between, keeps its own.
        let mut other = request();
        other.messages = vec![user_says("elsewhere")].into();
        assert_eq!(kept(&other), plain(&other));
        assert_eq!(encoded.conversations.lock().unwrap().len(), 2);

        // A message dropped from the middle (a compaction): the others keep
        // their encoding, wherever they now stand.
        req.messages.remove(1);
        assert_eq!(kept(&req), plain(&req));
        let round3 = kept_wire(&encoded, &first);
        assert_eq!(round3.len(), 3);
        assert!(Arc::ptr_eq(&round3[0], &round2[0]));
        assert!(Arc::ptr_eq(&round3[1], &round2[2]));
        assert!(Arc::ptr_eq(&round3[2], &round2[3]));

        // A conversation nobody holds any more is forgotten at the next request.
        drop(other);
        assert_eq!(kept(&req), plain(&req));
        assert_eq!(encoded.conversations.lock().unwrap().len(), 1);
    }

    #[test]
    fn kept_conversations_are_bounded() {
        let encoded = Encoded::default();
        let requests: Vec<LlmRequest> = (0..CONVERSATIONS + 3)
            .map(|i| {
                let mut r = request();
                r.messages = vec![user_says(&format!("session {i}"))].into();
                r
            })
            .collect();
        for r in &requests {
            let plain = serde_json::to_vec(&body(r, MaxTokensField::MaxTokens, None)).unwrap();
            let kept = serde_json::to_vec(
                &body(r, MaxTokensField::MaxTokens, None).with_encoded(&encoded),
            )
            .unwrap();
            assert_eq!(kept, plain);
        }
        let all = encoded.conversations.lock().unwrap();
        assert_eq!(all.len(), CONVERSATIONS);
        // The ones sent longest ago went first.
        assert!(
            !all.iter()
                .any(|c| c.starts_with(requests[0].messages.first()))
        );
        assert!(
            all.iter()
                .any(|c| c.starts_with(requests.last().unwrap().messages.first()))
        );
    }
}
