//! `warden plugin verify`: every plugin loads, and what in the config would
//! quietly not do what it says is flagged: rules naming a permission no
//! loaded tool uses (dead rules), tools the rules cannot see properly (no
//! permission mapping), plugins not pinned by sha256, and directory grants
//! that cover warden's own files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use warden_core::Config;
use warden_core::permission::{rules_from_config, wildcard};
use warden_runtime::WasmHost;
use warden_runtime::plugin::LoadedPlugin;

/// One thing `verify` flags.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// `dead-rule`, `unmapped-tool`, `unpinned`, `covers-warden-files`.
    pub kind: &'static str,
    /// The plugin it is about, if any.
    pub plugin: Option<String>,
    pub message: String,
}

/// Permissions something other than a tool asks about.
const HOST_PERMISSIONS: &[&str] = &["doom_loop", "hook.before", "hook.after"];

/// What the config's rules, plugins and grants would quietly get wrong.
pub fn findings(
    config: &Config,
    host: &WasmHost,
    data_dir: &Path,
    config_path: Option<&Path>,
    cwd: &Path,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let used: BTreeSet<String> = host
        .plugins()
        .iter()
        .flat_map(|p| p.tools().iter().map(|t| t.permission.clone()))
        .chain(HOST_PERMISSIONS.iter().map(|s| s.to_string()))
        .collect();
    let mcp: Vec<String> = config.mcp.keys().map(|k| format!("{k}_")).collect();
    let mut rule_sets: Vec<(String, &serde_json::Value)> = Vec::new();
    if let Some(p) = &config.permission {
        rule_sets.push(("permission".into(), p));
    }
    for (name, agent) in &config.agent {
        if let Some(p) = &agent.permission {
            rule_sets.push((format!("agent.{name}.permission"), p));
        }
    }
    for (place, value) in rule_sets {
        let Ok(rules) = rules_from_config(value) else {
            continue;
        };
        for rule in rules {
            let live = used.iter().any(|u| wildcard::matches(&rule.permission, u))
                || mcp.iter().any(|m| rule.permission.starts_with(m.as_str()));
            if !live {
                out.push(Finding {
                    kind: "dead-rule",
                    plugin: None,
                    message: format!(
                        "{place}: the rule `{} {} {}` names a permission no loaded tool uses ({}), so it never decides anything",
                        rule.permission,
                        rule.pattern,
                        rule.action.as_str(),
                        used.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
    }
    for p in host.plugins() {
        if p.builtin {
            continue;
        }
        let pinned = match config.plugins.iter().find(|c| *c.name == *p.name) {
            Some(c) => c.sha256.is_some(),
            None => !is_dropped_in(p, data_dir) || pinned_in_dir(p),
        };
        if !pinned {
            out.push(Finding {
                kind: "unpinned",
                plugin: Some(p.name.to_string()),
                message: format!(
                    "{} is not pinned by sha256: any component at its path is loaded; add \"sha256\": \"{}\" to its config entry",
                    p.name, p.hash
                ),
            });
        }
        for t in p.tools() {
            if !t.mapped {
                out.push(Finding {
                    kind: "unmapped-tool",
                    plugin: Some(p.name.to_string()),
                    message: format!(
                        "tool {} of {} has no permission mapping: rules see it as `{}` with no path or URL, and a `*` rule never allows it; map it with \"tools\": {{\"{}\": {{\"permission\": …, \"path_arg\" or \"url_arg\": …}}}} (or `plugin add --tool {}:PERMISSION[:path=ARG]`)",
                        t.id, p.name, t.permission, t.id, t.id
                    ),
                });
            }
        }
        out.extend(own_files(p, data_dir, config_path, cwd));
    }
    out
}

fn is_dropped_in(p: &LoadedPlugin, data_dir: &Path) -> bool {
    p.path
        .as_ref()
        .is_some_and(|path| path.starts_with(crate::app::plugin_dir(data_dir)))
}

/// A plugin installed by `plugin add` carries its pin in its manifest.
fn pinned_in_dir(p: &LoadedPlugin) -> bool {
    let Some(manifest) = p
        .path
        .as_ref()
        .and_then(|w| w.parent())
        .map(|d| d.join("plugin.json"))
    else {
        return false;
    };
    std::fs::read_to_string(manifest)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|m| m["sha256"].is_string())
}

/// Directory grants that contain warden's own files: the gate keeps them
/// out whatever the grant says, but the grant says more than it gives.
fn own_files(
    p: &LoadedPlugin,
    data_dir: &Path,
    config_path: Option<&Path>,
    cwd: &Path,
) -> Vec<Finding> {
    let data = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let own: Vec<PathBuf> = ["ledger.db", "cache", "plugins"]
        .iter()
        .map(|n| data.join(n))
        .collect();
    // The config may be read by design; only a grant to write it is flagged.
    let config = config_path.and_then(|c| std::fs::canonicalize(c).ok());
    let mut out = Vec::new();
    for d in &p.grants.dirs {
        let mut own = own.clone();
        if d.mode == warden_core::config::DirMode::ReadWrite
            && let Some(c) = &config
        {
            own.push(c.clone());
        }
        let Ok(real) = warden_runtime::sandbox::resolve_dir(&d.path, cwd.to_str(), &[]) else {
            continue;
        };
        let covered: Vec<String> = own
            .iter()
            .filter(|o| o.starts_with(&real))
            .map(|o| o.display().to_string())
            .collect();
        if !covered.is_empty() {
            out.push(Finding {
                kind: "covers-warden-files",
                plugin: Some(p.name.to_string()),
                message: format!(
                    "{}'s grant of {} ({}) covers warden's own files ({}); the gate refuses them whatever the grant, but grant a narrower directory",
                    p.name,
                    d.path,
                    real.display(),
                    covered.join(", ")
                ),
            });
        }
    }
    out
}
