//! `warden:plugin@0.1.0`: its generated bindings, and the conversions
//! between them and the runtime's own types ([`super`]).

use std::collections::BTreeSet;

use warden_core::tool::CallContext;
use wasmtime::Store;
use wasmtime::component::{HasSelf, InstancePre, Linker};

use super::{After, Before, HookSpec, Instance, LogLevel, RawOutput, ToolFailure, ToolSpec, World};
use crate::sandbox::GuestState;

mod tool {
    wasmtime::component::bindgen!({
        world: "tool-plugin",
        path: "../../wit",
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
        path: "../../wit",
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

    fn add_to_linker(&self, l: &mut Linker<GuestState>, world: World) -> wasmtime::Result<()> {
        match world {
            World::Tool => {
                tool::ToolPlugin::add_to_linker::<GuestState, HasSelf<GuestState>>(l, |s| s)
            }
            World::Hook => {
                hook::HookPlugin::add_to_linker::<GuestState, HasSelf<GuestState>>(l, |s| s)
            }
        }
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

// The host interface this version imports, served by the runtime's own
// implementation (crate::host_calls).

impl types::Host for GuestState {}

impl host::Host for GuestState {
    fn log(&mut self, level: host::LogLevel, message: String) -> wasmtime::Result<()> {
        let level = match level {
            host::LogLevel::Debug => LogLevel::Debug,
            host::LogLevel::Info => LogLevel::Info,
            host::LogLevel::Warn => LogLevel::Warn,
            host::LogLevel::Error => LogLevel::Error,
        };
        self.guest_log(level, message);
        Ok(())
    }

    fn progress(&mut self, title: Option<String>, metadata: String) -> wasmtime::Result<()> {
        self.guest_progress(title, metadata);
        Ok(())
    }

    async fn ask(
        &mut self,
        permission: String,
        patterns: Vec<String>,
        metadata: String,
    ) -> Result<(), String> {
        self.guest_ask(permission, patterns, metadata).await
    }
}
