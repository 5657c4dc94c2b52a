//! A message header as stored: without what its row, its session or the
//! user message it answers already say. Every step writes an assistant
//! header, and most of one repeats its context: the session's directory
//! (as `path.cwd` and `path.root`), the model the prompt asked for, `mode`
//! (always the agent's name), the creation time (the row's `created_at`)
//! and zero costs and token counts. A field is left out only when it equals
//! what a reader will put back, so reading gives the header that was
//! written; a row that has a field (one written before this scheme, or one
//! whose value differs from its context) keeps it.

use serde_json::{Map, Value};
use warden_protocol::{MessageInfo, ModelRef};

use super::{Result, codec};
use crate::LedgerError;

/// What a header's row stands in: its session's directory, and the model
/// of the user message it answers (`{"providerID":…,"modelID":…}`), when
/// there is one.
pub struct Context<'a> {
    pub directory: &'a str,
    pub parent_model: Option<&'a Value>,
}

fn path_of(directory: &str) -> Value {
    serde_json::json!({"cwd": directory, "root": directory})
}

/// The header's JSON without what its row and `ctx` say.
pub fn encode(info: &MessageInfo, ctx: &Context<'_>) -> Result<String> {
    let mut v = serde_json::to_value(info).map_err(|e| LedgerError::encode("a message", e))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(LedgerError::encode("a message", "not a JSON object"));
    };
    // Columns of the row. (`shift_remove` keeps the others in order.)
    for k in ["role", "id", "sessionID"] {
        obj.shift_remove(k);
    }
    leave_out_created(obj);
    if let MessageInfo::Assistant(a) = info {
        if a.mode == a.agent {
            obj.shift_remove("mode");
        }
        if a.cost == 0.0 {
            obj.shift_remove("cost");
        }
        if obj.get("path") == Some(&path_of(ctx.directory)) {
            obj.shift_remove("path");
        }
        if ctx.parent_model == Some(&model_value(&a.model)) {
            obj.shift_remove("providerID");
            obj.shift_remove("modelID");
        }
    }
    // Zero token counts go the way a step-finish part's do.
    Ok(codec::slim_tokens(v.to_string()))
}

/// `time.created` is the row's `created_at`; an empty `time` goes too.
fn leave_out_created(obj: &mut Map<String, Value>) {
    let Some(time) = obj.get_mut("time").and_then(Value::as_object_mut) else {
        return;
    };
    time.shift_remove("created");
    if time.is_empty() {
        obj.shift_remove("time");
    }
}

/// A stored header's row, read back whole.
pub struct Row<'a> {
    pub id: &'a str,
    pub role: &'a str,
    pub session_id: &'a str,
    pub created_at: i64,
    pub info: &'a str,
}

/// The header `row` stores, with what it left out put back from its
/// session's `directory` and the model of its parent (`model_value`, looked
/// up by the parent's id).
pub fn decode<'m>(
    row: &Row<'_>,
    directory: &str,
    model_of_parent: impl FnOnce(&str) -> Option<&'m Value>,
) -> std::result::Result<MessageInfo, String> {
    let mut obj: Map<String, Value> = serde_json::from_str(row.info).map_err(|e| e.to_string())?;
    obj.insert("role".into(), row.role.into());
    obj.insert("id".into(), row.id.into());
    obj.insert("sessionID".into(), row.session_id.into());
    let time = obj
        .entry("time")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(time) = time.as_object_mut() {
        time.entry("created").or_insert(row.created_at.into());
    }
    if row.role == "assistant" {
        if !obj.contains_key("mode")
            && let Some(agent) = obj.get("agent").cloned()
        {
            obj.insert("mode".into(), agent);
        }
        obj.entry("path").or_insert_with(|| path_of(directory));
        if !obj.contains_key("providerID") {
            let parent = obj.get("parentID").and_then(Value::as_str).unwrap_or("");
            let Some(Value::Object(model)) = model_of_parent(parent) else {
                return Err(
                    "it leaves its model to the user message it answers, which is not in the ledger"
                        .into(),
                );
            };
            for (k, v) in model {
                obj.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::from_value(Value::Object(obj)).map_err(|e| e.to_string())
}

/// A model as a user header stores it (`{"providerID":…,"modelID":…}`),
/// the form an assistant header's context compares with.
pub fn model_value(model: &ModelRef) -> Value {
    serde_json::to_value(model).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::{
        AssistantInfo, FinishReason, MessagePath, MessageTime, ModelRef, Tokens, UserInfo,
    };

    fn user() -> MessageInfo {
        MessageInfo::User(UserInfo {
            id: "msg_u".into(),
            session_id: "ses_1".into(),
            time: MessageTime::at(100),
            agent: "build".into(),
            model: ModelRef {
                provider: "openai".into(),
                model: "gpt-x".into(),
            },
        })
    }

    fn assistant() -> AssistantInfo {
        AssistantInfo {
            id: "msg_a".into(),
            session_id: "ses_1".into(),
            parent_id: "msg_u".into(),
            agent: "build".into(),
            mode: "build".into(),
            model: ModelRef {
                provider: "openai".into(),
                model: "gpt-x".into(),
            },
            path: MessagePath::of("/work/p"),
            time: MessageTime {
                created: 200,
                completed: Some(250),
            },
            finish: Some(FinishReason::ToolCalls),
            tokens: Tokens {
                input: 10,
                output: 3,
                ..Tokens::default()
            },
            cost: 0.0,
            error: None,
            summary: false,
        }
    }

    fn user_model() -> Value {
        model_value(&ModelRef {
            provider: "openai".into(),
            model: "gpt-x".into(),
        })
    }

    /// The row `info` is stored in, with `stored` as its JSON.
    fn row_of<'a>(info: &'a MessageInfo, stored: &'a str) -> Row<'a> {
        Row {
            id: info.id().as_str(),
            role: info.role(),
            session_id: info.session_id().as_str(),
            created_at: info.created(),
            info: stored,
        }
    }

    fn round_trip(info: &MessageInfo, ctx: &Context<'_>) -> (String, MessageInfo) {
        let stored = encode(info, ctx).unwrap();
        let back = decode(&row_of(info, &stored), ctx.directory, |p| {
            assert_eq!(p, "msg_u");
            ctx.parent_model
        })
        .unwrap();
        (stored, back)
    }

    #[test]
    fn an_assistant_header_keeps_only_what_its_context_does_not_say() {
        let model = user_model();
        let ctx = Context {
            directory: "/work/p",
            parent_model: Some(&model),
        };
        let info = MessageInfo::Assistant(assistant());
        let (stored, back) = round_trip(&info, &ctx);
        assert_eq!(
            stored,
            r#"{"parentID":"msg_u","agent":"build","time":{"completed":250},"finish":"tool-calls","tokens":{"input":10,"output":3}}"#
        );
        assert_eq!(back, info);
    }

    #[test]
    fn what_differs_from_the_context_is_kept() {
        let model = user_model();
        let ctx = Context {
            directory: "/work/other",
            parent_model: Some(&model),
        };
        let mut a = assistant();
        a.mode = "plan".into();
        a.model.model = "gpt-y".into();
        a.cost = 0.25;
        a.tokens.cache.read = 4;
        a.path = MessagePath {
            cwd: "/work/p/sub".into(),
            root: "/work/p".into(),
        };
        let info = MessageInfo::Assistant(a);
        let (stored, back) = round_trip(&info, &ctx);
        for kept in [
            r#""mode":"plan""#,
            r#""modelID":"gpt-y""#,
            r#""cost":0.25"#,
            r#""cache":{"read":4,"write":0}"#,
            r#""cwd":"/work/p/sub""#,
        ] {
            assert!(stored.contains(kept), "{kept} missing from {stored}");
        }
        assert_eq!(back, info);
    }

    #[test]
    fn a_user_header_keeps_its_agent_and_model() {
        let ctx = Context {
            directory: "/work/p",
            parent_model: None,
        };
        let (stored, back) = round_trip(&user(), &ctx);
        assert_eq!(
            stored,
            r#"{"agent":"build","model":{"providerID":"openai","modelID":"gpt-x"}}"#
        );
        assert_eq!(back, user());
    }

    #[test]
    fn a_header_written_whole_reads_as_it_was() {
        // As schema 6 wrote it: everything but the row's columns.
        let info = MessageInfo::Assistant(assistant());
        let mut v = serde_json::to_value(&info).unwrap();
        for k in ["role", "id", "sessionID"] {
            v.as_object_mut().unwrap().remove(k);
        }
        let whole = v.to_string();
        // The stored creation time wins over the column's.
        let row = Row {
            created_at: 999,
            ..row_of(&info, &whole)
        };
        assert_eq!(decode(&row, "/elsewhere", |_| None).unwrap(), info);
    }

    #[test]
    fn a_header_whose_model_went_with_a_missing_parent_is_an_error() {
        let model = user_model();
        let with = Context {
            directory: "/work/p",
            parent_model: Some(&model),
        };
        let info = MessageInfo::Assistant(assistant());
        let stored = encode(&info, &with).unwrap();
        let err = decode(&row_of(&info, &stored), "/work/p", |_| None).unwrap_err();
        assert!(err.contains("user message it answers"), "{err}");
    }
}
