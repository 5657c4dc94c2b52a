//! [`WasmHost`]: a tool source and hook host, running each tool call and hook
//! stage in a fresh, sandboxed instance of its plugin.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use warden_tool::config::PluginSet;
use warden_tool::{
    AfterDecision, BeforeDecision, CallContext, CallObserver, GuestError, HookCall, HookDef,
    HookHost, ToolDef, ToolOutput, ToolSource,
};
use wasmtime::Store;

use crate::bindings::{After, Before, Instance, RawOutput, ToolFailure};
use crate::builtin;
use crate::engine::Sandbox;
use crate::error::RuntimeError;
use crate::plugin::{self, LoadedPlugin, PluginSource, Provides};
use crate::prepared::{self, Prepared, PreparedStats, Spares};
use crate::sandbox::{self, GuestState, Limits};

/// Runs guests for the core.
pub struct WasmHost {
    sandbox: Sandbox,
    plugins: Vec<Arc<LoadedPlugin>>,
    by_name: BTreeMap<String, Arc<LoadedPlugin>>,
    skipped: Vec<(String, String)>,
    /// warden's own files, which no guest may open through any grant.
    protected: Arc<[PathBuf]>,
    /// Instances made ahead of their calls.
    spares: Arc<Spares>,
}

/// How many components were compiled and how many came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileStats {
    pub compiled: u64,
    pub cache_hits: u64,
}

impl WasmHost {
    /// Load the built-in tools (unless the config turns them off), every
    /// plugin the config lists, then every plugin in `plugin_dir`.
    /// `cache_dir` holds compiled components.
    pub async fn load(
        config: &PluginSet,
        cache_dir: Option<PathBuf>,
        plugin_dir: Option<&std::path::Path>,
    ) -> Result<WasmHost, RuntimeError> {
        let mut configured = config.plugins.clone();
        if let Some(dir) = plugin_dir {
            configured.extend(crate::plugin_dir::discover(dir)?);
        }
        let builtins = if config.builtins.unwrap_or(true) {
            builtin::all()
        } else {
            Vec::new()
        };
        let builtin_grants = |b: &builtin::Builtin| {
            config
                .builtin_grants
                .get(b.name)
                .cloned()
                .unwrap_or_else(b.grants)
        };
        let max_memory = builtins
            .iter()
            .map(|b| builtin_grants(b).memory_mb)
            .chain(configured.iter().map(|p| p.grants.memory_mb))
            .max()
            .unwrap_or(64)
            .max(64);
        let sandbox = Sandbox::new(max_memory, cache_dir)?;

        let mut plugins = Vec::new();
        let mut skipped = Vec::new();
        for b in &builtins {
            let grants = builtin_grants(b);
            if b.needs_hosts && grants.hosts.is_empty() {
                skipped.push((
                    b.name.to_string(),
                    format!(
                        "no hosts granted; set builtin_grants.{}.hosts in the config to enable it",
                        b.name
                    ),
                ));
                continue;
            }
            let tools = (b.tools)();
            plugins.push(Arc::new(
                plugin::load(
                    &sandbox,
                    PluginSource {
                        name: b.name,
                        bytes: b.bytes,
                        path: None,
                        builtin: true,
                        sha256: None,
                        known_sha256: builtin::component_sha256(b.file),
                        grants,
                        tools: &tools,
                        fail_open: false,
                    },
                )
                .await?,
            ));
        }
        for p in &configured {
            let bytes = std::fs::read(&p.path).map_err(|e| RuntimeError::Read {
                plugin: p.name.clone(),
                path: p.path.display().to_string(),
                reason: e.to_string(),
            })?;
            plugins.push(Arc::new(
                plugin::load(
                    &sandbox,
                    PluginSource {
                        name: &p.name,
                        bytes: &bytes,
                        path: Some(p.path.clone()),
                        builtin: false,
                        sha256: p.sha256.as_deref(),
                        known_sha256: None,
                        grants: p.grants.clone(),
                        tools: &p.tools,
                        fail_open: p.fail_open,
                    },
                )
                .await?,
            ));
        }

        let mut by_name = BTreeMap::new();
        let mut tool_owner: BTreeMap<String, String> = BTreeMap::new();
        for p in &plugins {
            if by_name.insert(p.name.to_string(), p.clone()).is_some() {
                return Err(RuntimeError::Contract {
                    plugin: p.name.to_string(),
                    reason: "a built-in plugin already has this name; choose another".into(),
                });
            }
            for t in p.tools() {
                if let Some(first) = tool_owner.insert(t.id.clone(), p.name.to_string()) {
                    return Err(RuntimeError::DuplicateTool {
                        tool: t.id.clone(),
                        first,
                        second: p.name.to_string(),
                    });
                }
            }
        }
        Ok(WasmHost {
            sandbox,
            plugins,
            by_name,
            skipped,
            protected: Vec::new().into(),
            spares: Arc::new(Spares::new(config.prepare_instances)),
        })
    }

    /// Keep every guest out of these paths (warden's ledger, cache, installed
    /// plugins, config), whatever its grants: opening, removing, renaming or
    /// linking them is refused (see `fs_gate`), and a grant inside one is
    /// refused at the call. Paths are resolved now, as far as they exist.
    pub fn protect(&mut self, paths: impl IntoIterator<Item = PathBuf>) {
        // Both where a path leads and the path itself under its real folder,
        // so a guest opening it without following its last link is caught too.
        let mut all = Vec::new();
        for p in paths {
            let real = real_path(&p);
            let named = match (p.parent(), p.file_name()) {
                (Some(dir), Some(name)) => real_path(dir).join(name),
                _ => real.clone(),
            };
            if named != real {
                all.push(named);
            }
            all.push(real);
        }
        self.protected = all.into();
        self.spares.clear();
    }

    /// The paths [`WasmHost::protect`] keeps guests out of.
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// Compiled cache entries that failed their check in this process (each
    /// was compiled again), with why.
    pub fn cache_rejections(&self) -> Vec<String> {
        self.sandbox
            .stats
            .cache_rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Built-in plugins not loaded, with the reason.
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// Every loaded plugin, built-ins first, then in config order.
    pub fn plugins(&self) -> &[Arc<LoadedPlugin>] {
        &self.plugins
    }

    /// Whether guests share a pre-reserved pool of instance slots.
    pub fn pooling(&self) -> bool {
        self.sandbox.pooling
    }

    /// How many instances were made ahead of their calls, taken, and dropped unused.
    pub fn prepared_stats(&self) -> PreparedStats {
        self.spares.stats()
    }

    /// Compilation counters for this process.
    pub fn compile_stats(&self) -> CompileStats {
        CompileStats {
            compiled: self.sandbox.stats.compiled.load(Ordering::Relaxed),
            cache_hits: self.sandbox.stats.cache_hits.load(Ordering::Relaxed),
        }
    }

    fn plugin(&self, name: &str) -> Result<&Arc<LoadedPlugin>, GuestError> {
        self.by_name
            .get(name)
            .ok_or_else(|| GuestError::Unavailable {
                guest: format!("plugin {name}"),
                message: "it is not loaded".into(),
            })
    }

    /// The plugin behind a hook.
    fn hook_plugin(&self, hook: &HookDef) -> Result<&Arc<LoadedPlugin>, GuestError> {
        let plugin = self.plugin(&hook.guest.plugin)?;
        match &plugin.provides {
            Provides::Hooks { .. } => Ok(plugin),
            Provides::Tools { .. } => Err(GuestError::Unavailable {
                guest: plugin.guest().to_string(),
                message: "it is a tool plugin, not a hook plugin".into(),
            }),
        }
    }

    /// One guest call: a fresh instance of the plugin, in a store with its
    /// grants and limits in the session's directory (made ahead of the call
    /// when one is ready, see [`crate::prepared`]), `call` run on it within
    /// the time limit, and a trap turned into the error that names its cause.
    async fn call_guest<T>(
        &self,
        plugin: &Arc<LoadedPlugin>,
        ctx: &CallContext,
        observer: Arc<dyn CallObserver>,
        call: impl AsyncFnOnce(&mut Store<GuestState>, &Instance) -> wasmtime::Result<T>,
    ) -> Result<(T, Option<String>), GuestError> {
        let limits = &plugin.limits;
        let resolved = sandbox::resolve(
            &plugin.name,
            &plugin.grants,
            Some(&ctx.directory),
            &self.protected,
        )?;
        let (mut store, ready) = match self.spares.take(&plugin.name, &ctx.directory, &resolved) {
            Some(Prepared {
                mut store,
                instance,
                ..
            }) => {
                sandbox::arm(&mut store, observer);
                (store, Some(instance))
            }
            None => (
                sandbox::store(
                    &self.sandbox.engine,
                    &plugin.name,
                    &resolved,
                    limits,
                    Some(observer),
                    &self.protected,
                )?,
                None,
            ),
        };
        let result = sandbox::run(
            &mut store,
            limits,
            &plugin.guest().to_string(),
            async |store| {
                let instance = match ready {
                    Some(instance) => instance,
                    None => plugin.instantiate(store).await?,
                };
                call(store, &instance).await
            },
        )
        .await;
        // A guest that failed after the host refused it a path is told why,
        // and so is the model: the guest itself only saw `access denied`.
        let refusals = store.data().fs_refusals();
        let note = (!refusals.is_empty()).then(|| format!(" (the host {})", refusals.join("; ")));
        self.spares.after_call(
            plugin,
            &ctx.directory,
            &self.sandbox.engine,
            &self.protected,
        );
        // Taking down a big instance (resetting the pages it wrote) is done
        // off the call's path, like making one.
        if plugin.instantiation_us() > prepared::SLOW_INSTANTIATION_US {
            tokio::task::spawn_blocking(move || drop(store));
        }
        match result {
            Err(GuestError::Trap { guest, message }) => Err(GuestError::Trap {
                guest,
                message: message + note.as_deref().unwrap_or(""),
            }),
            Err(e) => Err(e),
            Ok(v) => Ok((v, note)),
        }
    }
}

/// Check a guest's output against the contract and the plugin's cap.
fn checked_output(o: RawOutput, guest: &str, limits: &Limits) -> Result<ToolOutput, GuestError> {
    let size = o.output.len() + o.title.len() + o.metadata.len();
    if size > limits.max_output {
        return Err(GuestError::OutputTooLarge {
            guest: guest.to_string(),
            size,
            limit: limits.max_output,
        });
    }
    let metadata = if o.metadata.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_str::<Value>(&o.metadata) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return Err(GuestError::InvalidOutput {
                    guest: guest.to_string(),
                    message: "its metadata is not a JSON object".into(),
                });
            }
        }
    };
    Ok(ToolOutput {
        output: o.output,
        title: o.title.chars().take(500).collect(),
        metadata,
    })
}

/// Cap what a guest's error message may carry into the ledger.
fn capped(message: String, limits: &Limits) -> String {
    if message.len() <= limits.max_output {
        return message;
    }
    let mut end = limits.max_output;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… (error message cut at {} bytes)",
        &message[..end],
        limits.max_output
    )
}

#[async_trait::async_trait]
impl ToolSource for WasmHost {
    fn tools(&self) -> Vec<ToolDef> {
        self.plugins
            .iter()
            .flat_map(|p| p.tools().iter().cloned())
            .collect()
    }

    fn offers(&self, tool: &ToolDef) -> bool {
        self.by_name
            .get(&tool.guest.plugin)
            .is_some_and(|p| p.tools().iter().any(|t| t.is(tool)))
    }

    async fn execute(
        &self,
        tool: &ToolDef,
        ctx: &CallContext,
        arguments: &str,
        observer: Arc<dyn CallObserver>,
    ) -> Result<ToolOutput, GuestError> {
        let plugin = self.plugin(&tool.guest.plugin)?;
        let (guest, limits) = (plugin.guest().to_string(), &plugin.limits);
        if !matches!(plugin.provides, Provides::Tools { .. }) {
            return Err(GuestError::Unavailable {
                guest,
                message: "it is a hook plugin, not a tool plugin".into(),
            });
        }
        let (result, note) = self
            .call_guest(plugin, ctx, observer, async |store, instance| {
                instance
                    .tool()?
                    .execute(store, ctx, &tool.id, arguments)
                    .await
            })
            .await?;
        let told = |m: String| capped(m, limits) + note.as_deref().unwrap_or("");
        match result {
            Err(ToolFailure::InvalidArguments(m)) => Err(GuestError::InvalidArguments(told(m))),
            Err(ToolFailure::Failed(m)) => Err(GuestError::Failed(told(m))),
            Err(ToolFailure::Denied(m)) => Err(GuestError::Denied(told(m))),
            Ok(o) => checked_output(o, &guest, limits),
        }
    }
}

#[async_trait::async_trait]
impl HookHost for WasmHost {
    fn hooks(&self) -> Vec<HookDef> {
        self.plugins
            .iter()
            .filter_map(|p| p.hook().cloned())
            .collect()
    }

    async fn before(&self, call: &HookCall<'_>) -> Result<BeforeDecision, GuestError> {
        use Before as W;
        let plugin = self.hook_plugin(call.hook)?;
        let (guest, limits) = (plugin.guest().to_string(), &plugin.limits);
        let (decision, _) = self
            .call_guest(
                plugin,
                call.ctx,
                call.observer.clone(),
                async |store, instance| {
                    let hook = instance.hook()?;
                    hook.before(store, call.ctx, call.tool, call.arguments)
                        .await
                },
            )
            .await?;
        let size = match &decision {
            W::Allow => 0,
            W::Block(s) | W::Rewrite(s) | W::Ask(s) => s.len(),
        };
        if size > limits.max_output {
            return Err(GuestError::OutputTooLarge {
                guest,
                size,
                limit: limits.max_output,
            });
        }
        Ok(match decision {
            W::Allow => BeforeDecision::Allow,
            W::Block(r) => BeforeDecision::Block(r),
            W::Rewrite(a) => BeforeDecision::Rewrite(a),
            W::Ask(r) => BeforeDecision::Ask(r),
        })
    }

    async fn after(
        &self,
        call: &HookCall<'_>,
        output: &ToolOutput,
    ) -> Result<AfterDecision, GuestError> {
        let plugin = self.hook_plugin(call.hook)?;
        let (guest, limits) = (plugin.guest().to_string(), &plugin.limits);
        let current = RawOutput {
            output: output.output.clone(),
            title: output.title.clone(),
            metadata: output.metadata.to_string(),
        };
        let (decision, _) = self
            .call_guest(
                plugin,
                call.ctx,
                call.observer.clone(),
                async |store, instance| {
                    let hook = instance.hook()?;
                    hook.after(store, call.ctx, call.tool, call.arguments, &current)
                        .await
                },
            )
            .await?;
        match decision {
            After::Keep => Ok(AfterDecision::Keep),
            After::Rewrite(o) => checked_output(o, &guest, limits).map(AfterDecision::Rewrite),
        }
    }
}

/// `path` with its existing part resolved through links (a file that does
/// not exist yet, such as a ledger's `-wal`, is named under its real folder).
fn real_path(path: &std::path::Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => real_path(dir).join(name),
        _ => path.to_path_buf(),
    }
}
