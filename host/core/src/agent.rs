//! Agents: a name, a step limit, permission rules, a system prompt.
//!
//! The built-in agent is `build` (every tool, doom loops asked about). The
//! config adds agents or changes `build`; each agent's rules are the
//! defaults, then the config's global rules, then its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use warden_protocol::{ModelRef, Rule};

use crate::config::Config;
use crate::error::{CoreError, Result};
use crate::permission;
use warden_llm::Models;

/// The agent used when nothing names one.
pub const DEFAULT_AGENT: &str = "build";

/// One agent, resolved from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub name: String,
    pub description: String,
    /// The most model steps per prompt.
    pub steps: Option<u32>,
    /// The operator's rules (defaults, then global config rules, then the
    /// agent's own) and the restrictions an untrusted project config adds.
    pub policy: Arc<permission::Policy>,
    pub system: Option<String>,
    pub model: Option<ModelRef>,
}

/// The configured agents.
#[derive(Debug, Clone)]
pub struct Agents {
    by_name: BTreeMap<String, Agent>,
    default: String,
}

impl Agents {
    /// Build the agents of a config.
    pub fn from_config(config: &Config) -> Result<Agents> {
        let global = match &config.permission {
            Some(v) => permission::rules_from_config(v).map_err(CoreError::Config)?,
            None => Vec::new(),
        };
        let mut by_name = BTreeMap::new();
        let mut names: Vec<&str> = config.agent.keys().map(String::as_str).collect();
        if !names.contains(&DEFAULT_AGENT) {
            names.push(DEFAULT_AGENT);
        }
        for name in names {
            let cfg = config.agent.get(name).cloned().unwrap_or_default();
            let mut rules = permission::defaults();
            // An MCP server runs outside warden's sandbox: its tools are asked
            // about unless the config's own rules say otherwise.
            rules.extend(config.mcp.keys().map(|server| Rule {
                permission: format!("{server}_*"),
                pattern: "*".into(),
                action: warden_protocol::Action::Ask,
            }));
            rules.extend(global.iter().cloned());
            if let Some(v) = &cfg.permission {
                rules.extend(
                    permission::rules_from_config(v)
                        .map_err(|e| CoreError::Config(format!("agent.{name}: {e}")))?,
                );
            }
            let mut restrict = config.restrictions.rules.clone();
            if let Some(own) = config.restrictions.agents.get(name) {
                restrict.extend(own.iter().cloned());
            }
            let model = match &cfg.model {
                Some(m) => Some(Models::parse(m)?),
                None => None,
            };
            by_name.insert(
                name.to_string(),
                Agent {
                    name: name.to_string(),
                    description: cfg.description.clone().unwrap_or_else(|| {
                        "Works in the project with the tools it is allowed.".into()
                    }),
                    steps: cfg.steps,
                    policy: Arc::new(permission::Policy {
                        operator: rules,
                        restrict,
                    }),
                    system: cfg.system.clone(),
                    model,
                },
            );
        }
        let default = config
            .default_agent
            .clone()
            .unwrap_or_else(|| DEFAULT_AGENT.to_string());
        if !by_name.contains_key(&default) {
            return Err(CoreError::Config(format!(
                "default_agent {default:?} is not a configured agent"
            )));
        }
        Ok(Agents { by_name, default })
    }

    /// An agent by name.
    pub fn get(&self, name: &str) -> Result<&Agent> {
        self.by_name
            .get(name)
            .ok_or_else(|| CoreError::UnknownAgent {
                name: name.to_string(),
                known: self.by_name.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }

    /// The default agent's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// Every agent, by name.
    pub fn all(&self) -> impl Iterator<Item = &Agent> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::Action;

    #[test]
    fn agent_rules_layer_defaults_global_and_own() {
        let config = Config::parse(
            r#"{"permission": {"read": "deny"}, "agent": {"build": {"steps": 3, "permission": {"read": {"*.md": "allow"}}}}}"#,
        )
        .unwrap();
        let agents = Agents::from_config(&config).unwrap();
        let build = agents.get("build").unwrap();
        assert_eq!(build.steps, Some(3));
        assert_eq!(
            permission::evaluate("read", "a.rs", &[&build.policy.operator]).action,
            Action::Deny
        );
        assert_eq!(
            permission::evaluate("read", "a.md", &[&build.policy.operator]).action,
            Action::Allow
        );
        assert_eq!(
            permission::evaluate("doom_loop", "read", &[&build.policy.operator]).action,
            Action::Ask
        );
        assert!(
            agents
                .get("plan")
                .unwrap_err()
                .to_string()
                .contains("configured agents: build")
        );
    }
}
