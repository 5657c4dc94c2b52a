//! The runtime's errors: loading plugins (a guest call's failures are
//! `warden_tool::GuestError`, which end as an error tool part).

/// Why the runtime or a plugin could not be set up. Raised at start-up and
/// by `warden plugin verify`; the host refuses the plugin and says why.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// wasmtime could not be configured.
    #[error("the WebAssembly engine could not start: {0}")]
    Engine(String),
    /// The bytes are not a valid component for this engine.
    #[error("not a valid WebAssembly component: {0}")]
    Compile(String),
    /// The plugin's file could not be read.
    #[error("plugin {plugin}: cannot read {path}: {reason}")]
    Read {
        plugin: String,
        path: String,
        reason: String,
    },
    /// The component's sha256 is not the one the config pins.
    #[error(
        "plugin {plugin}: integrity check failed: the config pins sha256 {expected}, but {path} has {actual}; \
         rebuild or re-pin it (`warden plugin inspect {plugin}` shows the hash)"
    )]
    Integrity {
        plugin: String,
        path: String,
        expected: String,
        actual: String,
    },
    /// The component does not implement a supported world of the contract.
    #[error("plugin {plugin}: {reason}")]
    Contract { plugin: String, reason: String },
    /// The plugin's self-description is unusable.
    #[error("plugin {plugin}: invalid self-description: {reason}")]
    Describe { plugin: String, reason: String },
    /// Two plugins provide the same tool.
    #[error("tool {tool} is provided by both {first} and {second}; rename one or drop a plugin")]
    DuplicateTool {
        tool: String,
        first: String,
        second: String,
    },
}
