//! MCP servers as tools in warden sessions.
//!
//! [`McpTools`] is a [`ToolSource`] of each configured server's tools,
//! offered under `SERVER_TOOL` beside the plugin runtime's in the session's
//! [`Registry`](warden_tool::Registry), so a call to one goes
//! through the same boundary as any other tool: the permission check
//! (`SERVER_*` defaults to `ask`, see `warden_core::agent`), before and
//! after hooks, and the audit trail. Only the call itself differs: it is
//! sent to the server instead of a WebAssembly guest. The servers are not
//! sandboxed by warden; a local one's environment is only what the config
//! names.

mod connect;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use serde_json::{Value, json};
use warden_tool::config::{McpServerConfig, ToolSettings};
use warden_tool::{
    CallContext, CallObserver, GuestError, GuestRef, PatternSource, ToolDef, ToolOutput, ToolSource,
};

use crate::McpError;

/// The plugin name of an MCP server's tools, in audit rows and errors.
pub fn guest_name(server: &str) -> String {
    format!("mcp:{server}")
}

/// The most tools one server may offer (as for a plugin, bounded so a
/// server cannot flood every request to the model).
pub const MAX_TOOLS: usize = 256;
/// The largest parameter schema of one tool, as JSON text.
pub const MAX_SCHEMA: usize = 32 * 1024;
/// The longest description of one tool.
pub const MAX_DESCRIPTION: usize = 8 * 1024;

struct Server {
    name: String,
    connection: connect::Connection,
    timeout: Duration,
    /// The largest result of one call accepted, in bytes.
    max_output: usize,
    /// The server's tools as warden offers them, with the server's own names.
    tools: Vec<(ToolDef, String)>,
}

/// Every configured MCP server's tools. It has no hooks: hooks come from
/// the plugin runtime, and run around these calls as around any other.
pub struct McpTools {
    servers: Vec<Server>,
}

impl McpTools {
    /// Connect to every enabled server of the config's `mcp` and list its
    /// tools, each within its `startup_timeout_ms`; `offered` are the tools
    /// the session's other sources offer. A server that cannot be
    /// reached in time, offers more than warden takes, or offers a tool
    /// whose id would collide with another's is an error naming it: a
    /// session must not quietly run without tools its operator configured,
    /// nor with a rule written for one tool applying to another.
    pub async fn connect(
        offered: &[ToolDef],
        configured: &BTreeMap<String, McpServerConfig>,
    ) -> Result<McpTools, McpError> {
        // Every id already offered, and whose it is.
        let mut taken: BTreeMap<String, String> = offered
            .iter()
            .map(|t| (t.id.clone(), format!("plugin {}", t.guest.plugin)))
            .collect();
        let mut servers = Vec::new();
        for (name, server) in configured.iter().filter(|(_, s)| s.enabled()) {
            let failed = |message: String| McpError::Connect {
                server: name.clone(),
                message,
            };
            let startup = server.startup_timeout_ms();
            let (connection, listed) = tokio::time::timeout(
                Duration::from_millis(startup),
                async {
                    let connection = connect::connect(name, server).await?;
                    let listed = connection
                        .list_all_tools()
                        .await
                        .map_err(|e| failed(format!("cannot list its tools: {e}")))?;
                    Ok::<_, McpError>((connection, listed))
                },
            )
            .await
            .map_err(|_| {
                failed(format!(
                    "it did not start and list its tools within {startup} ms (startup_timeout_ms)"
                ))
            })??;
            if listed.len() > MAX_TOOLS {
                return Err(failed(format!(
                    "it offers {} tools; warden takes at most {MAX_TOOLS} from one server",
                    listed.len()
                )));
            }
            let hash = server_identity(&connection);
            let mut tools = Vec::new();
            for t in listed {
                let remote = t.name.to_string();
                let shown = warden_protocol::text::shown(&remote);
                let schema =
                    serde_json::to_string(&*t.input_schema).map_or(usize::MAX, |s| s.len());
                if schema > MAX_SCHEMA {
                    return Err(failed(format!(
                        "its tool {shown:?} has a parameter schema of {schema} bytes; at most {} KiB",
                        MAX_SCHEMA / 1024
                    )));
                }
                if t.description.as_deref().map_or(0, str::len) > MAX_DESCRIPTION {
                    return Err(failed(format!(
                        "its tool {shown:?} has a description over {} KiB",
                        MAX_DESCRIPTION / 1024
                    )));
                }
                let def = tool_def(name, server, &hash, &t);
                if let Some(other) = taken.insert(
                    def.id.clone(),
                    format!("tool {shown:?} of MCP server {name}"),
                ) {
                    return Err(failed(format!(
                        "its tool {shown:?} would be offered as {}, which is already {other}'s; a rule written for one would apply to the other. Rename one, or disable this server",
                        def.id
                    )));
                }
                tools.push((def, remote));
            }
            servers.push(Server {
                name: name.clone(),
                connection,
                timeout: Duration::from_millis(server.timeout_ms()),
                max_output: server.max_output_bytes(),
                tools,
            });
        }
        Ok(McpTools { servers })
    }

    fn find(&self, tool: &ToolDef) -> Option<(&Server, &str)> {
        self.servers.iter().find_map(|s| {
            s.tools
                .iter()
                .find(|(d, _)| d.is(tool))
                .map(|(_, remote)| (s, remote.as_str()))
        })
    }
}

/// What the server says it is, standing where a plugin's hash stands.
fn server_identity(connection: &connect::Connection) -> String {
    match connection.peer_info().and_then(|i| i.server_info.clone()) {
        Some(i) => format!("mcp-server:{}@{}", i.name, i.version),
        None => "mcp-server:unnamed".into(),
    }
}

/// A model-safe tool id: the server's name, `_`, the tool's name with
/// anything but letters, digits, `_` and `-` turned into `_`.
fn tool_id(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{server}_{tool}")
}

fn tool_def(
    server: &str,
    config: &McpServerConfig,
    hash: &str,
    tool: &rmcp::model::Tool,
) -> ToolDef {
    let id = tool_id(server, &tool.name);
    let settings: ToolSettings = config
        .tools()
        .get(tool.name.as_ref())
        .cloned()
        .unwrap_or_default();
    let pattern = if let Some(arg) = settings.path_arg {
        PatternSource::Path(arg)
    } else if let Some(arg) = settings.url_arg {
        PatternSource::Url(arg)
    } else {
        PatternSource::None
    };
    ToolDef {
        permission: settings.permission.unwrap_or_else(|| id.clone()),
        id,
        description: tool
            .description
            .as_deref()
            .map(str::to_string)
            .or_else(|| tool.title.clone())
            .unwrap_or_default(),
        parameters: Value::Object((*tool.input_schema).clone()),
        pattern,
        guest: GuestRef {
            plugin: guest_name(server),
            hash: hash.to_string(),
        },
        // Outside the sandbox: only a rule naming it or its server allows
        // it (`ToolDef::allowed_by`), and `SERVER_*` is asked by default.
        mapped: true,
        server: Some(server.to_string()),
    }
}

/// An MCP result as a warden tool output: text blocks joined, other blocks
/// described, structured content kept in the metadata.
fn to_output(id: &str, result: rmcp::model::CallToolResult) -> Result<ToolOutput, GuestError> {
    let text: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            other => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
                .map(|kind| format!("[{kind} content]"))
                .unwrap_or_else(|| "[content]".into()),
        })
        .collect();
    let output = text.join("\n");
    if result.is_error == Some(true) {
        return Err(GuestError::Failed(output));
    }
    let mut metadata = BTreeMap::new();
    if let Some(s) = result.structured_content {
        metadata.insert("structured".to_string(), s);
    }
    Ok(ToolOutput {
        output,
        title: id.to_string(),
        metadata: json!(metadata),
    })
}

#[async_trait::async_trait]
impl ToolSource for McpTools {
    fn tools(&self) -> Vec<ToolDef> {
        self.servers
            .iter()
            .flat_map(|s| s.tools.iter().map(|(d, _)| d.clone()))
            .collect()
    }

    fn offers(&self, tool: &ToolDef) -> bool {
        self.find(tool).is_some()
    }

    async fn execute(
        &self,
        tool: &ToolDef,
        _: &CallContext,
        arguments: &str,
        _: Arc<dyn CallObserver>,
    ) -> Result<ToolOutput, GuestError> {
        let Some((server, remote)) = self.find(tool) else {
            return Err(GuestError::Unavailable {
                guest: tool.guest.to_string(),
                message: "no MCP server offers it".into(),
            });
        };
        let guest = guest_name(&server.name);
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(GuestError::InvalidArguments(
                    "the arguments must be a JSON object".into(),
                ));
            }
        };
        let request = CallToolRequestParams::new(remote.to_string()).with_arguments(args);
        match tokio::time::timeout(server.timeout, server.connection.call_tool(request)).await {
            Err(_) => Err(GuestError::Timeout {
                guest,
                limit_ms: server.timeout.as_millis() as u64,
            }),
            Ok(Err(e)) => Err(GuestError::Unavailable {
                guest,
                message: e.to_string(),
            }),
            Ok(Ok(result)) => {
                let output = to_output(&tool.id, result)?;
                let size = output.output.len() + output.metadata.to_string().len();
                if size > server.max_output {
                    return Err(GuestError::OutputTooLarge {
                        guest,
                        size,
                        limit: server.max_output,
                    });
                }
                Ok(output)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_ids_are_prefixed_and_model_safe() {
        assert_eq!(tool_id("everything", "echo"), "everything_echo");
        assert_eq!(tool_id("fs", "read.file/v2"), "fs_read_file_v2");
    }

    #[test]
    fn results_become_outputs() {
        let mut ok = rmcp::model::CallToolResult::success(vec![
            ContentBlock::text("a"),
            ContentBlock::text("b"),
        ]);
        ok.structured_content = Some(json!({"n": 1}));
        assert_eq!(
            to_output("s_t", ok).unwrap(),
            ToolOutput {
                output: "a\nb".into(),
                title: "s_t".into(),
                metadata: json!({"structured": {"n": 1}}),
            }
        );
        let failed = rmcp::model::CallToolResult::error(vec![ContentBlock::text("no such file")]);
        assert_eq!(
            to_output("s_t", failed).unwrap_err(),
            GuestError::Failed("no such file".into())
        );
    }
}
