//! `plugin add --replace`: an upgrade of an installed plugin. What the
//! operator granted it is kept (flags given now add to it), and the
//! consent shows what changes against the installed one: its hash, tools,
//! how the rules see them, and its grants.

use std::path::Path;

use warden_core::config::{DirGrant, Grants, PluginConfig, ToolSettings};
use warden_runtime::WasmHost;
use warden_runtime::plugin_dir::Manifest;

/// The installed plugin `name`'s manifest, if there is one.
pub fn installed(data_dir: &Path, name: &str) -> anyhow::Result<Option<(PluginConfig, Manifest)>> {
    let all = warden_runtime::plugin_dir::installed(&crate::app::plugin_dir(data_dir))?;
    Ok(all.into_iter().find(|(p, _)| p.name == name))
}

/// `given` (the flags of this install) over what `old` was granted: every
/// directory, variable and host kept, a directory named again takes its new
/// mode, and a limit given replaces the old one.
pub fn grants(old: &Grants, given: &Grants, limits: [Option<u64>; 3]) -> Grants {
    let mut out = old.clone();
    for d in &given.dirs {
        match out.dirs.iter_mut().find(|o| o.path == d.path) {
            Some(o) => o.mode = d.mode,
            None => out.dirs.push(DirGrant {
                path: d.path.clone(),
                mode: d.mode,
            }),
        }
    }
    for v in &given.env {
        if !out.env.contains(v) {
            out.env.push(v.clone());
        }
    }
    for h in &given.hosts {
        if !out.hosts.contains(h) {
            out.hosts.push(h.clone());
        }
    }
    let [memory, timeout, output] = limits;
    out.memory_mb = memory.unwrap_or(out.memory_mb);
    out.timeout_ms = timeout.unwrap_or(out.timeout_ms);
    out.max_output_kb = output.unwrap_or(out.max_output_kb);
    out
}

/// The tools' mappings: the project's, then what the operator installed
/// over them before, then this install's flags.
pub fn tools(
    project: std::collections::BTreeMap<String, ToolSettings>,
    old: &std::collections::BTreeMap<String, ToolSettings>,
    flags: std::collections::BTreeMap<String, ToolSettings>,
) -> std::collections::BTreeMap<String, ToolSettings> {
    let mut out = project;
    out.extend(old.iter().map(|(k, v)| (k.clone(), v.clone())));
    out.extend(flags);
    out
}

/// What the consent lines of the installed plugin and of its replacement
/// differ by: `- ` a line that goes, `+ ` one that comes.
pub async fn changes(installed: &PluginConfig, new: &[String], data_dir: &Path) -> Vec<String> {
    let set = warden_core::config::Config {
        builtins: Some(false),
        plugins: vec![installed.clone()],
        ..warden_core::config::Config::default()
    };
    let old = match WasmHost::load(
        &set.plugin_set(),
        Some(data_dir.join("cache").join("components")),
        None,
    )
    .await
    {
        Ok(host) => match host.plugins().first() {
            Some(p) => crate::plugin_add::consent_lines(p),
            None => return vec!["(the installed plugin loads as nothing)".into()],
        },
        Err(e) => return vec![format!("(the installed plugin does not load: {e})")],
    };
    let mut out: Vec<String> = old
        .iter()
        .filter(|l| !new.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        new.iter()
            .filter(|l| !old.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::config::DirMode;

    #[test]
    fn an_upgrade_keeps_every_grant_and_adds_the_flags() {
        let old = Grants {
            dirs: vec![DirGrant {
                path: ".".into(),
                mode: DirMode::ReadOnly,
            }],
            env: vec!["A".into()],
            hosts: vec!["api.example.com".into()],
            memory_mb: 128,
            ..Grants::default()
        };
        let given = Grants {
            dirs: vec![
                DirGrant {
                    path: ".".into(),
                    mode: DirMode::ReadWrite,
                },
                DirGrant {
                    path: "docs".into(),
                    mode: DirMode::ReadOnly,
                },
            ],
            env: vec!["A".into(), "B".into()],
            ..Grants::default()
        };
        let got = grants(&old, &given, [None, Some(500), None]);
        assert_eq!(
            got.dirs
                .iter()
                .map(|d| (d.path.as_str(), d.mode))
                .collect::<Vec<_>>(),
            [(".", DirMode::ReadWrite), ("docs", DirMode::ReadOnly)]
        );
        assert_eq!(got.env, ["A", "B"]);
        assert_eq!(got.hosts, ["api.example.com"]);
        assert_eq!((got.memory_mb, got.timeout_ms), (128, 500));
        assert_eq!(
            grants(&old, &Grants::default(), [None; 3]),
            old,
            "nothing given: all kept"
        );
    }
}
