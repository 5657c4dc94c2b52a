//! `warden mcp`: every loaded tool served to an MCP client over stdio.
//! stdout carries the protocol only; logs go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use warden_core::config::McpServerConfig;

use crate::{Common, app};

#[derive(clap::Args)]
pub struct McpArgs {
    /// The directory calls work in (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

pub async fn mcp(args: McpArgs) -> Result<ExitCode> {
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let app = app::build(&args.common, &dir).await?;
    warden_mcp::serve_stdio(app.core, dir).await?;
    Ok(ExitCode::SUCCESS)
}

/// One line of `plugin list` for a configured MCP server: what runs, and
/// plainly that warden does not sandbox it.
pub fn describe_server(name: &str, server: &McpServerConfig) -> String {
    let what = match server {
        McpServerConfig::Local {
            command,
            environment,
            ..
        } => format!(
            "local command `{}`  env [{}]",
            command.join(" "),
            environment.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        McpServerConfig::Remote { url, .. } => format!("remote {url}"),
    };
    format!(
        "{} (MCP server{})  {what}  NOT sandboxed by warden: it runs with your user's rights, outside every grant; its tools {name}_* ask before each call unless a rule allows them",
        warden_mcp::client::guest_name(name),
        if server.enabled() { "" } else { ", disabled" },
    )
}
