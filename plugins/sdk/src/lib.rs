//! Write warden plugins in Rust.
//!
//! A tool is a type that implements [`Tool`]; [`export_tools!`] turns a list
//! of them into a WebAssembly component that the warden host loads:
//!
//! ```ignore
//! use warden_plugin_sdk::{Context, Error, Output, Tool, json};
//!
//! #[derive(serde::Deserialize)]
//! struct Args { name: String }
//!
//! struct Greet;
//! impl Tool for Greet {
//!     type Args = Args;
//!     const ID: &'static str = "greet";
//!     const DESCRIPTION: &'static str = "Say hello to someone.";
//!     fn parameters() -> warden_plugin_sdk::Value {
//!         json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
//!     }
//!     fn execute(_ctx: &Context, args: Args) -> Result<Output, Error> {
//!         Ok(Output::text(format!("hello, {}", args.name)))
//!     }
//! }
//!
//! warden_plugin_sdk::export_tools!(Greet);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component. See `plugins/README.md`.
//!
//! Each call runs in a fresh instance, so statics do not survive between
//! calls. A panic ends the call as an error the host reports; it never
//! reaches the host process.

pub use serde_json::{Value, json};

/// The generated bindings of the WIT worlds, one module per world. Public so
/// the export macros can reach them; plugin code should not need them.
///
/// Both worlds can be compiled into one build: cargo unifies the features of
/// a crate shared by a workspace's members, so a workspace holding tools and
/// hooks builds this crate once with `tool` and `hook` on. That is safe
/// because a world's exports reach a component only through its export macro
/// (`pub_export_macro` leaves them out of the bindings' own metadata), and
/// the hook world then reuses the tool world's `types` and `host`, so there
/// is one `CallContext` and one `ToolOutput` type.
#[doc(hidden)]
pub mod bindings {
    #[cfg(feature = "tool")]
    pub mod tool {
        wit_bindgen::generate!({
            path: "wit",
            world: "tool-plugin",
            pub_export_macro: true,
            export_macro_name: "__export_tool_plugin",
            default_bindings_module: "warden_plugin_sdk::bindings::tool",
        });
    }

    #[cfg(all(feature = "hook", feature = "tool"))]
    pub mod hook {
        wit_bindgen::generate!({
            path: "wit",
            world: "hook-plugin",
            pub_export_macro: true,
            export_macro_name: "__export_hook_plugin",
            default_bindings_module: "warden_plugin_sdk::bindings::hook",
            with: {
                "warden:plugin/types@0.1.0": crate::bindings::tool::warden::plugin::types,
                "warden:plugin/host@0.1.0": crate::bindings::tool::warden::plugin::host,
            },
        });
    }

    #[cfg(all(feature = "hook", not(feature = "tool")))]
    pub mod hook {
        wit_bindgen::generate!({
            path: "wit",
            world: "hook-plugin",
            pub_export_macro: true,
            export_macro_name: "__export_hook_plugin",
            default_bindings_module: "warden_plugin_sdk::bindings::hook",
        });
    }

    #[cfg(feature = "tool")]
    pub use tool::warden::plugin::{host, types};

    #[cfg(all(feature = "hook", not(feature = "tool")))]
    pub use hook::warden::plugin::{host, types};
}

#[cfg(not(any(feature = "tool", feature = "hook")))]
compile_error!("enable the `tool` feature (a tool plugin) or the `hook` feature (a hook plugin)");

pub mod glob;
pub mod host;
pub mod paths;

#[cfg(feature = "tool")]
mod tool;
#[cfg(feature = "tool")]
pub use tool::*;

#[cfg(feature = "hook")]
mod hook;
#[cfg(feature = "hook")]
pub use hook::*;

/// Where a call comes from.
#[derive(Debug, Clone)]
pub struct Context {
    /// The session the call belongs to.
    pub session_id: String,
    /// The assistant message that holds the tool part.
    pub message_id: String,
    /// The model's id for this call.
    pub call_id: String,
    /// The agent that made the call.
    pub agent: String,
    /// The session's working directory: an absolute path, which is also where
    /// the host mounted it for this guest if the plugin was granted it.
    pub directory: String,
}

impl Context {
    /// Resolve a path the model gave (absolute, or relative to the working
    /// directory) to an absolute path inside the working directory.
    pub fn resolve(&self, path: &str) -> Result<String, Error> {
        paths::resolve_within(&self.directory, path).map_err(Error::InvalidArguments)
    }
}

impl From<bindings::types::CallContext> for Context {
    fn from(c: bindings::types::CallContext) -> Self {
        Context {
            session_id: c.session_id,
            message_id: c.message_id,
            call_id: c.call_id,
            agent: c.agent,
            directory: c.directory,
        }
    }
}

/// What a successful call returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The text the model sees.
    pub output: String,
    /// A short line for people.
    pub title: String,
    /// Structured details for UIs (a JSON object).
    pub metadata: Value,
}

impl Output {
    /// An output with only text for the model.
    pub fn text(output: impl Into<String>) -> Self {
        Output {
            output: output.into(),
            title: String::new(),
            metadata: json!({}),
        }
    }

    /// Set the line shown to people.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// Set the structured details.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    fn into_wit(self) -> bindings::types::ToolOutput {
        bindings::types::ToolOutput {
            output: self.output,
            title: self.title,
            metadata: self.metadata.to_string(),
        }
    }

    #[cfg(feature = "hook")]
    fn from_wit(o: bindings::types::ToolOutput) -> Self {
        Output {
            output: o.output,
            title: o.title,
            metadata: serde_json::from_str(&o.metadata).unwrap_or_else(|_| json!({})),
        }
    }
}

/// Why a call failed. The message is shown to the model: say what was wrong
/// and what to do instead.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The arguments do not fit the tool's parameters.
    InvalidArguments(String),
    /// The tool ran and could not do the job.
    Failed(String),
    /// The host refused something the tool asked for.
    Denied(String),
}

impl Error {
    /// A failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        Error::Failed(message.into())
    }

    #[cfg(feature = "tool")]
    fn into_wit(self) -> bindings::types::ToolError {
        use bindings::types::ToolError;
        match self {
            Error::InvalidArguments(m) => ToolError::InvalidArguments(m),
            Error::Failed(m) => ToolError::Failed(m),
            Error::Denied(m) => ToolError::Denied(m),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidArguments(m) => write!(f, "invalid arguments: {m}"),
            Error::Failed(m) => f.write_str(m),
            Error::Denied(m) => write!(f, "denied: {m}"),
        }
    }
}
