//! warden and the Model Context Protocol, both ways, on the official SDK
//! (`rmcp`):
//!
//! - [`server`]: `warden mcp` (stdio) and the `/warden/mcp` endpoint of `warden
//!   serve` (streamable HTTP) offer every loaded tool to any MCP client;
//!   each call crosses warden's host boundary like a session's call.
//! - [`client`]: the config's `mcp` servers as tools in warden sessions,
//!   behind the same permission check, hooks and audit.
//!
//! Where to start reading: `server/mod.rs` (`WardenMcp::call`), then
//! `client/mod.rs` (`McpTools`).

pub mod client;
pub mod server;

pub use client::McpTools;
pub use server::{WardenMcp, http_service, serve_stdio};

/// What can go wrong at the MCP seams.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A configured MCP server could not be started, reached or listed;
    /// raised when a session's tools are loaded, which then stops.
    #[error("MCP server {server}: {message}")]
    Connect { server: String, message: String },
    /// `warden mcp` could not serve its client (the handshake or the
    /// transport failed); the command ends with this error.
    #[error("cannot serve MCP: {0}")]
    Serve(String),
}
