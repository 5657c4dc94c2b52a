//! Tools as the core and the runtimes see them: definitions, the seams
//! behind which guests run ([`ToolSource`] for tools, [`HookHost`] for
//! hooks, composed in a [`Registry`]), what a guest call sees and returns,
//! and the plugin config and grants ([`config`]). The host boundary
//! that checks permission and runs hooks around every call is warden-core's
//! `boundary`.
//!
//! This crate is what a tool runtime links instead of the core: the core
//! never knows how a guest runs (`warden-runtime` implements both seams
//! with wasmtime, `warden-mcp` a tool source over MCP; tests implement them
//! with plain Rust), and a runtime
//! never builds the ledger, the loop or a database driver.

pub mod config;
pub mod globs;
pub mod permission_name;
pub mod registry;
pub mod url;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use warden_protocol::{CallId, MessageId, SessionId};

pub use globs::ToolGlobs;
pub use registry::{Hook, HookCall, HookHost, Registry, ToolSource};

/// Where a tool's permission pattern comes from in its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "from", content = "arg")]
pub enum PatternSource {
    /// No pattern: rules match it as `*`.
    None,
    /// A file path argument, matched relative to the working directory.
    Path(String),
    /// A URL argument, matched by its host.
    Url(String),
    /// Any string argument, matched as is.
    Arg(String),
}

/// A guest's identity, for audit and error messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestRef {
    /// The plugin's name in the config.
    pub plugin: String,
    /// The sha256 of its component.
    pub hash: String,
}

impl std::fmt::Display for GuestRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugin {} ({})",
            self.plugin,
            &self.hash[..self.hash.len().min(12)]
        )
    }
}

/// A tool the model may be offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub id: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    /// The permission rules are written against (e.g. `edit` for write and edit).
    pub permission: String,
    pub pattern: PatternSource,
    pub guest: GuestRef,
    /// Whether the operator said how the rules see this tool (a permission
    /// and which argument is its path or URL). An unmapped tool is never
    /// allowed by a rule for `*`: only a rule naming its permission allows
    /// it, otherwise it is asked about.
    #[serde(default)]
    pub mapped: bool,
    /// The MCP server this tool is from, when it is one's: a native process
    /// or remote service outside warden's sandbox. Such a tool is allowed
    /// only by a rule naming it or its server (`SERVER_*`), never by `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl ToolDef {
    /// Whether `other` is this very tool: the same id from the same guest.
    pub fn is(&self, other: &ToolDef) -> bool {
        self.id == other.id && self.guest == other.guest
    }

    /// Whether an `allow` by a rule for `permission` may let this tool run
    /// unasked: any rule may for a mapped, sandboxed tool; for an unmapped
    /// one only a rule naming its permission; for an MCP server's only a
    /// rule naming the tool or its server.
    pub fn allowed_by(&self, permission: &str) -> bool {
        if let Some(server) = &self.server {
            return permission == self.permission
                || permission
                    .strip_prefix(server.as_str())
                    .is_some_and(|rest| rest.starts_with('_'));
        }
        self.mapped || permission == self.permission
    }
}

/// A tool.execute.before / after hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookDef {
    pub guest: GuestRef,
    /// Tool id globs the before stage wants.
    pub before: ToolGlobs,
    /// Tool id globs the after stage wants.
    pub after: ToolGlobs,
    /// Let the call through when the hook itself fails (default: block).
    pub fail_open: bool,
}

/// Where a guest call comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallContext {
    pub session_id: SessionId,
    pub message_id: MessageId,
    pub call_id: CallId,
    pub agent: String,
    /// The session's working directory (absolute).
    pub directory: String,
}

/// A tool's successful result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub output: String,
    pub title: String,
    pub metadata: Value,
}

/// What a before hook decided.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeDecision {
    Allow,
    Block(String),
    Rewrite(String),
    Ask(String),
}

/// What an after hook decided.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterDecision {
    Keep,
    Rewrite(ToolOutput),
}

/// How a guest call failed. Each message names the guest and the cause.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GuestError {
    /// The tool rejected its arguments.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and reported a failure.
    #[error("{0}")]
    Failed(String),
    /// The tool was refused something it asked for mid-call.
    #[error("denied: {0}")]
    Denied(String),
    /// The guest trapped (panic, out of bounds, stack overflow, ...).
    #[error("{guest} crashed: {message}")]
    Trap { guest: String, message: String },
    /// The guest ran past its time limit.
    #[error("{guest} ran past its time limit of {limit_ms} ms and was stopped")]
    Timeout { guest: String, limit_ms: u64 },
    /// The guest asked for more memory than granted.
    #[error("{guest} ran out of memory (limit {limit_mb} MiB)")]
    OutOfMemory { guest: String, limit_mb: u64 },
    /// The guest made the host hold more on its behalf (resource-table
    /// entries, HTTP fields, permission asks...) than one call's budget.
    #[error("{guest} went over its host resource budget: {message}")]
    OverBudget { guest: String, message: String },
    /// The guest returned more than its output cap.
    #[error("{guest} returned {size} bytes, over its output cap of {limit} bytes")]
    OutputTooLarge {
        guest: String,
        size: usize,
        limit: usize,
    },
    /// The guest returned something that is not what the contract says.
    #[error("{guest} returned invalid data: {message}")]
    InvalidOutput { guest: String, message: String },
    /// The guest could not be started (not loaded, failed integrity, ...).
    #[error("{guest} is unavailable: {message}")]
    Unavailable { guest: String, message: String },
}

/// What a running guest may ask of the host (the WIT `host` interface).
#[async_trait::async_trait]
pub trait CallObserver: Send + Sync {
    /// The guest updated its title/metadata.
    fn progress(&self, title: Option<String>, metadata: Value);
    /// The guest asks a permission mid-call; `Err` carries the denial.
    async fn ask(
        &self,
        permission: String,
        patterns: Vec<String>,
        metadata: Value,
    ) -> Result<(), String>;
    /// The guest is about to send an HTTP request to `url` (canonical, see
    /// [`url`]): the first URL of a call and every redirect it follows.
    /// The rules of a tool whose pattern is a URL are checked on its host;
    /// `Err` carries the refusal. The plugin's `hosts` grant is checked
    /// separately, by the runtime.
    async fn check_url(&self, url: &url::Canonical) -> Result<(), String> {
        let _ = url;
        Ok(())
    }

    /// What guest `plugin` printed on `stream` (`stdout` or `stderr`) during
    /// the call, already capped; kept with the call for `warden trace`.
    fn guest_output(&self, _plugin: &str, _stream: &str, _text: String) {}
}

/// An observer for a call nobody attends (benchmarks, tests, tools run
/// outside a session): progress is dropped and every question is refused.
pub struct Unattended;

#[async_trait::async_trait]
impl CallObserver for Unattended {
    fn progress(&self, _: Option<String>, _: Value) {}
    async fn ask(&self, _: String, _: Vec<String>, _: Value) -> Result<(), String> {
        Err("nobody is there to answer".into())
    }
}

/// The permission pattern of a call, from its arguments.
pub fn pattern_of(source: &PatternSource, args: &Value, directory: &str) -> String {
    let arg = |name: &str| args.get(name).and_then(Value::as_str).map(str::to_string);
    match source {
        PatternSource::None => "*".into(),
        PatternSource::Arg(name) => arg(name).unwrap_or_else(|| "*".into()),
        PatternSource::Path(name) => match arg(name) {
            Some(p) => relative_path(&p, directory),
            None => "*".into(),
        },
        // The canonical host (see [`url`]); a URL that cannot be
        // canonicalised keeps its text, and the HTTP gate refuses to send it.
        PatternSource::Url(name) => match arg(name) {
            Some(u) => url::canonical(&u).map_or(u, |c| c.host.to_string()),
            None => "*".into(),
        },
    }
}

/// Where a path argument really leads, as the host sees it: lexically
/// normalised, then with symlinks resolved as far as the path exists (a link
/// inside the project pointing elsewhere is judged by where it points).
pub fn real_path(path: &str, directory: &str) -> std::path::PathBuf {
    use std::path::{Component, Path, PathBuf};
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        Path::new(directory).join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    // The deepest part that exists, resolved; the rest appended as given.
    let mut existing = out.clone();
    let mut rest = Vec::new();
    while !existing.as_os_str().is_empty() {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut resolved = real;
            for part in rest.iter().rev() {
                resolved.push(part);
            }
            return resolved;
        }
        match existing.file_name() {
            Some(name) => rest.push(name.to_os_string()),
            None => break,
        }
        existing.pop();
    }
    out
}

/// The rule pattern of a path: relative to the working directory when the
/// path really is inside it, else absolute.
fn relative_path(path: &str, directory: &str) -> String {
    let real = real_path(path, directory);
    let base =
        std::fs::canonicalize(directory).unwrap_or_else(|_| std::path::PathBuf::from(directory));
    match real.strip_prefix(&base) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        Ok(_) => ".".into(),
        Err(_) => real.to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_come_from_the_arguments() {
        let dir = "/w/p";
        let path = PatternSource::Path("filePath".into());
        assert_eq!(
            pattern_of(&path, &json!({"filePath": "src/a.rs"}), dir),
            "src/a.rs"
        );
        assert_eq!(
            pattern_of(&path, &json!({"filePath": "/w/p/src/../b.rs"}), dir),
            "b.rs"
        );
        assert_eq!(
            pattern_of(&path, &json!({"filePath": "../../etc/passwd"}), dir),
            "/etc/passwd"
        );
        assert_eq!(pattern_of(&path, &json!({}), dir), "*");
        let url = PatternSource::Url("url".into());
        assert_eq!(
            pattern_of(
                &url,
                &json!({"url": "https://API.example.com:8443/x?y"}),
                dir
            ),
            "api.example.com"
        );
        assert_eq!(
            pattern_of(&url, &json!({"url": "http://2130706433/"}), dir),
            "127.0.0.1"
        );
        assert_eq!(
            pattern_of(&url, &json!({"url": "http://[::1]:80/"}), dir),
            "::1"
        );
        assert_eq!(pattern_of(&PatternSource::None, &json!({"a": 1}), dir), "*");
    }
}
