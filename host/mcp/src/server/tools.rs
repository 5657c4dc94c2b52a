//! warden's tool definitions as MCP sees them, and a call's outcome as an
//! MCP result.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use warden_core::boundary::CallOutcome;
use warden_core::tool::{PatternSource, ToolDef};

/// The shape of every structured result: what a warden tool returns.
fn output_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "output": {"type": "string", "description": "What the tool returned, as the model would see it."},
            "title": {"type": "string", "description": "A one-line summary of the call."},
            "metadata": {"description": "Tool-specific details."}
        },
        "required": ["output", "title", "metadata"]
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// One warden tool as an MCP tool: its id, description and argument schema,
/// a title naming the plugin that runs it, and hints drawn from the
/// permission its rules are written against.
pub fn to_mcp(def: &ToolDef) -> Tool {
    let input = match &def.parameters {
        Value::Object(map) => map.clone(),
        // A tool with no usable schema still takes an object of arguments.
        _ => {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        }
    };
    let annotations = ToolAnnotations::with_title(format!("{} ({})", def.id, def.guest.plugin))
        .read_only(matches!(
            def.permission.as_str(),
            "read" | "list" | "glob" | "grep"
        ))
        .destructive(def.permission == "edit")
        .open_world(matches!(def.pattern, PatternSource::Url(_)));
    Tool::new(def.id.clone(), def.description.clone(), Arc::new(input))
        .with_title(format!("{} ({})", def.id, def.guest.plugin))
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations)
}

/// A call's outcome as an MCP result. A refused or failed call is a tool
/// error the calling model can read (not a protocol error), naming why.
pub fn result(outcome: CallOutcome) -> CallToolResult {
    match outcome {
        CallOutcome::Completed { output, .. } => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(output.output.clone())]);
            r.structured_content = Some(json!({
                "output": output.output,
                "title": output.title,
                "metadata": output.metadata,
            }));
            r
        }
        CallOutcome::Failed { failure, .. } => {
            CallToolResult::error(vec![ContentBlock::text(failure.to_string())])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::boundary::CallFailure;
    use warden_core::tool::{GuestRef, ToolOutput};

    fn def() -> ToolDef {
        ToolDef {
            id: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"filePath": {"type": "string"}}}),
            permission: "read".into(),
            pattern: PatternSource::Path("filePath".into()),
            guest: GuestRef {
                plugin: "read".into(),
                hash: "abc".into(),
            },
            mapped: true,
            server: None,
        }
    }

    #[test]
    fn a_tool_keeps_its_schema_and_names_its_plugin() {
        let tool = serde_json::to_value(to_mcp(&def())).unwrap();
        assert_eq!(tool["name"], "read");
        assert_eq!(tool["title"], "read (read)");
        assert_eq!(tool["description"], "Read a file");
        assert_eq!(
            tool["inputSchema"]["properties"]["filePath"]["type"],
            "string"
        );
        assert_eq!(
            tool["outputSchema"]["required"],
            json!(["output", "title", "metadata"])
        );
        assert_eq!(tool["annotations"]["readOnlyHint"], true);
        assert_eq!(tool["annotations"]["destructiveHint"], false);
    }

    #[test]
    fn outcomes_become_results() {
        let done = result(CallOutcome::Completed {
            input: json!({}),
            output: ToolOutput {
                output: "hi".into(),
                title: "a.txt".into(),
                metadata: json!({"lines": 1}),
            },
        });
        assert_eq!(done.is_error, Some(false));
        assert_eq!(
            done.structured_content,
            Some(json!({"output": "hi", "title": "a.txt", "metadata": {"lines": 1}}))
        );
        let failed = result(CallOutcome::Failed {
            input: json!({}),
            failure: CallFailure::Blocked {
                plugin: "guard".into(),
                reason: "no".into(),
            },
        });
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(
            failed.content[0].as_text().map(|t| t.text.as_str()),
            Some("blocked by hook guard: no")
        );
    }
}
