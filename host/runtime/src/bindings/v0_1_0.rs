//! `warden:plugin@0.1.0`: its generated bindings, and the conversions
//! between them and the runtime's own types ([`super`]).

use std::collections::BTreeSet;

use warden_tool::CallContext;
use wasmtime::component::{InstancePre, Linker, WasmList, WasmStr};
use wasmtime::{Store, StoreContextMut};

use super::{After, Before, HookSpec, Instance, LogLevel, RawOutput, ToolFailure, ToolSpec, World};
use crate::sandbox::GuestState;
use crate::{budget, host_calls};

mod tool {
    wasmtime::component::bindgen!({
        world: "tool-plugin",
        path: "../../wit/v0.1.0",
        imports: {
            "warden:plugin/host.ask": async,
            default: trappable,
        },
        exports: { default: async },
    });
}

mod hook {
    wasmtime::component::bindgen!({
        world: "hook-plugin",
        path: "../../wit/v0.1.0",
        exports: { default: async },
        with: {
            "warden:plugin/host": super::tool::warden::plugin::host,
            "warden:plugin/types": super::tool::warden::plugin::types,
        },
    });
}

use hook::exports::warden::plugin::hooks;
use tool::warden::plugin::{host, types};

pub struct V0_1_0;

impl super::Contract for V0_1_0 {
    fn name(&self) -> &'static str {
        "warden:plugin@0.1.0"
    }

    fn world_of(&self, exports: &BTreeSet<String>) -> Option<World> {
        if exports.contains("warden:plugin/tool@0.1.0") {
            Some(World::Tool)
        } else if exports.contains("warden:plugin/hooks@0.1.0") {
            Some(World::Hook)
        } else {
            None
        }
    }

    fn add_to_linker(&self, l: &mut Linker<GuestState>, _world: World) -> wasmtime::Result<()> {
        // Both worlds import the same two interfaces. `types` holds only
        // types; `host` is linked by hand rather than through the generated
        // `add_to_linker`, whose signatures copy every string (and every
        // string of a list) before the host sees its size: here each is
        // read within its bound (crate::host_calls).
        l.instance("warden:plugin/types@0.1.0")?;
        let mut i = l.instance("warden:plugin/host@0.1.0")?;
        i.func_wrap(
            "log",
            |store: StoreContextMut<'_, GuestState>,
             (level, message): (host::LogLevel, WasmStr)| {
                let level = match level {
                    host::LogLevel::Debug => LogLevel::Debug,
                    host::LogLevel::Info => LogLevel::Info,
                    host::LogLevel::Warn => LogLevel::Warn,
                    host::LogLevel::Error => LogLevel::Error,
                };
                let mut store = store;
                let (line, len) = host_calls::prefix(&store, &message, budget::LOG_LINE)?;
                store.data_mut().guest_log(level, &line, len);
                Ok(())
            },
        )?;
        i.func_wrap(
            "progress",
            |store: StoreContextMut<'_, GuestState>,
             (title, metadata): (Option<WasmStr>, WasmStr)| {
                let mut store = store;
                let title = match &title {
                    Some(t) => Some(host_calls::prefix(&store, t, 4 * budget::TITLE_CHARS)?.0),
                    None => None,
                };
                let metadata = host_calls::bounded(&store, &metadata, budget::PROGRESS_UPDATE)?;
                store.data_mut().guest_progress(title, metadata);
                Ok(())
            },
        )?;
        i.func_wrap_async(
            "ask",
            |store: StoreContextMut<'_, GuestState>,
             (permission, patterns, metadata): (WasmStr, WasmList<WasmStr>, WasmStr)| {
                Box::new(async move {
                    let mut store = store;
                    let question =
                        host_calls::Question::read(&mut store, &permission, &patterns, &metadata)?;
                    Ok((store.data_mut().guest_ask(question).await,))
                })
            },
        )?;
        Ok(())
    }

    fn tool_guest(
        &self,
        pre: InstancePre<GuestState>,
    ) -> wasmtime::Result<Box<dyn super::ToolGuest>> {
        Ok(Box::new(ToolPre(tool::ToolPluginPre::new(pre)?)))
    }

    fn hook_guest(
        &self,
        pre: InstancePre<GuestState>,
    ) -> wasmtime::Result<Box<dyn super::HookGuest>> {
        Ok(Box::new(HookPre(hook::HookPluginPre::new(pre)?)))
    }
}

struct ToolPre(tool::ToolPluginPre<GuestState>);
struct HookPre(hook::HookPluginPre<GuestState>);
struct ToolInstance(tool::ToolPlugin);
struct HookInstance(hook::HookPlugin);

fn context(ctx: &CallContext) -> types::CallContext {
    types::CallContext {
        session_id: ctx.session_id.to_string(),
        message_id: ctx.message_id.to_string(),
        call_id: ctx.call_id.to_string(),
        agent: ctx.agent.clone(),
        directory: ctx.directory.clone(),
    }
}

fn from_output(o: types::ToolOutput) -> RawOutput {
    RawOutput {
        output: o.output,
        title: o.title,
        metadata: o.metadata,
    }
}

#[async_trait::async_trait]
impl super::ToolGuest for ToolPre {
    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Instance> {
        let instance = self.0.instantiate_async(&mut *store).await?;
        Ok(Instance::Tool(Box::new(ToolInstance(instance))))
    }
}

#[async_trait::async_trait]
impl super::HookGuest for HookPre {
    async fn instantiate(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Instance> {
        let instance = self.0.instantiate_async(&mut *store).await?;
        Ok(Instance::Hook(Box::new(HookInstance(instance))))
    }
}

#[async_trait::async_trait]
impl super::ToolInstance for ToolInstance {
    async fn describe(&self, store: &mut Store<GuestState>) -> wasmtime::Result<Vec<ToolSpec>> {
        let specs = self
            .0
            .warden_plugin_tool()
            .call_describe(&mut *store)
            .await?;
        Ok(specs
            .into_iter()
            .map(|s| ToolSpec {
                id: s.id,
                description: s.description,
                parameters: s.parameters,
            })
            .collect())
    }

    async fn execute(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
    ) -> wasmtime::Result<Result<RawOutput, ToolFailure>> {
        let result = self
            .0
            .warden_plugin_tool()
            .call_execute(&mut *store, &context(ctx), tool, arguments)
            .await?;
        Ok(match result {
            Ok(o) => Ok(from_output(o)),
            Err(types::ToolError::InvalidArguments(m)) => Err(ToolFailure::InvalidArguments(m)),
            Err(types::ToolError::Failed(m)) => Err(ToolFailure::Failed(m)),
            Err(types::ToolError::Denied(m)) => Err(ToolFailure::Denied(m)),
        })
    }
}

#[async_trait::async_trait]
impl super::HookInstance for HookInstance {
    async fn describe(&self, store: &mut Store<GuestState>) -> wasmtime::Result<HookSpec> {
        let spec = self
            .0
            .warden_plugin_hooks()
            .call_describe(&mut *store)
            .await?;
        Ok(HookSpec {
            before: spec.before,
            after: spec.after,
        })
    }

    async fn before(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
    ) -> wasmtime::Result<Before> {
        let decision = self
            .0
            .warden_plugin_hooks()
            .call_before(&mut *store, &context(ctx), tool, arguments)
            .await?;
        Ok(match decision {
            hooks::BeforeDecision::Allow => Before::Allow,
            hooks::BeforeDecision::Block(r) => Before::Block(r),
            hooks::BeforeDecision::Rewrite(a) => Before::Rewrite(a),
            hooks::BeforeDecision::Ask(r) => Before::Ask(r),
        })
    }

    async fn after(
        &self,
        store: &mut Store<GuestState>,
        ctx: &CallContext,
        tool: &str,
        arguments: &str,
        output: &RawOutput,
    ) -> wasmtime::Result<After> {
        let current = types::ToolOutput {
            output: output.output.clone(),
            title: output.title.clone(),
            metadata: output.metadata.clone(),
        };
        let decision = self
            .0
            .warden_plugin_hooks()
            .call_after(&mut *store, &context(ctx), tool, arguments, &current)
            .await?;
        Ok(match decision {
            hooks::AfterDecision::Keep => After::Keep,
            hooks::AfterDecision::Rewrite(o) => After::Rewrite(from_output(o)),
        })
    }
}

// The host interface this version imports is linked in `add_to_linker`
// above, served by the runtime's own implementation (crate::host_calls).
