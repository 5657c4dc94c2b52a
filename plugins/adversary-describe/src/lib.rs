//! Describes 65 tools: one more than a plugin may provide.

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "tool-plugin",
});

use exports::warden::plugin::tool::Guest;
use warden::plugin::types::{CallContext, ToolError, ToolOutput, ToolSpec};

struct Many;

impl Guest for Many {
    fn describe() -> Vec<ToolSpec> {
        (0..65)
            .map(|i| ToolSpec {
                id: format!("t{i}"),
                description: "one of too many".into(),
                parameters: r#"{"type": "object"}"#.into(),
            })
            .collect()
    }

    fn execute(_: CallContext, _: String, _: String) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("never loaded".into()))
    }
}

export!(Many);
