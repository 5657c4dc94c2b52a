//! Loading a plugin: check its integrity, compile (or load from the cache),
//! find which world it implements, pre-instantiate it, and read and check
//! its self-description.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::Value;
use warden_tool::config::{Grants, ToolSettings};
use warden_tool::{GuestRef, HookDef, PatternSource, ToolDef};

use wasmtime::Store;

use crate::bindings::{self, HookGuest, Instance, ToolGuest, ToolSpec};
use crate::engine::{Sandbox, sha256_hex};
use crate::error::RuntimeError;
use crate::sandbox::{self, GuestState, Limits, World};

/// The most tools one plugin may describe.
pub const MAX_TOOLS: usize = 64;
/// The largest parameter schema of one tool, in bytes.
pub const MAX_SCHEMA: usize = 32 * 1024;

/// What a loaded plugin provides.
pub enum Provides {
    Tools {
        guest: Box<dyn ToolGuest>,
        tools: Vec<ToolDef>,
    },
    Hooks {
        guest: Box<dyn HookGuest>,
        hook: HookDef,
    },
}

/// A plugin ready to be called.
pub struct LoadedPlugin {
    pub name: Arc<str>,
    /// sha256 of the component.
    pub hash: String,
    /// Where it was loaded from (`None` for built-ins, which are embedded).
    pub path: Option<PathBuf>,
    pub builtin: bool,
    /// The contract version it was built against.
    pub contract: &'static str,
    pub grants: Grants,
    pub limits: Limits,
    pub size: usize,
    pub provides: Provides,
    /// How long its last instantiation took, in µs.
    instantiation_us: AtomicU64,
}

impl LoadedPlugin {
    /// Its identity for audit and errors.
    pub fn guest(&self) -> GuestRef {
        GuestRef {
            plugin: self.name.to_string(),
            hash: self.hash.clone(),
        }
    }

    /// The tools it provides (none for a hook plugin).
    pub fn tools(&self) -> &[ToolDef] {
        match &self.provides {
            Provides::Tools { tools, .. } => tools,
            Provides::Hooks { .. } => &[],
        }
    }

    /// A fresh instance of it in `store` (timed: see [`Self::instantiation_us`]).
    pub async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Instance> {
        let started = Instant::now();
        let instance = match &self.provides {
            Provides::Tools { guest, .. } => guest.instantiate(store).await?,
            Provides::Hooks { guest, .. } => guest.instantiate(store).await?,
        };
        self.instantiation_us
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(instance)
    }

    /// How long its last instantiation took, in µs.
    pub fn instantiation_us(&self) -> u64 {
        self.instantiation_us.load(Ordering::Relaxed)
    }

    /// Its hook, if it is a hook plugin.
    pub fn hook(&self) -> Option<&HookDef> {
        match &self.provides {
            Provides::Hooks { hook, .. } => Some(hook),
            Provides::Tools { .. } => None,
        }
    }
}

/// What the operator said about a plugin.
pub struct PluginSource<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
    pub path: Option<PathBuf>,
    pub builtin: bool,
    pub sha256: Option<&'a str>,
    /// Its sha256 when already known (a built-in's, from the build), so
    /// its bytes need not be read to name it.
    pub known_sha256: Option<&'a str>,
    pub grants: Grants,
    pub tools: &'a BTreeMap<String, ToolSettings>,
    pub fail_open: bool,
}

/// Load one plugin.
pub async fn load(sandbox: &Sandbox, src: PluginSource<'_>) -> Result<LoadedPlugin, RuntimeError> {
    let name: Arc<str> = src.name.into();
    let hash = src
        .known_sha256
        .map_or_else(|| sha256_hex(src.bytes), str::to_string);
    if let Some(expected) = src.sha256
        && !expected.eq_ignore_ascii_case(&hash)
    {
        return Err(RuntimeError::Integrity {
            plugin: name.to_string(),
            path: src
                .path
                .as_ref()
                .map_or("(embedded)".into(), |p| p.display().to_string()),
            expected: expected.to_string(),
            actual: hash,
        });
    }
    let contract_err = |reason: String| RuntimeError::Contract {
        plugin: name.to_string(),
        reason,
    };
    // A built-in may come compiled in the binary (checked before use).
    let component = match src
        .builtin
        .then(|| crate::builtin::precompiled(sandbox, &hash))
        .flatten()
    {
        Some(c) => c,
        None => sandbox
            .component(src.bytes, &hash)
            .map_err(|e| contract_err(e.to_string()))?,
    };

    let exports: BTreeSet<String> = component
        .component_type()
        .exports(&sandbox.engine)
        .map(|(n, _)| n.to_string())
        .collect();
    let Some((contract, world)) = bindings::detect(&exports) else {
        return Err(contract_err(format!(
            "it exports neither warden:plugin/tool nor warden:plugin/hooks of a supported version ({}); it exports: {}. {}",
            bindings::supported().join(", "),
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.iter().cloned().collect::<Vec<_>>().join(", ")
            },
            if exports.iter().any(|e| e.starts_with("wasi:cli/run")) {
                "It is a command (a program with a main), not a plugin: build a library against warden's world instead; `warden plugin new NAME --lang rust|python|js` writes a project that does"
            } else {
                "Build it against warden's world (the WIT in plugins/sdk or a `warden plugin new` project); a component built for another host's world does not run here"
            }
        )));
    };

    let linker = sandbox::linker(
        &sandbox.engine,
        &component,
        contract,
        world,
        !src.grants.hosts.is_empty(),
    )
    .map_err(|e| contract_err(format!("{e:#}")))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| contract_err(format!("cannot be linked: {e:#}")))?;
    let limits = Limits::of(&src.grants).map_err(|reason| RuntimeError::Contract {
        plugin: name.to_string(),
        reason,
    })?;
    let guest = GuestRef {
        plugin: name.to_string(),
        hash: hash.clone(),
    };
    let describe_err = |reason: String| RuntimeError::Describe {
        plugin: name.to_string(),
        reason,
    };

    // The self-description runs like any guest call: in a fresh store, with
    // its limits, but with no files, environment or network.
    let offline = Limits {
        hosts: Vec::new().into(),
        ..limits.clone()
    };
    let mut store = sandbox::store(
        &sandbox.engine,
        &name,
        &sandbox::Resolved::nothing(),
        &offline,
        None,
        &Vec::new().into(),
    )
    .map_err(|e| describe_err(e.to_string()))?;
    let started = Instant::now();
    let provides = match world {
        World::Tool => {
            let tool = contract
                .tool_guest(pre)
                .map_err(|e| contract_err(format!("{e:#}")))?;
            let described = sandbox::run(&mut store, &limits, &guest.to_string(), async |store| {
                tool.instantiate(store).await?.tool()?.describe(store).await
            })
            .await
            .map_err(|e| describe_err(e.to_string()))?;
            // With no directory and no host, path and URL rules have
            // nothing to protect: such a tool counts as mapped.
            let reaches_out = !src.grants.dirs.is_empty() || !src.grants.hosts.is_empty();
            let tools =
                check_tools(&guest, described, src.tools, reaches_out).map_err(describe_err)?;
            Provides::Tools { guest: tool, tools }
        }
        World::Hook => {
            let hook = contract
                .hook_guest(pre)
                .map_err(|e| contract_err(format!("{e:#}")))?;
            let spec = sandbox::run(&mut store, &limits, &guest.to_string(), async |store| {
                hook.instantiate(store).await?.hook()?.describe(store).await
            })
            .await
            .map_err(|e| describe_err(e.to_string()))?;
            if spec.before.is_empty() && spec.after.is_empty() {
                return Err(describe_err(
                    "the hook wants no tool calls (both its before and after lists are empty)"
                        .into(),
                ));
            }
            for g in spec.before.iter().chain(spec.after.iter()) {
                if g.is_empty() || g.len() > 200 {
                    return Err(describe_err(format!("{g:?} is not a usable tool pattern")));
                }
            }
            Provides::Hooks {
                guest: hook,
                hook: HookDef {
                    guest: guest.clone(),
                    before: spec.before.into(),
                    after: spec.after.into(),
                    fail_open: src.fail_open,
                },
            }
        }
    };

    Ok(LoadedPlugin {
        name,
        hash,
        path: src.path,
        builtin: src.builtin,
        contract: contract.name(),
        grants: src.grants,
        limits,
        size: src.bytes.len(),
        provides,
        // A first estimate, instantiation and self-description together;
        // the first call's instantiation replaces it.
        instantiation_us: AtomicU64::new(started.elapsed().as_micros() as u64),
    })
}

/// Check a tool plugin's self-description and apply the operator's settings.
fn check_tools(
    guest: &GuestRef,
    specs: Vec<ToolSpec>,
    settings: &BTreeMap<String, ToolSettings>,
    reaches_out: bool,
) -> Result<Vec<ToolDef>, String> {
    if specs.is_empty() {
        return Err("it provides no tools".into());
    }
    if specs.len() > MAX_TOOLS {
        return Err(format!(
            "it describes {} tools; one plugin may provide at most {MAX_TOOLS}",
            specs.len()
        ));
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in specs {
        let id_ok = !s.id.is_empty()
            && s.id.len() <= 64
            && s.id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !id_ok {
            return Err(format!(
                "tool id {:?} must be 1-64 characters of a-z, 0-9, _ and -",
                s.id.chars().take(80).collect::<String>()
            ));
        }
        if !seen.insert(s.id.clone()) {
            return Err(format!("tool {} is described twice", s.id));
        }
        if s.description.trim().is_empty() || s.description.len() > 8192 {
            return Err(format!(
                "tool {} needs a description of at most 8 KiB",
                s.id
            ));
        }
        if s.parameters.len() > MAX_SCHEMA {
            return Err(format!(
                "tool {}: its parameter schema is {} bytes; at most {} KiB",
                s.id,
                s.parameters.len(),
                MAX_SCHEMA / 1024
            ));
        }
        let parameters: Value = serde_json::from_str(&s.parameters)
            .map_err(|e| format!("tool {}: parameters are not JSON Schema text ({e})", s.id))?;
        match parameters.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            _ => {
                return Err(format!(
                    "tool {}: parameters must be a JSON Schema with \"type\": \"object\"",
                    s.id
                ));
            }
        }
        let mapped = settings.contains_key(&s.id) || !reaches_out;
        let set = settings.get(&s.id).cloned().unwrap_or_default();
        // One literal name: an `always` answer for a glob would cover
        // other tools' permissions, a reserved one would switch hooks.
        if let Some(p) = &set.permission {
            warden_tool::permission_name::check_name(p)
                .map_err(|e| format!("tool {}: {e}", s.id))?;
        }
        let pattern = match (&set.path_arg, &set.url_arg) {
            (Some(a), _) => PatternSource::Path(a.clone()),
            (None, Some(a)) => PatternSource::Url(a.clone()),
            (None, None) => PatternSource::None,
        };
        out.push(ToolDef {
            permission: set.permission.clone().unwrap_or_else(|| s.id.clone()),
            id: s.id,
            description: s.description,
            parameters,
            pattern,
            guest: guest.clone(),
            mapped,
            server: None,
        });
    }
    for name in settings.keys() {
        if !seen.contains(name) {
            return Err(format!(
                "the config has settings for a tool {name} that this plugin does not provide (it provides: {})",
                seen.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, parameters: String) -> ToolSpec {
        ToolSpec {
            id: id.into(),
            description: "d".into(),
            parameters,
        }
    }

    #[test]
    fn tool_counts_and_schema_sizes_are_capped() {
        let guest = GuestRef {
            plugin: "p".into(),
            hash: "0".repeat(64),
        };
        let none = BTreeMap::new();
        let object = || r#"{"type": "object"}"#.to_string();
        let many: Vec<ToolSpec> = (0..=MAX_TOOLS)
            .map(|i| spec(&format!("t{i}"), object()))
            .collect();
        assert!(
            check_tools(&guest, many, &none, false)
                .unwrap_err()
                .contains("at most 64")
        );
        let huge = format!(
            r#"{{"type": "object", "description": "{}"}}"#,
            "x".repeat(MAX_SCHEMA)
        );
        assert!(
            check_tools(&guest, vec![spec("big", huge)], &none, false)
                .unwrap_err()
                .contains("at most 32 KiB")
        );
        // Mapped: by settings, or because the plugin reaches nothing rules guard.
        let tools = check_tools(&guest, vec![spec("a", object())], &none, true).unwrap();
        assert!(!tools[0].mapped);
        let tools = check_tools(&guest, vec![spec("a", object())], &none, false).unwrap();
        assert!(tools[0].mapped);
        let set = BTreeMap::from([("a".to_string(), ToolSettings::default())]);
        assert!(check_tools(&guest, vec![spec("a", object())], &set, true).unwrap()[0].mapped);
    }
}
