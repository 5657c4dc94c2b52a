//! Starting or reaching one configured MCP server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use warden_tool::config::McpServerConfig;

use crate::McpError;

/// A live connection to one server.
pub type Connection = RunningService<RoleClient, ()>;

/// Start a local server (its environment is exactly what the config names)
/// or connect to a remote one, and complete the MCP handshake.
pub async fn connect(name: &str, config: &McpServerConfig) -> Result<Connection, McpError> {
    let failed = |message: String| McpError::Connect {
        server: name.to_string(),
        message,
    };
    match config {
        McpServerConfig::Local {
            command,
            environment,
            cwd,
            ..
        } => {
            let Some((program, args)) = command.split_first() else {
                return Err(failed("no command given".into()));
            };
            let program = resolve(program).ok_or_else(|| {
                failed(format!(
                    "cannot find the program {program:?} (looked in PATH); give its full path"
                ))
            })?;
            let mut cmd = tokio::process::Command::new(&program);
            cmd.args(args).env_clear().envs(environment);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| failed(format!("cannot start {}: {e}", program.display())))?;
            ().serve(transport)
                .await
                .map_err(|e| failed(format!("the MCP handshake failed: {e}")))
        }
        McpServerConfig::Remote { url, headers, .. } => {
            // reqwest 0.13 is built without a TLS provider of its own; ring is
            // the one warden already uses. Installing twice is harmless.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut custom = HashMap::new();
            for (k, v) in headers {
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| failed(format!("header {k:?}: {e}")))?;
                let value = http::HeaderValue::from_str(v)
                    .map_err(|e| failed(format!("header {k:?}: {e}")))?;
                custom.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom),
            );
            ().serve(transport)
                .await
                .map_err(|e| failed(format!("the MCP handshake with {url} failed: {e}")))
        }
    }
}

/// A program named without a directory is looked up in warden's own `PATH`
/// (the server's environment may have none).
fn resolve(program: &str) -> Option<PathBuf> {
    let path = Path::new(program);
    if path.components().count() > 1 {
        return path.exists().then(|| path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}
