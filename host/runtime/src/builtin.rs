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
//! component being loaded (its sha256) and was made for this engine (the
//! fingerprint of its settings); otherwise the component is compiled as any
//! plugin is. Its code runs where it lies in the binary (`code_in_place`):
//! neither it nor the component is read whole at start, so both hashes
//! were taken at build time, and a test checks that each artifact still
//! matches the digest recorded beside it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use warden_tool::config::{DirGrant, DirMode, Grants, ToolSettings};
use wasmtime::component::Component;

use crate::engine::Sandbox;

/// A page-aligned static (the artifacts' code runs in place).
#[repr(C, align(4096))]
struct Aligned<T: ?Sized>(T);

include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));

/// One embedded plugin.
pub struct Builtin {
    pub name: &'static str,
    /// Its component file, as the build named it.
    pub file: &'static str,
    pub bytes: &'static [u8],
    /// How the rules see its tools.
    pub tools: fn() -> BTreeMap<String, ToolSettings>,
    /// What it gets unless the operator says otherwise.
    pub grants: fn() -> Grants,
    /// Useless without network: loaded only when its grant names hosts.
    pub needs_hosts: bool,
}

/// An embedded component, as `build.rs` copied it (and hashed and compiled
/// that copy).
macro_rules! component {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file))
    };
}

/// Every built-in plugin, in the order the model is offered their tools.
pub fn all() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "read",
            file: "warden_tool_read.wasm",
            bytes: component!("warden_tool_read.wasm"),
            tools: || settings("read", "read", "filePath"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "write",
            file: "warden_tool_write.wasm",
            bytes: component!("warden_tool_write.wasm"),
            tools: || settings("write", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "edit",
            file: "warden_tool_edit.wasm",
            bytes: component!("warden_tool_edit.wasm"),
            tools: || settings("edit", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "list",
            file: "warden_tool_list.wasm",
            bytes: component!("warden_tool_list.wasm"),
            tools: || settings("list", "list", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "glob",
            file: "warden_tool_glob.wasm",
            bytes: component!("warden_tool_glob.wasm"),
            tools: || settings("glob", "glob", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "grep",
            file: "warden_tool_grep.wasm",
            bytes: component!("warden_tool_grep.wasm"),
            tools: || settings("grep", "grep", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "webfetch",
            file: "warden_tool_webfetch.wasm",
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

/// The sha256 of the built-in component in `file`, as the build computed
/// it (`None` when the build could not precompile the built-ins).
pub fn component_sha256(file: &str) -> Option<&'static str> {
    PRECOMPILED
        .iter()
        .find(|(f, ..)| *f == file)
        .map(|(_, _, component, _, _)| *component)
}

/// The built-in component whose sha256 is `component_hash`, compiled at
/// build time, when its artifact was made for `sandbox`'s engine; `None`
/// otherwise (the caller compiles it).
pub fn precompiled(sandbox: &Sandbox, component_hash: &str) -> Option<Component> {
    let (file, artifact, _, _, engine_fingerprint) = PRECOMPILED
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
    // SAFETY: deserialising runs the artifact's native code later. It was
    // made by build.rs with this wasmtime version from exactly this
    // component (its sha256, recorded at build time beside it), for these
    // engine settings (fingerprint checked above), and is part of this
    // binary's read-only data; wasmtime checks its header against the
    // engine as well.
    #[allow(unsafe_code)]
    let component = unsafe { crate::code_in_place::deserialize(&sandbox.engine, artifact) };
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
    use sha2::{Digest, Sha256};

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

    /// What is no longer checked at every start: each artifact and each
    /// component still match the digests the build recorded for them.
    #[test]
    fn every_artifact_and_component_matches_its_recorded_digest() {
        for b in all() {
            assert_eq!(
                component_sha256(b.file),
                Some(crate::engine::sha256_hex(b.bytes).as_str()),
                "{}",
                b.name
            );
        }
        assert_eq!(PRECOMPILED.len(), all().len());
        for (file, artifact, _, artifact_hash, _) in PRECOMPILED {
            assert_eq!(
                hex::encode(Sha256::digest(artifact)),
                *artifact_hash,
                "{file}"
            );
            assert_eq!(
                artifact.as_ptr() as usize % 4096,
                0,
                "{file} is not page-aligned"
            );
        }
    }

    /// The built-ins load from their artifacts (in place, where supported),
    /// none compiled, and run: a real `read` call.
    #[tokio::test]
    async fn a_builtin_loaded_from_its_artifact_runs() {
        use std::sync::Arc;
        use warden_tool::{CallContext, ToolSource, Unattended};

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
        let host = crate::WasmHost::load(&warden_tool::config::PluginSet::default(), None, None)
            .await
            .unwrap();
        assert_eq!(host.compile_stats().compiled, 0);
        let read = host.tools().into_iter().find(|t| t.id == "read").unwrap();
        let ctx = CallContext {
            session_id: "ses_a".into(),
            message_id: "msg_a".into(),
            call_id: "c".into(),
            agent: "build".into(),
            directory: dir.path().display().to_string(),
        };
        let out = host
            .execute(
                &read,
                &ctx,
                r#"{"filePath": "a.txt"}"#,
                Arc::new(Unattended),
            )
            .await
            .unwrap();
        assert!(out.output.contains("alpha"), "{}", out.output);
    }

    #[test]
    fn an_artifact_is_refused_on_other_engine_settings() {
        let sandbox = Sandbox::new(128, None).expect("an engine");
        let read = &all()[0];
        assert!(precompiled(&sandbox, &crate::engine::sha256_hex(read.bytes)).is_none());
        assert_eq!(sandbox.stats.cache_hits.load(Ordering::Relaxed), 0);
    }
}
