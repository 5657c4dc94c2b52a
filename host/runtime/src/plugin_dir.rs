//! The plugins directory: drop a plugin in, restart, done.
//!
//! `<data-dir>/plugins/<name>/plugin.wasm` is the component and
//! `<name>/plugin.json` says what the operator granted it (the same fields
//! as a `plugins` entry of the config, without `name` and `path`).
//! `warden plugin add` writes both, pinning the component's sha256.
//! `warden plugin disable` marks a plugin `disabled` in its manifest: it is
//! then not loaded at all (a hook applies to no session) until `enable`;
//! `warden plugin remove` deletes its folder.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use warden_tool::config::{Grants, PluginConfig, ToolSettings};

use crate::engine::sha256_hex;
use crate::error::RuntimeError;

/// The manifest of a plugin in the plugins directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub grants: Grants,
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, ToolSettings>,
    #[serde(default)]
    pub fail_open: bool,
    /// Switched off by the operator: kept, but not loaded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

/// Every enabled plugin in `dir` (none if it does not exist), sorted by name.
pub fn discover(dir: &Path) -> Result<Vec<PluginConfig>, RuntimeError> {
    Ok(installed(dir)?
        .into_iter()
        .filter(|(_, m)| !m.disabled)
        .map(|(p, _)| p)
        .collect())
}

/// Every plugin in `dir`, disabled ones included, with its manifest.
pub fn installed(dir: &Path) -> Result<Vec<(PluginConfig, Manifest)>, RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(RuntimeError::Read {
                plugin: "(plugins directory)".into(),
                path: dir.display().to_string(),
                reason: e.to_string(),
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let manifest_path = path.join("plugin.json");
        let text = std::fs::read_to_string(&manifest_path).map_err(|e| RuntimeError::Read {
            plugin: name.clone(),
            path: manifest_path.display().to_string(),
            reason: format!(
                "{e} (every plugin folder needs a plugin.json; `warden plugin add` writes one)"
            ),
        })?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| RuntimeError::Contract {
            plugin: name.clone(),
            reason: format!("{} is not a valid manifest: {e}", manifest_path.display()),
        })?;
        out.push((
            PluginConfig {
                name,
                path: path.join("plugin.wasm"),
                sha256: m.sha256.clone(),
                grants: m.grants.clone(),
                tools: m.tools.clone(),
                fail_open: m.fail_open,
            },
            m,
        ));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// The folder of the installed plugin `name` in `dir`, or why there is none
/// (naming those that are installed).
fn folder_of(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let found = installed(dir).map_err(|e| e.to_string())?;
    if found.iter().any(|(p, _)| p.name == name) {
        return Ok(dir.join(name));
    }
    let names: Vec<&str> = found.iter().map(|(p, _)| p.name.as_str()).collect();
    Err(format!(
        "no plugin named {name:?} is installed in {} (installed: {}); a built-in or a plugin of the config's `plugins` is not removed this way: deny its tools' permissions, or edit the config",
        dir.display(),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    ))
}

/// Switch the installed plugin `name` off (`disabled`) or back on. Whether
/// it changed anything.
pub fn set_disabled(dir: &Path, name: &str, disabled: bool) -> Result<bool, String> {
    let folder = folder_of(dir, name)?;
    let path = folder.join("plugin.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a valid manifest: {e}", path.display()))?;
    if manifest.disabled == disabled {
        return Ok(false);
    }
    manifest.disabled = disabled;
    write_manifest(&folder, &manifest)?;
    Ok(true)
}

/// Delete the installed plugin `name` (its component and its manifest).
pub fn remove(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let folder = folder_of(dir, name)?;
    std::fs::remove_dir_all(&folder)
        .map_err(|e| format!("cannot remove {}: {e}", folder.display()))?;
    Ok(folder)
}

/// Write a manifest whole: to a temporary file, then renamed over the old
/// one, so a crash never leaves half of one.
fn write_manifest(folder: &Path, manifest: &Manifest) -> Result<(), String> {
    let text = serde_json::to_string_pretty(manifest).map_err(|e| e.to_string())?;
    let tmp = folder.join("plugin.json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write the manifest: {e}"))?;
    std::fs::rename(&tmp, folder.join("plugin.json"))
        .map_err(|e| format!("cannot write the manifest: {e}"))
}

/// Install a component into `dir` under `name` with this manifest (the
/// sha256 is filled in). Returns the plugin's folder. Refuses to replace an
/// existing plugin unless `replace`.
pub fn install(
    dir: &Path,
    name: &str,
    component: &[u8],
    mut manifest: Manifest,
    replace: bool,
) -> Result<PathBuf, String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(format!(
            "plugin name {name:?} must be letters, digits, - and _"
        ));
    }
    let folder = dir.join(name);
    if folder.exists() && !replace {
        return Err(format!(
            "a plugin named {name} is already installed in {}; pass --replace to update it",
            folder.display()
        ));
    }
    manifest.sha256 = Some(sha256_hex(component));
    std::fs::create_dir_all(&folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    std::fs::write(folder.join("plugin.wasm"), component)
        .map_err(|e| format!("cannot write the component: {e}"))?;
    write_manifest(&folder, &manifest)?;
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_plugins_are_discovered_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let folder = install(dir.path(), "mine", b"\0asm", Manifest::default(), false).unwrap();
        assert!(folder.join("plugin.wasm").exists());
        assert!(
            install(dir.path(), "mine", b"\0asm", Manifest::default(), false)
                .unwrap_err()
                .contains("--replace")
        );
        assert!(install(dir.path(), "../up", b"", Manifest::default(), false).is_err());
        let found = discover(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "mine");
        assert_eq!(
            found[0].sha256.as_deref(),
            Some(sha256_hex(b"\0asm").as_str())
        );
        assert!(discover(&dir.path().join("none")).unwrap().is_empty());
    }

    #[test]
    fn a_disabled_plugin_stays_installed_but_is_not_loaded_and_a_removed_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "a", b"\0asm", Manifest::default(), false).unwrap();
        install(dir.path(), "b", b"\0asm", Manifest::default(), false).unwrap();
        assert!(set_disabled(dir.path(), "a", true).unwrap());
        assert!(!set_disabled(dir.path(), "a", true).unwrap(), "already off");
        let names = |v: Vec<PluginConfig>| v.into_iter().map(|p| p.name).collect::<Vec<_>>();
        assert_eq!(names(discover(dir.path()).unwrap()), ["b"]);
        let all = installed(dir.path()).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all[0].1.disabled && !all[1].1.disabled);
        assert!(set_disabled(dir.path(), "a", false).unwrap());
        assert_eq!(names(discover(dir.path()).unwrap()), ["a", "b"]);
        remove(dir.path(), "a").unwrap();
        assert!(!dir.path().join("a").exists());
        let err = remove(dir.path(), "a").unwrap_err();
        assert!(
            err.contains("\"a\"") && err.contains("installed: b"),
            "{err}"
        );
        let err = set_disabled(dir.path(), "../b", true).unwrap_err();
        assert!(err.contains("no plugin named"), "{err}");
        // A manifest written before `disabled` existed reads as enabled.
        std::fs::write(dir.path().join("b").join("plugin.json"), "{}").unwrap();
        assert_eq!(names(discover(dir.path()).unwrap()), ["b"]);
    }

    #[test]
    fn a_folder_without_a_manifest_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("stray")).unwrap();
        let err = discover(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("stray") && err.contains("plugin.json"),
            "{err}"
        );
    }
}
