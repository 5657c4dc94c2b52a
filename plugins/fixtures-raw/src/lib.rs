//! A tool plugin written against the raw bindings, for the cases the SDK
//! makes impossible: metadata that is not JSON, and a tool id the host must
//! refuse to call through another plugin.

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "tool-plugin",
});

use exports::warden::plugin::tool::Guest;
use warden::plugin::types::{CallContext, ToolError, ToolOutput, ToolSpec};

struct Raw;

impl Guest for Raw {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            id: "bad_meta".into(),
            description: "Returns metadata that is not JSON.".into(),
            parameters: r#"{"type": "object", "properties": {}}"#.into(),
        }]
    }

    fn execute(
        _ctx: CallContext,
        tool: String,
        _arguments: String,
    ) -> Result<ToolOutput, ToolError> {
        match tool.as_str() {
            "bad_meta" => Ok(ToolOutput {
                output: "fine".into(),
                title: "bad".into(),
                metadata: "{not json".into(),
            }),
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

export!(Raw);
