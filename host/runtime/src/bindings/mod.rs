//! The plugin contract as the rest of the runtime sees it: runtime-neutral
//! types, and one module per supported version of `warden:plugin` holding
//! that version's generated bindings and the conversions to and from them.
//!
//! Nothing outside this folder names a generated type. Each version's
//! bindings are generated from its own frozen folder of the contract,
//! `wit/vX.Y.Z/`, whose bytes a test pins ([`tests`]), so an edit to a
//! released version fails the build's tests instead of silently changing
//! what old guests are linked against. Supporting contract 0.2.0 means
//! adding `wit/v0.2.0/`, writing `v0_2_0.rs` (its `bindgen!` on that
//! folder, a [`Contract`] that links and wraps it, and the host interface
//! for it), adding it to [`CONTRACTS`] and pinning its sha256 below.

use std::collections::BTreeSet;

use warden_tool::CallContext;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use crate::sandbox::GuestState;

mod v0_1_0;

/// Every contract version this host loads, newest first.
pub const CONTRACTS: &[&dyn Contract] = &[&v0_1_0::V0_1_0];

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    Tool,
    Hook,
}

/// One tool as a plugin describes itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub id: String,
    pub description: String,
    /// JSON Schema text, not yet checked.
    pub parameters: String,
}

/// Which tool calls a hook plugin wants to see.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSpec {
    pub before: Vec<String>,
    pub after: Vec<String>,
}

/// A tool's output as the guest returned it, not yet checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RawOutput {
    pub output: String,
    pub title: String,
    /// JSON object text (may be empty).
    pub metadata: String,
}

/// How a tool says it failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolFailure {
    InvalidArguments(String),
    Failed(String),
    Denied(String),
}

/// A before hook's answer, as the guest returned it.
#[derive(Debug, Clone, PartialEq)]
pub enum Before {
    Allow,
    Block(String),
    /// Replacement arguments (JSON text).
    Rewrite(String),
    Ask(String),
}

/// An after hook's answer, as the guest returned it.
#[derive(Debug, Clone, PartialEq)]
pub enum After {
    Keep,
    Rewrite(RawOutput),
}

/// The level of a guest's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// A tool plugin, pre-instantiated: linked once at load, instantiated afresh
/// for each call in the store it is given.
#[async_trait::async_trait]
pub trait ToolGuest: Send + Sync {
    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Instance>;
}

/// A hook plugin, pre-instantiated.
#[async_trait::async_trait]
pub trait HookGuest: Send + Sync {
    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Instance>;
}

/// A fresh instance of a plugin in one store, ready for the one call it
/// serves (its store is dropped after it).
pub enum Instance {
    Tool(Box<dyn ToolInstance>),
    Hook(Box<dyn HookInstance>),
}

impl Instance {
    /// The tool side of it, or an error naming what it is instead.
    pub fn tool(&self) -> wasmtime::Result<&dyn ToolInstance> {
        match self {
            Instance::Tool(t) => Ok(&**t),
            Instance::Hook(_) => Err(wasmtime::format_err!(
                "it is a hook plugin, not a tool plugin"
            )),
        }
    }

    /// The hook side of it, or an error naming what it is instead.
    pub fn hook(&self) -> wasmtime::Result<&dyn HookInstance> {
        match self {
            Instance::Hook(h) => Ok(&**h),
            Instance::Tool(_) => Err(wasmtime::format_err!(
                "it is a tool plugin, not a hook plugin"
            )),
        }
    }
}

/// A tool plugin's instance.
#[async_trait::async_trait]
pub trait ToolInstance: Send + Sync {
    async fn describe(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Vec<ToolSpec>>;
    async fn execute(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
    ) -> wasmtime::Result<Result<RawOutput, ToolFailure>>;
}

/// A hook plugin's instance.
#[async_trait::async_trait]
pub trait HookInstance: Send + Sync {
    async fn describe(&self, store: &mut Store<GuestState>) -> wasmtime::Result<HookSpec>;
    async fn before(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
    ) -> wasmtime::Result<Before>;
    async fn after(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
        output: &RawOutput,
    ) -> wasmtime::Result<After>;
}

/// One version of the contract.
pub trait Contract: Sync {
    /// Its package name and version, e.g. `warden:plugin@0.1.0`.
    fn name(&self) -> &'static str;
    /// The world a component with these exports implements, if this version's.
    fn world_of(&self, exports: &BTreeSet<String>) -> Option<World>;
    /// Link this version's host interface for `world`.
    fn add_to_linker(&self, linker: &mut Linker<GuestState>, world: World) -> wasmtime::Result<()>;
    fn tool_guest(&self, pre: InstancePre<GuestState>) -> wasmtime::Result<Box<dyn ToolGuest>>;
    fn hook_guest(&self, pre: InstancePre<GuestState>) -> wasmtime::Result<Box<dyn HookGuest>>;
}

/// The contract version and world a component's exports implement.
pub fn detect(exports: &BTreeSet<String>) -> Option<(&'static dyn Contract, World)> {
    CONTRACTS
        .iter()
        .find_map(|c| c.world_of(exports).map(|w| (*c, w)))
}

/// The names of the supported versions, for messages.
pub fn supported() -> Vec<&'static str> {
    CONTRACTS.iter().map(|c| c.name()).collect()
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::CONTRACTS;

    /// Every released version of the contract, by folder under `wit/`, and
    /// the sha256 of its `plugin.wit`. A released version never changes: a
    /// change is a new version beside it.
    const RELEASED: &[(&str, &str)] = &[(
        "v0.1.0",
        "f56c6b9bd94a5065f49db6ab3ea1e8c288bdbf0542c787c320fa2ec07461dddc",
    )];

    fn wit_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit")
    }

    #[test]
    fn released_contracts_are_frozen() {
        for (folder, pinned) in RELEASED {
            let path = wit_dir().join(folder).join("plugin.wit");
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let sha: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                &sha,
                pinned,
                "{} changed, but {folder} is released and frozen: undo the edit, and put a \
                 change in a new version's folder beside it",
                path.display()
            );
            let text = String::from_utf8(bytes).unwrap();
            let version = folder.trim_start_matches('v');
            assert!(
                text.contains(&format!("package warden:plugin@{version};")),
                "{} declares another package version than its folder",
                path.display()
            );
        }
    }

    #[test]
    fn every_folder_is_a_released_version_the_host_loads() {
        let mut folders: Vec<String> = std::fs::read_dir(wit_dir())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        folders.sort();
        let mut released: Vec<String> = RELEASED.iter().map(|(f, _)| f.to_string()).collect();
        released.sort();
        assert_eq!(
            folders, released,
            "a folder under wit/ with no pinned sha256 (or the reverse)"
        );
        let mut loaded: Vec<String> = CONTRACTS
            .iter()
            .map(|c| format!("v{}", c.name().rsplit('@').next().unwrap_or_default()))
            .collect();
        loaded.sort();
        assert_eq!(
            loaded, released,
            "the host loads exactly the released versions"
        );
    }
}
