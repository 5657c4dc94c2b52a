//! Hook plugins: the [`Hook`] trait and [`export_hook!`](crate::export_hook).

use crate::bindings::hook::exports::warden::plugin::hooks as wit;
use crate::{Context, Output, Value};

/// What a before hook decides about a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Before {
    /// Run the call as it is.
    Allow,
    /// Refuse the call; the reason is shown to the model.
    Block(String),
    /// Run the call with these arguments instead. The host checks permission
    /// again on them, so a rewrite can never widen what is allowed.
    Rewrite(Value),
    /// Ask whoever is attached first; the text says why.
    Ask(String),
}

/// What an after hook decides about a result.
#[derive(Debug, Clone, PartialEq)]
pub enum After {
    /// Leave the output as it is.
    Keep,
    /// Replace it.
    Rewrite(Output),
}

/// A `tool.execute.before` / `tool.execute.after` hook. Implement the stages
/// you need; the defaults let everything through.
pub trait Hook {
    /// Glob patterns over tool ids this hook's `before` stage wants to see.
    fn before_tools() -> Vec<String> {
        Vec::new()
    }
    /// Glob patterns over tool ids this hook's `after` stage wants to see.
    fn after_tools() -> Vec<String> {
        Vec::new()
    }
    /// Decide about a call before it runs.
    fn before(_ctx: &Context, _tool: &str, _args: Value) -> Before {
        Before::Allow
    }
    /// Look at (and maybe rewrite) a result before the model sees it.
    fn after(_ctx: &Context, _tool: &str, _args: &Value, _output: &Output) -> After {
        After::Keep
    }
}

#[doc(hidden)]
pub fn __describe<H: Hook>() -> wit::HookSpec {
    wit::HookSpec {
        before: H::before_tools(),
        after: H::after_tools(),
    }
}

#[doc(hidden)]
pub fn __before<H: Hook>(
    ctx: wit::CallContext,
    tool: &str,
    arguments: &str,
) -> wit::BeforeDecision {
    match serde_json::from_str::<Value>(arguments) {
        Ok(args) => match H::before(&Context::from(ctx), tool, args) {
            Before::Allow => wit::BeforeDecision::Allow,
            Before::Block(r) => wit::BeforeDecision::Block(r),
            Before::Rewrite(v) => wit::BeforeDecision::Rewrite(v.to_string()),
            Before::Ask(r) => wit::BeforeDecision::Ask(r),
        },
        Err(e) => wit::BeforeDecision::Block(format!("the hook could not read the arguments: {e}")),
    }
}

#[doc(hidden)]
pub fn __after<H: Hook>(
    ctx: wit::CallContext,
    tool: &str,
    arguments: &str,
    output: wit::ToolOutput,
) -> wit::AfterDecision {
    let args = serde_json::from_str::<Value>(arguments).unwrap_or(Value::Null);
    let output = Output::from_wit(output);
    match H::after(&Context::from(ctx), tool, &args, &output) {
        After::Keep => wit::AfterDecision::Keep,
        After::Rewrite(o) => wit::AfterDecision::Rewrite(o.into_wit()),
    }
}

/// Export one [`Hook`] as this component's `hooks` interface.
#[macro_export]
macro_rules! export_hook {
    ($hook:ty) => {
        #[doc(hidden)]
        pub struct __WardenHook;

        impl $crate::bindings::hook::exports::warden::plugin::hooks::Guest for __WardenHook {
            fn describe() -> $crate::bindings::hook::exports::warden::plugin::hooks::HookSpec {
                $crate::__describe::<$hook>()
            }
            fn before(
                ctx: $crate::bindings::hook::exports::warden::plugin::hooks::CallContext,
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> $crate::bindings::hook::exports::warden::plugin::hooks::BeforeDecision {
                $crate::__before::<$hook>(ctx, &tool, &arguments)
            }
            fn after(
                ctx: $crate::bindings::hook::exports::warden::plugin::hooks::CallContext,
                tool: ::std::string::String,
                arguments: ::std::string::String,
                output: $crate::bindings::hook::exports::warden::plugin::hooks::ToolOutput,
            ) -> $crate::bindings::hook::exports::warden::plugin::hooks::AfterDecision {
                $crate::__after::<$hook>(ctx, &tool, &arguments, output)
            }
        }

        $crate::bindings::hook::__export_hook_plugin!(__WardenHook with_types_in $crate::bindings::hook);
    };
}
