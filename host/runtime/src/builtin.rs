//! The built-in tools, embedded in the binary as components and run through
//! the same sandbox as any third-party plugin, with default grants the
//! operator can replace (`builtin_grants` in the config).
//!
//! Each tool is its own plugin, so each gets only what it needs: the tools
//! that change files (`write`, `edit`) get the working directory read-write,
//! the ones that look (`read`, `list`, `glob`, `grep`) get it read-only.
//!
//! They also come compiled: `build.rs` compiles each one on the runtime's
//! default engine settings, so a first run on a fresh data dir starts as
//! fast as a warm one. An artifact is used only when it is bound to the
//! component being loaded (its sha256), is intact (its own sha256, kept
//! beside it in the binary) and was made for this engine (the fingerprint
//! of its settings); otherwise the component is compiled as any plugin is.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};
use warden_core::config::{DirGrant, DirMode, Grants, ToolSettings};
use wasmtime::component::Component;

use crate::engine::Sandbox;

include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));

/// One embedded plugin.
pub struct Builtin {
    pub name: &'static str,
    pub bytes: &'static [u8],
    /// How the rules see its tools.
    pub tools: fn() -> BTreeMap<String, ToolSettings>,
    /// What it gets unless the operator says otherwise.
    pub grants: fn() -> Grants,
    /// Useless without network: loaded only when its grant names hosts.
    pub needs_hosts: bool,
}

/// An embedded component built by `build.rs`.
macro_rules! component {
    ($file:literal) => {
        include_bytes!(concat!(env!("WARDEN_PLUGIN_DIR"), "/", $file))
    };
}

/// Every built-in plugin, in the order the model is offered their tools.
pub fn all() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "read",
            bytes: component!("warden_tool_read.wasm"),
            tools: || settings("read", "read", "filePath"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "write",
            bytes: component!("warden_tool_write.wasm"),
            tools: || settings("write", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "edit",
            bytes: component!("warden_tool_edit.wasm"),
            tools: || settings("edit", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "list",
            bytes: component!("warden_tool_list.wasm"),
            tools: || settings("list", "list", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "glob",
            bytes: component!("warden_tool_glob.wasm"),
            tools: || settings("glob", "glob", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "grep",
            bytes: component!("warden_tool_grep.wasm"),
            tools: || settings("grep", "grep", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "webfetch",
            bytes: component!("warden_tool_webfetch.wasm"),
            tools: || {
                BTreeMap::from([(
                    "webfetch".to_string(),
                    ToolSettings {
                        permission: Some("webfetch".into()),
                        path_arg: None,
                        url_arg: Some("url".into()),
                    },
                )])
            },
            // No network unless the operator grants hosts (builtin_grants.webfetch.hosts).
            grants: || Grants {
                timeout_ms: 60_000,
                ..Grants::default()
            },
            needs_hosts: true,
        },
    ]
}

/// One tool whose rules use `permission`, with its pattern taken from the
/// path argument `path_arg` (relative to the working directory; `*` when the
/// argument is absent).
fn settings(tool: &str, permission: &str, path_arg: &str) -> BTreeMap<String, ToolSettings> {
    BTreeMap::from([(
        tool.to_string(),
        ToolSettings {
            permission: Some(permission.into()),
            path_arg: Some(path_arg.into()),
            url_arg: None,
        },
    )])
}

/// The session's working directory, and nothing else.
fn working_dir(mode: DirMode) -> Grants {
    Grants {
        dirs: vec![DirGrant {
            path: ".".into(),
            mode,
        }],
        ..Grants::default()
    }
}

/// The directory the build put the guest components in (the built-ins and
/// the test fixtures).
pub fn plugin_dir() -> &'static str {
    env!("WARDEN_PLUGIN_DIR")
}

/// The built-in component whose sha256 is `component_hash`, compiled at
/// build time, when its artifact checks out for `sandbox`'s engine; `None`
/// (compile it) otherwise. Counted as a cache hit.
pub fn precompiled(sandbox: &Sandbox, component_hash: &str) -> Option<Component> {
    let (file, artifact, _, artifact_hash, engine_fingerprint) = PRECOMPILED
        .iter()
        .find(|(_, _, component, _, _)| component.eq_ignore_ascii_case(component_hash))?;
    if crate::engine_settings::fingerprint(&sandbox.engine) != *engine_fingerprint {
        // Another memory limit or allocator than the default: compiled as any plugin.
        tracing::debug!(
            file,
            "built-in artifact made for other engine settings; compiling"
        );
        return None;
    }
    if hex::encode(Sha256::digest(artifact)) != *artifact_hash {
        tracing::warn!(
            file,
            "built-in artifact does not match its digest; compiling instead"
        );
        return None;
    }
    // SAFETY: deserialising runs the artifact's native code later. It was
    // made by build.rs with this wasmtime version from exactly this
    // component (sha256 checked above against the bytes being loaded), it
    // matches the digest recorded beside it in the same binary, and it was
    // made for these engine settings (fingerprint checked above); wasmtime
    // checks its header against the engine as well.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(&sandbox.engine, artifact) };
    match component {
        Ok(c) => {
            sandbox.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            Some(c)
        }
        Err(e) => {
            tracing::warn!(file, error = %e, "built-in artifact refused by the engine; compiling");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_has_an_artifact_for_the_default_engine() {
        let sandbox =
            Sandbox::new(crate::engine_settings::DEFAULT_MEMORY_MB, None).expect("an engine");
        for b in all() {
            let hash = crate::engine::sha256_hex(b.bytes);
            assert!(
                precompiled(&sandbox, &hash).is_some(),
                "{} has no usable artifact",
                b.name
            );
        }
        assert_eq!(
            sandbox.stats.cache_hits.load(Ordering::Relaxed),
            all().len() as u64
        );
        // A component it was not made from gets none.
        assert!(precompiled(&sandbox, &"0".repeat(64)).is_none());
    }

    #[test]
    fn an_artifact_is_refused_on_other_engine_settings() {
        let sandbox = Sandbox::new(128, None).expect("an engine");
        let read = &all()[0];
        assert!(precompiled(&sandbox, &crate::engine::sha256_hex(read.bytes)).is_none());
        assert_eq!(sandbox.stats.cache_hits.load(Ordering::Relaxed), 0);
    }
}
