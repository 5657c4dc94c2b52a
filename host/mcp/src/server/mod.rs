//! `warden mcp`: every tool warden has loaded, served over MCP.
//!
//! Each MCP connection is a warden session (titled after the client), and
//! each `tools/call` goes through the same host boundary as a session's call
//! ([`warden_core::boundary::run`]): the default agent's rules and the
//! session's, warden's protected files, before and after hooks, the
//! plugin's grants and limits, and the audit trail. The trail of every call
//! starts with a `caller` row naming the MCP client. An `ask` becomes an
//! MCP elicitation when the client can answer one ([`ask`]); otherwise
//! nobody is attached and the call is refused with the reason.

mod ask;
mod tools;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use warden_core::Core;
use warden_core::boundary::{self, CallRequest, Rules};
use warden_core::clock::now_ms;
use warden_core::ledger::{AuditEntry, id};
use warden_core::tool::CallContext;
use warden_protocol::{MessageId, SessionId};

use crate::McpError as Error;

/// One MCP connection's view of warden.
#[derive(Clone)]
pub struct WardenMcp {
    core: Core,
    directory: PathBuf,
    conn: Arc<Connection>,
}

/// What one connection keeps: its session, who the client is, and the
/// elicitation bridge while the client can answer questions.
#[derive(Default)]
struct Connection {
    /// Async: held while the session is created, so two first calls at
    /// once make one session.
    session: tokio::sync::Mutex<Option<SessionId>>,
    caller: Mutex<String>,
    calls: AtomicU64,
    asker: Mutex<Option<ask::Bridge>>,
}

impl WardenMcp {
    /// Serve `core`'s tools; calls work in `directory`.
    pub fn new(core: Core, directory: PathBuf) -> WardenMcp {
        WardenMcp {
            core,
            directory,
            conn: Arc::new(Connection::default()),
        }
    }

    fn caller(&self) -> String {
        self.conn
            .caller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The connection's session, created at its first need.
    async fn session(&self) -> Result<SessionId, McpError> {
        let mut slot = self.conn.session.lock().await;
        if let Some(id) = &*slot {
            return Ok(id.clone());
        }
        let caller = self.caller();
        let title = if caller.is_empty() {
            "mcp: unnamed client".to_string()
        } else {
            format!("mcp: {caller}")
        };
        let info = self
            .core
            .create_session(&self.directory, &title)
            .await
            .map_err(|e| McpError::internal_error(format!("cannot start a session: {e}"), None))?;
        *slot = Some(info.id.clone());
        Ok(info.id)
    }

    async fn call(&self, request: CallToolRequestParams) -> Result<CallToolResult, McpError> {
        let Some(def) = self
            .core
            .tools()
            .tools()
            .into_iter()
            .find(|t| t.id == request.name)
        else {
            let names: Vec<String> = self
                .core
                .tools()
                .tools()
                .into_iter()
                .map(|t| t.id)
                .collect();
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "unknown tool `{}`; the tools available are: {}",
                request.name,
                names.join(", ")
            ))]));
        };
        let session_id = self.session().await?;
        let session =
            self.core.ledger().session(&session_id).await.map_err(|e| {
                McpError::internal_error(format!("cannot read the session: {e}"), None)
            })?;
        let agent = self
            .core
            .agents()
            .get(self.core.agents().default_name())
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .clone();
        let message_id = MessageId(id::ascending(MessageId::PREFIX));
        let n = self.conn.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call_id = format!("mcp_{n}");
        let input = Value::Object(request.arguments.unwrap_or_default());
        let caller = self.caller();
        // Who called comes first in the call's audit trail.
        let entry = AuditEntry {
            seq: 0,
            session_id: session_id.clone(),
            message_id: Some(message_id.clone()),
            call_id: Some(call_id.clone()),
            at: now_ms(),
            stage: "caller".into(),
            subject: format!("mcp:{caller}"),
            plugin_hash: None,
            decision: "called".into(),
            rule: None,
            duration_us: None,
            outcome: Some(def.id.clone()),
        };
        if let Err(e) = self.core.ledger().audit(&entry).await {
            // No call runs unaudited.
            return Err(McpError::internal_error(
                format!("cannot write the audit trail: {e}"),
                None,
            ));
        }
        // Each MCP request is a call of its own: no loop to repeat in.
        let ctx = CallContext {
            session_id: session_id.clone(),
            message_id,
            call_id: call_id.into(),
            agent: agent.name.clone(),
            directory: session.directory.clone(),
        };
        let rules = Rules::new(agent.policy.clone(), session_id.clone());
        let req = CallRequest::direct(ctx, def, input, rules);
        Ok(tools::result(
            boundary::run(&self.core.call_env(), req).await,
        ))
    }
}

impl ServerHandler for WardenMcp {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "warden's sandboxed WebAssembly tools. Every call is checked against warden's permission rules and runs with only the plugin's grants.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let info = &request.client_info;
        *self.conn.caller.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("{} {}", info.name, info.version).trim().to_string();
        if request.capabilities.elicitation.is_some() {
            let session = self.session().await?;
            let bridge = ask::Bridge::start(self.core.clone(), session, context.peer.clone());
            *self.conn.asker.lock().unwrap_or_else(|p| p.into_inner()) = Some(bridge);
        }
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.core.tools().tools();
        Ok(ListToolsResult::with_all_items(
            tools.iter().map(tools::to_mcp).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request).await.map(CallToolResponse::from)
    }
}

/// Serve over stdin and stdout until the client hangs up.
pub async fn serve_stdio(core: Core, directory: PathBuf) -> Result<(), Error> {
    let service = WardenMcp::new(core, directory)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Serve(e.to_string()))?;
    service
        .waiting()
        .await
        .map_err(|e| Error::Serve(e.to_string()))?;
    Ok(())
}

/// The streamable HTTP endpoint, for `warden serve` to mount (at `/warden/mcp`):
/// one warden session per MCP session. `any_host` lifts the endpoint's own
/// loopback-only `Host` check, for a server that checks a token instead.
pub fn http_service(
    core: Core,
    directory: PathBuf,
    any_host: bool,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    WardenMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let mut config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
    if any_host {
        config = config.with_allowed_hosts(Vec::<String>::new());
    }
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(WardenMcp::new(core.clone(), directory.clone())),
        Default::default(),
        config,
    )
}
