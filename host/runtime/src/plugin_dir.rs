//! The plugins directory: drop a plugin in, restart, done.
//!
//! `<data-dir>/plugins/<name>/plugin.wasm` is the component and
//! `<name>/plugin.json` says what the operator granted it (the same fields
//! as a `plugins` entry of the config, without `name` and `path`).
//! `warden plugin add` writes both, pinning the component's sha256.

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
}

/// Every plugin in `dir` (none if it does not exist), sorted by name.
pub fn discover(dir: &Path) -> Result<Vec<PluginConfig>, RuntimeError> {
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
        out.push(PluginConfig {
            name,
            path: path.join("plugin.wasm"),
            sha256: m.sha256,
            grants: m.grants,
            tools: m.tools,
            fail_open: m.fail_open,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
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
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    std::fs::write(folder.join("plugin.json"), text)
        .map_err(|e| format!("cannot write the manifest: {e}"))?;
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
