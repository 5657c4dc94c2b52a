//! The warden plugin runtime: tools and hooks as WebAssembly components
//! (wasm32-wasip2) run by wasmtime, behind warden-tool's
//! [`ToolSource`](warden_tool::ToolSource) and
//! [`HookHost`](warden_tool::HookHost) seams.
//!
//! Where to start reading: [`WasmHost`] (loads plugins, runs calls), then
//! [`sandbox`] (what one call's store may touch: grants, limits, linking)
//! and [`plugin`] (integrity, compilation cache, self-description). The
//! generated WIT bindings stay private in `bindings`, one module per
//! supported contract version.

mod bindings;
pub mod budget;
pub mod builtin;
pub mod cache;
mod code_in_place;
pub mod engine;
mod engine_settings;
pub mod error;
mod fs_gate;
pub mod guest_output;
pub mod host;
mod host_calls;
pub mod net;
pub mod plugin;
pub mod plugin_dir;
pub mod prepared;
pub mod sandbox;

pub use error::RuntimeError;
pub use host::{CompileStats, WasmHost};
