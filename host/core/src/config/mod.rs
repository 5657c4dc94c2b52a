//! The one config file: model, agents, permission rules, plugins and their
//! grants. Everything has a default that works offline, so no file is
//! needed to run the demo.
//!
//! ```json
//! {
//!   "model": "scripted:./cassette.json",
//!   "permission": {"*": "allow", "doom_loop": "ask"},
//!   "agent": {"build": {"steps": 20, "permission": {"read": {"*.env": "deny"}}}},
//!   "plugins": [{"name": "slow", "path": "plugins/slow.wasm", "sha256": "…",
//!                "grants": {"dirs": [{"path": ".", "mode": "ro"}], "timeout_ms": 5000}}]
//! }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use warden_llm::providers::ProviderConfig;
use warden_llm::retry::RetryPolicy;
use warden_protocol::Rule;

pub mod layers;
pub mod trust;

pub use layers::{Loaded, Source, Sources, load_layers};
pub use warden_tool::config::{
    BUILTINS, DirGrant, DirMode, Grants, McpServerConfig, PluginConfig, PluginSet,
    PrepareInstances, ToolSettings, check_tool_settings,
};

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The model used when a prompt names none: `provider/model` or `scripted:PATH`.
    #[serde(default)]
    pub model: Option<String>,
    /// The agent used when a prompt names none (default `build`).
    #[serde(default)]
    pub default_agent: Option<String>,
    /// Rules for every agent (OpenCode's shape), before each agent's own.
    #[serde(default)]
    pub permission: Option<Value>,
    /// Agents by name.
    #[serde(default)]
    pub agent: BTreeMap<String, AgentConfig>,
    /// Plugins to load besides the built-in tools.
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// Built-in tools: `true` (default) loads them all, `false` none.
    #[serde(default)]
    pub builtins: Option<bool>,
    /// Grants for the built-in tools, by tool name, replacing their defaults.
    #[serde(default)]
    pub builtin_grants: BTreeMap<String, Grants>,
    /// Model providers by name (see [`warden_llm::providers`]).
    #[serde(default)]
    pub provider: BTreeMap<String, ProviderConfig>,
    /// How model failures are retried.
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    /// How long a permission question waits for an answer before it is
    /// refused (milliseconds; default 300000, five minutes).
    #[serde(default)]
    pub ask_timeout_ms: Option<u64>,
    #[serde(default)]
    pub experimental: Experimental,
    /// MCP servers whose tools sessions may use, by name (OpenCode's shape).
    /// Their tools are offered as `NAME_TOOL`; they are separate processes or
    /// remote services, not sandboxed by warden, so their permission
    /// defaults to `ask`.
    #[serde(default)]
    pub mcp: BTreeMap<String, McpServerConfig>,
    /// Where the ledger lives when neither `--ledger` nor `WARDEN_LEDGER`
    /// says: a SQLite file (a path, or `sqlite:PATH`) or a PostgreSQL URL
    /// (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`). Default: the
    /// data dir's `ledger.db`.
    #[serde(default)]
    pub ledger: Option<String>,
    /// Whether a plugin's next instance is made ahead of its call (`auto`,
    /// the default: for plugins whose instantiation is slow, such as Python
    /// ones; `always`; `never`). Each call still gets an instance nothing
    /// has run in; see the runtime's `prepared` module.
    #[serde(default)]
    pub prepare_instances: PrepareInstances,
    /// How `warden serve` bounds connections (an operator's setting: a
    /// project's untrusted config cannot set it).
    #[serde(default)]
    pub server: ServerSettings,
    /// Rules that may only tighten (from a project config the operator has
    /// not trusted); never read from a file as such.
    #[serde(skip)]
    pub restrictions: Restrictions,
}

/// `warden serve`'s connection bounds; each unset one keeps its default
/// (see the server's `listen` module).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Connections open at once (default 8192, and never more than the
    /// process's file limit allows).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Connections open at once from one IP address (default 1024).
    #[serde(default)]
    pub max_connections_per_peer: Option<usize>,
    /// How long a request's headers may take once begun, in ms (default 10000).
    #[serde(default)]
    pub header_timeout_ms: Option<u64>,
    /// How long a request's body may take after its headers, in ms (default 30000).
    #[serde(default)]
    pub body_timeout_ms: Option<u64>,
    /// How long a connection may wait with no request under way, in ms (default 60000).
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// The largest request header block, in bytes (default 65536; at least 8192).
    #[serde(default)]
    pub max_header_bytes: Option<usize>,
}

/// Deny and ask rules from a source that may only tighten the operator's
/// policy (see [`crate::permission::policy`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restrictions {
    /// For every agent.
    pub rules: Vec<Rule>,
    /// For one agent, by name.
    pub agents: BTreeMap<String, Vec<Rule>>,
}

/// Settings whose shape may still change.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experimental {
    /// Keep looping after a denied permission instead of stopping.
    #[serde(default)]
    pub continue_loop_on_deny: bool,
}

/// One agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    #[serde(default)]
    pub description: Option<String>,
    /// The most model steps per prompt; the last one gets no tools.
    #[serde(default)]
    pub steps: Option<u32>,
    /// The agent's own rules, after the global ones.
    #[serde(default)]
    pub permission: Option<Value>,
    /// Replaces the default system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// The agent's model, when the prompt names none.
    #[serde(default)]
    pub model: Option<String>,
}

impl Config {
    /// What the plugin runtime loads from this config: the runtime takes
    /// this, not the whole config, so it needs nothing of the core.
    pub fn plugin_set(&self) -> PluginSet {
        PluginSet {
            plugins: self.plugins.clone(),
            builtins: self.builtins,
            builtin_grants: self.builtin_grants.clone(),
            prepare_instances: self.prepare_instances,
        }
    }

    /// Read a config file. Relative plugin paths are made relative to it.
    pub fn load(path: &Path) -> Result<Config, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let value = layers::value_of(&bytes, path)?;
        Self::parse(&value.to_string()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse config text.
    pub fn parse(text: &str) -> Result<Config, String> {
        // The place of a wrong value is named (`plugins[0].grants.memory_mb: …`).
        let mut de = serde_json::Deserializer::from_str(text);
        let config: Config = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let place = e.path().to_string();
            if place == "." {
                format!("invalid config: {}", e.inner())
            } else {
                format!("invalid config: {place}: {}", e.inner())
            }
        })?;
        de.end().map_err(|e| format!("invalid config: {e}"))?;
        if config.ask_timeout_ms == Some(0) {
            return Err("ask_timeout_ms must be at least 1".into());
        }
        if let Some(p) = &config.permission {
            crate::permission::rules_from_config(p)?;
        }
        for (name, agent) in &config.agent {
            if let Some(p) = &agent.permission {
                crate::permission::rules_from_config(p)
                    .map_err(|e| format!("agent.{name}: {e}"))?;
            }
            if agent.steps == Some(0) {
                return Err(format!("agent.{name}.steps must be at least 1"));
            }
        }
        for (name, p) in &config.provider {
            warden_llm::providers::validate(name, p)
                .map_err(|e| format!("provider.{name}: {e}"))?;
        }
        let mut names = std::collections::BTreeSet::new();
        for p in &config.plugins {
            if p.name.is_empty() || !names.insert(p.name.clone()) {
                return Err(format!(
                    "plugin names must be non-empty and unique ({:?})",
                    p.name
                ));
            }
            p.grants
                .check()
                .map_err(|e| format!("plugins.{}.grants: {e}", p.name))?;
            check_tool_settings(&p.tools).map_err(|e| format!("plugins.{}.{e}", p.name))?;
        }
        for (name, server) in &config.mcp {
            // The name prefixes its tools (`NAME_TOOL`) and rules are written against it.
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(format!(
                    "mcp.{name}: a server's name may have only letters, digits and `-` (it prefixes its tools as NAME_TOOL)"
                ));
            }
            server.check().map_err(|e| format!("mcp.{name}: {e}"))?;
            check_tool_settings(server.tools()).map_err(|e| format!("mcp.{name}.{e}"))?;
        }
        for (name, g) in &config.builtin_grants {
            if !BUILTINS.contains(&name.as_str()) {
                return Err(format!(
                    "builtin_grants.{name}: there is no built-in plugin {name:?}; the built-ins are {}",
                    BUILTINS.join(", ")
                ));
            }
            g.check()
                .map_err(|e| format!("builtin_grants.{name}: {e}"))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_config_is_valid() {
        let c = Config::parse("{}").unwrap();
        assert!(c.plugins.is_empty());
        assert_eq!(Grants::default().memory_mb, 64);
    }

    #[test]
    fn mistakes_are_named() {
        assert!(
            Config::parse(r#"{"modle": "x"}"#)
                .unwrap_err()
                .contains("unknown field `modle`")
        );
        assert!(
            Config::parse(r#"{"agent": {"build": {"steps": 0}}}"#)
                .unwrap_err()
                .contains("agent.build.steps")
        );
        assert!(
            Config::parse(r#"{"agent": {"build": {"permission": {"read": "perhaps"}}}}"#)
                .unwrap_err()
                .contains("agent.build")
        );
        assert!(
            Config::parse(
                r#"{"plugins": [{"name": "a", "path": "x"}, {"name": "a", "path": "y"}]}"#
            )
            .unwrap_err()
            .contains("unique")
        );
        assert!(
            Config::parse(r#"{"plugins": [{"name": "a", "path": "x", "grants": {"dirs": [{"path": ".", "mode": "rwx"}]}}]}"#)
                .is_err()
        );
        assert!(
            Config::parse(r#"{"builtin_grants": {"wirte": {}}}"#)
                .unwrap_err()
                .contains("no built-in plugin \"wirte\"")
        );
        assert!(
            Config::parse(
                r#"{"plugins": [{"name": "a", "path": "x", "grants": {"memory_mb": 99999999999}}]}"#
            )
            .unwrap_err()
            .contains("plugins.a.grants: memory_mb")
        );
        assert!(
            Config::parse(r#"{"mcp": {"fs": {"type": "local", "command": []}}}"#)
                .unwrap_err()
                .contains("mcp.fs: command must name a program")
        );
        assert!(
            Config::parse(r#"{"mcp": {"a_b": {"type": "remote", "url": "http://x"}}}"#)
                .unwrap_err()
                .contains("mcp.a_b: a server's name")
        );
        assert!(
            Config::parse(r#"{"mcp": {"web": {"type": "remote", "url": "ftp://x"}}}"#)
                .unwrap_err()
                .contains("must start with http")
        );
        assert!(
            Config::parse(r#"{"mcp": {"web": {"type": "remote", "url": "http://x", "env": {}}}}"#)
                .unwrap_err()
                .contains("unknown field `env`")
        );
    }

    #[test]
    fn provider_config_mistakes_are_named() {
        let err = |text: &str| Config::parse(text).unwrap_err();
        assert!(
            err(r#"{"provider": {"openai": {"modles": {}}}}"#).contains("unknown field `modles`"),
            "{}",
            err(r#"{"provider": {"openai": {"modles": {}}}}"#)
        );
        let e = err(r#"{"provider": {"x": {"api": "gemini", "base_url": "http://h"}}}"#);
        assert!(
            e.contains("unknown variant `gemini`") && e.contains("openai-chat"),
            "{e}"
        );
        let e = err(r#"{"provider": {"x": {"base_url": "http://h"}}}"#);
        assert!(e.contains("provider.x: set \"api\""), "{e}");
        let e = err(r#"{"provider": {"x": {"api": "openai-chat"}}}"#);
        assert!(e.contains("provider.x: set \"base_url\""), "{e}");
        let e = err(r#"{"provider": {"x": {"api": "openai-chat", "base_url": "ftp://h"}}}"#);
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err(r#"{"provider": {"a/b": {"api": "anthropic", "base_url": "http://h"}}}"#);
        assert!(e.contains("without '/'"), "{e}");
        let e = err(
            r#"{"provider": {"openai": {"models": {"m": {"context_limit": 100, "output_limit": 100}}}}}"#,
        );
        assert!(e.contains("models.m: output_limit"), "{e}");
        let e = err(r#"{"provider": {"openai": {"models": {"m": {"prices": {"input": -1}}}}}}"#);
        assert!(e.contains("models.m.prices"), "{e}");
        let e = err(r#"{"provider": {"openai": {"models": {"m": {"prices": {"inptu": 1}}}}}}"#);
        assert!(e.contains("unknown field `inptu`"), "{e}");
        let e = err(r#"{"provider": {"openai": {"idle_timeout_ms": 0}}}"#);
        assert!(e.contains("at least 1 ms"), "{e}");
    }
}
