//! How the operator configures tools: a plugin's component and grants,
//! how the rules see each tool, the built-ins' grants, MCP servers, and when
//! instances are made ahead. `warden-core` reads these as part of its
//! config; the runtime and the MCP client take them from here, without the
//! core.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything the plugin runtime loads, as the operator's config gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginSet {
    /// The plugins the config lists, in its order.
    pub plugins: Vec<PluginConfig>,
    /// Whether the built-in tools are loaded (default yes).
    pub builtins: Option<bool>,
    /// Grants replacing a built-in's own, by its name.
    pub builtin_grants: BTreeMap<String, Grants>,
    pub prepare_instances: PrepareInstances,
}

/// When the runtime makes a plugin's next instance before its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrepareInstances {
    /// For plugins whose last instantiation took longer than a small one's.
    #[default]
    Auto,
    Always,
    Never,
}

/// One MCP server: a local command warden starts, or a remote URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum McpServerConfig {
    /// A program spoken to over its stdin and stdout.
    Local {
        /// The program and its arguments, e.g. `["npx", "-y", "@modelcontextprotocol/server-everything"]`.
        command: Vec<String>,
        /// The whole environment of the process: nothing else is passed, not even `PATH`.
        #[serde(default)]
        environment: BTreeMap<String, String>,
        /// The working directory (default: warden's).
        #[serde(default)]
        cwd: Option<PathBuf>,
        #[serde(default = "enabled")]
        enabled: bool,
        /// How long one call may take, in ms (default 60000).
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// How long starting it and listing its tools may take, in ms (default 30000).
        #[serde(default)]
        startup_timeout_ms: Option<u64>,
        /// The largest result of one call accepted, in KiB (default 256).
        #[serde(default)]
        max_output_kb: Option<u64>,
        /// Per-tool settings by the server's tool name: the permission name and where its pattern comes from.
        #[serde(default)]
        tools: BTreeMap<String, ToolSettings>,
    },
    /// A server reached over streamable HTTP.
    Remote {
        url: String,
        /// Sent with every request (e.g. `Authorization`).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default = "enabled")]
        enabled: bool,
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        startup_timeout_ms: Option<u64>,
        #[serde(default)]
        max_output_kb: Option<u64>,
        #[serde(default)]
        tools: BTreeMap<String, ToolSettings>,
    },
}

fn enabled() -> bool {
    true
}

impl McpServerConfig {
    pub fn enabled(&self) -> bool {
        match self {
            McpServerConfig::Local { enabled, .. } | McpServerConfig::Remote { enabled, .. } => {
                *enabled
            }
        }
    }

    /// The per-tool settings, by the server's tool name.
    pub fn tools(&self) -> &BTreeMap<String, ToolSettings> {
        match self {
            McpServerConfig::Local { tools, .. } | McpServerConfig::Remote { tools, .. } => tools,
        }
    }

    /// How long one call may take.
    pub fn timeout_ms(&self) -> u64 {
        match self {
            McpServerConfig::Local { timeout_ms, .. }
            | McpServerConfig::Remote { timeout_ms, .. } => timeout_ms.unwrap_or(60_000),
        }
    }

    /// How long starting it and listing its tools may take.
    pub fn startup_timeout_ms(&self) -> u64 {
        match self {
            McpServerConfig::Local {
                startup_timeout_ms, ..
            }
            | McpServerConfig::Remote {
                startup_timeout_ms, ..
            } => startup_timeout_ms.unwrap_or(30_000),
        }
    }

    /// The largest result of one call accepted, in bytes.
    pub fn max_output_bytes(&self) -> usize {
        let kb = match self {
            McpServerConfig::Local { max_output_kb, .. }
            | McpServerConfig::Remote { max_output_kb, .. } => max_output_kb.unwrap_or(256),
        };
        (kb as usize).saturating_mul(1024)
    }

    /// Whether its settings are usable: a program or an http(s) URL, and
    /// limits within sane bounds.
    pub fn check(&self) -> Result<(), String> {
        match self {
            McpServerConfig::Local { command, .. }
                if command.is_empty() || command[0].is_empty() =>
            {
                Err("command must name a program, e.g. [\"node\", \"server.js\"]".into())
            }
            McpServerConfig::Remote { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(format!("url {url:?} must start with http:// or https://"))
            }
            _ if !(1..=3_600_000).contains(&self.timeout_ms()) => Err(format!(
                "timeout_ms is {}; give 1 to 3600000 (an hour)",
                self.timeout_ms()
            )),
            _ if !(1..=600_000).contains(&self.startup_timeout_ms()) => Err(format!(
                "startup_timeout_ms is {}; give 1 to 600000 (ten minutes)",
                self.startup_timeout_ms()
            )),
            _ if !(1..=1_048_576 * 1024).contains(&self.max_output_bytes()) => {
                Err("max_output_kb must be 1 to 1048576 (1 GiB)".to_string())
            }
            _ => Ok(()),
        }
    }
}

/// One plugin: a component and what its operator grants it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The name used in rules, audit and errors.
    pub name: String,
    /// The `.wasm` component, relative to the config file.
    pub path: PathBuf,
    /// If set, the component's sha256 must match or the plugin is refused.
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub grants: Grants,
    /// Per-tool settings: the permission name and where its pattern comes from.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolSettings>,
    /// For hook plugins: let calls through when the hook fails (default false).
    #[serde(default)]
    pub fail_open: bool,
}

/// How the rules see one tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    /// The permission name (default: the tool id).
    #[serde(default)]
    pub permission: Option<String>,
    /// The argument holding a file path, matched relative to the working directory.
    #[serde(default)]
    pub path_arg: Option<String>,
    /// The argument holding a URL, matched by host.
    #[serde(default)]
    pub url_arg: Option<String>,
}

/// What a plugin may touch. Nothing is granted unless listed here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Directories to mount, relative to the session's working directory or absolute.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Environment variables passed through (by name).
    #[serde(default)]
    pub env: Vec<String>,
    /// Hosts it may reach over HTTP (`host`, `*.host`, optionally `:port`).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Linear memory, in MiB.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// Wall-clock limit per call, in ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The largest output accepted, in KiB.
    #[serde(default = "default_max_output_kb")]
    pub max_output_kb: u64,
}

fn default_memory_mb() -> u64 {
    64
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_max_output_kb() -> u64 {
    256
}

impl Default for Grants {
    fn default() -> Self {
        Grants {
            dirs: Vec::new(),
            env: Vec::new(),
            hosts: Vec::new(),
            memory_mb: default_memory_mb(),
            timeout_ms: default_timeout_ms(),
            max_output_kb: default_max_output_kb(),
        }
    }
}

/// A directory to mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// `.` is the session's working directory.
    pub path: String,
    #[serde(default)]
    pub mode: DirMode,
}

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirMode {
    #[default]
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

/// The built-in plugins' names (their grants can be replaced in `builtin_grants`).
pub const BUILTINS: &[&str] = &["read", "write", "edit", "list", "glob", "grep", "webfetch"];

impl Grants {
    /// Limits within sane bounds, so a typo cannot overflow them.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=4096).contains(&self.memory_mb) {
            return Err(format!("memory_mb is {}; give 1 to 4096", self.memory_mb));
        }
        if !(1..=3_600_000).contains(&self.timeout_ms) {
            return Err(format!(
                "timeout_ms is {}; give 1 to 3600000 (an hour)",
                self.timeout_ms
            ));
        }
        if !(1..=1_048_576).contains(&self.max_output_kb) {
            return Err(format!(
                "max_output_kb is {}; give 1 to 1048576 (1 GiB)",
                self.max_output_kb
            ));
        }
        Ok(())
    }
}

/// Every tool's permission name is one literal, unreserved name
/// ([`crate::permission_name::check_name`]).
pub fn check_tool_settings(tools: &BTreeMap<String, ToolSettings>) -> Result<(), String> {
    for (tool, settings) in tools {
        if let Some(p) = &settings.permission {
            crate::permission_name::check_name(p)
                .map_err(|e| format!("tools.{tool}.permission: {e}"))?;
        }
    }
    Ok(())
}
