//! Where tools and hooks come from. A [`ToolSource`] offers tools and runs
//! them (the wasm runtime's tool plugins and built-ins, an MCP server); a
//! [`HookHost`] offers `tool.execute.before` / `after` hooks and runs their
//! stages (the wasm runtime's hook plugins). A source implements only what
//! it has: an MCP server has no hooks, so it is no hook host.
//!
//! The [`Registry`] is what the core holds: its sources in order, its hook
//! hosts in order. It resolves the tools every round, runs a call on the
//! source that offers it, and lists each hook with the host that runs it.

use std::sync::Arc;

use crate::{
    AfterDecision, BeforeDecision, CallContext, CallObserver, GuestError, HookDef, ToolDef,
    ToolOutput,
};

/// Offers tools and runs them.
#[async_trait::async_trait]
pub trait ToolSource: Send + Sync {
    /// The tools this source offers now.
    fn tools(&self) -> Vec<ToolDef>;

    /// Whether this source runs `tool` (a definition it offered). The
    /// default looks it up in [`ToolSource::tools`]; a source with an index
    /// answers from that.
    fn offers(&self, tool: &ToolDef) -> bool {
        self.tools().iter().any(|t| t.is(tool))
    }

    /// Run one call. `arguments` is the JSON object the call ended up with
    /// (after any before hook rewrote it).
    async fn execute(
        &self,
        tool: &ToolDef,
        ctx: &CallContext,
        arguments: &str,
        observer: Arc<dyn CallObserver>,
    ) -> Result<ToolOutput, GuestError>;
}

/// One run of a hook's stage: which hook, around which call, seen by whom.
pub struct HookCall<'a> {
    pub hook: &'a HookDef,
    pub ctx: &'a CallContext,
    /// The id of the tool being called.
    pub tool: &'a str,
    /// The call's arguments as they stand (a JSON object).
    pub arguments: &'a str,
    pub observer: Arc<dyn CallObserver>,
}

/// Offers hooks and runs their stages.
#[async_trait::async_trait]
pub trait HookHost: Send + Sync {
    /// The hooks, in the order they run.
    fn hooks(&self) -> Vec<HookDef>;

    /// Run a hook's before stage.
    async fn before(&self, call: &HookCall<'_>) -> Result<BeforeDecision, GuestError>;

    /// Run a hook's after stage on the tool's `output`.
    async fn after(
        &self,
        call: &HookCall<'_>,
        output: &ToolOutput,
    ) -> Result<AfterDecision, GuestError>;
}

/// A hook and the host that runs it.
#[derive(Clone)]
pub struct Hook {
    pub def: HookDef,
    host: Arc<dyn HookHost>,
}

impl Hook {
    pub async fn before(&self, call: &HookCall<'_>) -> Result<BeforeDecision, GuestError> {
        self.host.before(call).await
    }

    pub async fn after(
        &self,
        call: &HookCall<'_>,
        output: &ToolOutput,
    ) -> Result<AfterDecision, GuestError> {
        self.host.after(call, output).await
    }
}

/// The tool sources and hook hosts a session uses. Empty by default: a
/// session that only talks.
#[derive(Clone, Default)]
pub struct Registry {
    sources: Vec<Arc<dyn ToolSource>>,
    hook_hosts: Vec<Arc<dyn HookHost>>,
}

impl Registry {
    /// A registry of one host that has both tools and hooks (the wasm
    /// runtime): its tools, then its hooks.
    pub fn of<H: ToolSource + HookHost + 'static>(host: Arc<H>) -> Registry {
        Registry::default()
            .with_source(host.clone())
            .with_hooks(host)
    }

    /// Add a tool source after the ones already here.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Registry {
        self.sources.push(source);
        self
    }

    /// Add a hook host; its hooks run after those already here.
    pub fn with_hooks(mut self, host: Arc<dyn HookHost>) -> Registry {
        self.hook_hosts.push(host);
        self
    }

    /// The tools every source offers now, in source order (resolved again
    /// every round).
    pub fn tools(&self) -> Vec<ToolDef> {
        self.sources.iter().flat_map(|s| s.tools()).collect()
    }

    /// The hooks, in the order they run, each with its host.
    pub fn hooks(&self) -> Vec<Hook> {
        self.hook_hosts
            .iter()
            .flat_map(|host| {
                host.hooks().into_iter().map(|def| Hook {
                    def,
                    host: host.clone(),
                })
            })
            .collect()
    }

    /// Run one call on the first source that offers the tool. A tool no
    /// source offers any more (its server went away between the round's
    /// resolution and the call) is unavailable, named.
    pub async fn execute(
        &self,
        tool: &ToolDef,
        ctx: &CallContext,
        arguments: &str,
        observer: Arc<dyn CallObserver>,
    ) -> Result<ToolOutput, GuestError> {
        match self.sources.iter().find(|s| s.offers(tool)) {
            Some(source) => source.execute(tool, ctx, arguments, observer).await,
            None => Err(GuestError::Unavailable {
                guest: tool.guest.to_string(),
                message: format!("no tool source offers {} now", tool.id),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestRef, PatternSource, ToolGlobs, Unattended};
    use serde_json::json;

    fn def(id: &str, plugin: &str) -> ToolDef {
        ToolDef {
            id: id.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            permission: id.into(),
            pattern: PatternSource::None,
            guest: GuestRef {
                plugin: plugin.into(),
                hash: "0".repeat(64),
            },
            mapped: true,
            server: None,
        }
    }

    /// Offers `ids` as plugin `name`; each call answers with the source's name.
    struct Named(&'static str, Vec<&'static str>);

    #[async_trait::async_trait]
    impl ToolSource for Named {
        fn tools(&self) -> Vec<ToolDef> {
            self.1.iter().map(|id| def(id, self.0)).collect()
        }
        async fn execute(
            &self,
            tool: &ToolDef,
            _: &CallContext,
            _: &str,
            _: Arc<dyn CallObserver>,
        ) -> Result<ToolOutput, GuestError> {
            Ok(ToolOutput {
                output: format!("{} ran {}", self.0, tool.id),
                title: String::new(),
                metadata: json!({}),
            })
        }
    }

    struct Hooks(&'static str);

    #[async_trait::async_trait]
    impl HookHost for Hooks {
        fn hooks(&self) -> Vec<HookDef> {
            let all = ToolGlobs::new(vec!["*".to_string()]);
            vec![HookDef {
                guest: GuestRef {
                    plugin: self.0.into(),
                    hash: "0".repeat(64),
                },
                before: all.clone(),
                after: all,
                fail_open: false,
            }]
        }
        async fn before(&self, call: &HookCall<'_>) -> Result<BeforeDecision, GuestError> {
            Ok(BeforeDecision::Block(format!(
                "{} saw {}",
                self.0, call.tool
            )))
        }
        async fn after(
            &self,
            _: &HookCall<'_>,
            _: &ToolOutput,
        ) -> Result<AfterDecision, GuestError> {
            Ok(AfterDecision::Keep)
        }
    }

    fn ctx() -> CallContext {
        CallContext {
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
            call_id: "call_1".into(),
            agent: "build".into(),
            directory: "/".into(),
        }
    }

    #[tokio::test]
    async fn a_call_runs_on_the_source_that_offers_it() {
        let registry = Registry::default()
            .with_source(Arc::new(Named("a", vec!["read", "grep"])))
            .with_source(Arc::new(Named("b", vec!["fetch"])));
        let ids: Vec<String> = registry.tools().into_iter().map(|t| t.id).collect();
        assert_eq!(ids, ["read", "grep", "fetch"]);
        let ran = registry
            .execute(&def("fetch", "b"), &ctx(), "{}", Arc::new(Unattended))
            .await
            .expect("b offers fetch");
        assert_eq!(ran.output, "b ran fetch");
        // The same id from another guest is not the tool the round resolved.
        let gone = registry
            .execute(&def("fetch", "a"), &ctx(), "{}", Arc::new(Unattended))
            .await
            .expect_err("a does not offer fetch");
        assert!(
            gone.to_string().contains("no tool source offers fetch now"),
            "{gone}"
        );
    }

    #[tokio::test]
    async fn hooks_run_on_their_own_host_in_order() {
        let registry = Registry::default()
            .with_hooks(Arc::new(Hooks("first")))
            .with_hooks(Arc::new(Hooks("second")));
        assert!(registry.tools().is_empty());
        let hooks = registry.hooks();
        let names: Vec<&str> = hooks.iter().map(|h| h.def.guest.plugin.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
        let ctx = ctx();
        let call = HookCall {
            hook: &hooks[1].def,
            ctx: &ctx,
            tool: "read",
            arguments: "{}",
            observer: Arc::new(Unattended),
        };
        assert_eq!(
            hooks[1].before(&call).await.expect("a decision"),
            BeforeDecision::Block("second saw read".into())
        );
    }
}
