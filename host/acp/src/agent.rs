//! One ACP connection: the client's requests, answered with warden
//! sessions.
//!
//! - `initialize` records who the client is (its `clientInfo`, named in
//!   the audit trail of every call its sessions make) and what it can show.
//! - `session/new` starts a warden session in a directory inside the one
//!   `warden acp` serves; `session/load` replays a stored one as updates,
//!   `session/resume` opens one without the replay; `session/list` lists
//!   the sessions in the served directory; `session/close` forgets one.
//! - `session/prompt` runs the loop ([`crate::turn`]); `session/cancel`
//!   aborts it as the HTTP API's abort does.
//!
//! MCP servers a client passes are never started: they are native
//! processes the client picks, and a client may only tighten what the
//! operator's config allows, never widen it. They are named on stderr and
//! in the answer's `_meta`, with what the operator can do instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{
    self as acp, AgentCapabilities, AuthenticateResponse, ClientCapabilities, ClientRequest,
    CloseSessionResponse, Error, Implementation, InitializeResponse, ListSessionsResponse,
    LoadSessionResponse, McpCapabilities, McpServer, NewSessionResponse, PromptCapabilities,
    ResumeSessionResponse, SessionCapabilities, SessionInfo as AcpSession, SessionNotification,
};
use agent_client_protocol_schema::{MethodDispatchError, ProtocolVersion};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warden_core::Core;
use warden_core::boundary::CallerGuard;
use warden_protocol::{ModelRef, SessionId};

use crate::rpc::{Peer, code};
use crate::updates::{self, Tools};

/// How `warden acp` serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sessions work in this directory or below it (canonical).
    pub root: PathBuf,
    /// The model of prompts (default: the agent's, else the config's).
    pub model: Option<ModelRef>,
}

/// Who the client said it is, and what it can show.
#[derive(Default)]
pub struct Client {
    pub name: String,
    pub capabilities: Option<ClientCapabilities>,
}

impl Client {
    /// How the audit trail names it.
    pub fn caller(&self) -> String {
        if self.name.is_empty() {
            "acp:unnamed client".into()
        } else {
            format!("acp:{}", self.name)
        }
    }

    /// Whether it shows `compaction` updates.
    pub fn shows_compaction(&self) -> bool {
        self.session_caps().is_some_and(|s| s.compaction.is_some())
    }

    /// Whether it shows `notice` updates.
    pub fn shows_notices(&self) -> bool {
        self.session_caps().is_some_and(|s| s.notices.is_some())
    }

    fn session_caps(&self) -> Option<&agent_client_protocol_schema::v1::ClientSessionCapabilities> {
        self.capabilities.as_ref().and_then(|c| c.session.as_ref())
    }
}

/// A session this connection has open.
pub struct Open {
    pub directory: PathBuf,
    /// Set while a prompt runs: cancelling it aborts the run.
    pub prompting: Option<Arc<CancellationToken>>,
    _caller: CallerGuard,
}

/// A prompt under way in a session; the session is free again when it drops.
pub struct Prompting {
    agent: Arc<Agent>,
    pub id: SessionId,
    /// The directory the session works in, as it was when the prompt came.
    pub directory: PathBuf,
    pub token: Arc<CancellationToken>,
}

impl Drop for Prompting {
    fn drop(&mut self) {
        let mut open = self.agent.lock_open();
        if let Some(session) = open.get_mut(&self.id)
            && session
                .prompting
                .as_ref()
                .is_some_and(|t| Arc::ptr_eq(t, &self.token))
        {
            session.prompting = None;
        }
    }
}

/// The connection's state.
pub struct Agent {
    pub core: Core,
    pub options: Options,
    pub peer: Peer,
    pub client: Mutex<Option<Client>>,
    pub open: Mutex<HashMap<SessionId, Open>>,
}

/// An error answer.
pub fn error(code: i32, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

fn invalid(message: impl Into<String>) -> Error {
    error(code::INVALID_PARAMS, message)
}

fn internal(e: impl std::fmt::Display) -> Error {
    error(code::INTERNAL_ERROR, e.to_string())
}

fn encode(v: impl Serialize) -> Result<Value, Error> {
    serde_json::to_value(v).map_err(internal)
}

impl Agent {
    pub fn new(core: Core, options: Options, peer: Peer) -> Agent {
        Agent {
            core,
            options,
            peer,
            client: Mutex::new(None),
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn lock_open(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn lock_client(&self) -> std::sync::MutexGuard<'_, Option<Client>> {
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answer one request.
    pub async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: &Value,
        prompting: Option<Prompting>,
    ) -> Result<Value, Error> {
        // Params left out are an empty object (JSON-RPC allows omitting them).
        let empty = json!({});
        let params = if params.is_null() { &empty } else { params };
        let request =
            ClientRequest::from_method_and_params(method, params).map_err(|e| match e {
                MethodDispatchError::UnknownMethod { .. } => error(
                    code::METHOD_NOT_FOUND,
                    format!("warden's ACP agent has no method `{method}`"),
                ),
                other => invalid(other.to_string()),
            })?;
        if !matches!(request, ClientRequest::InitializeRequest(_)) && self.lock_client().is_none() {
            return Err(error(
                code::INVALID_REQUEST,
                format!("`{method}` before `initialize`; initialize the connection first"),
            ));
        }
        match request {
            ClientRequest::InitializeRequest(r) => {
                if self.lock_client().is_some() {
                    return Err(error(
                        code::INVALID_REQUEST,
                        "the connection is initialized already; initialize is sent once",
                    ));
                }
                let name = r
                    .client_info
                    .map(|i| {
                        format!("{} {}", clean(&i.name), clean(&i.version))
                            .trim()
                            .to_string()
                    })
                    .unwrap_or_default();
                *self.lock_client() = Some(Client {
                    name,
                    capabilities: Some(r.client_capabilities),
                });
                encode(initialize_response())
            }
            ClientRequest::AuthenticateRequest(_) => encode(AuthenticateResponse::new()),
            ClientRequest::NewSessionRequest(r) => {
                one_directory(&r.additional_directories)?;
                let dir = self.confine(&r.cwd)?;
                let ignored = self.ignore_mcp(&r.mcp_servers);
                // The client as the audit trail names it ("acp:Zed 0.210").
                let title = self.caller();
                let session = self
                    .core
                    .create_session(&dir, &title)
                    .await
                    .map_err(internal)?;
                self.open_session(&session.id, dir)?;
                let mut response =
                    NewSessionResponse::new(acp::SessionId::new(session.id.0.as_str()));
                if let Some(meta) = ignored {
                    response = response.meta(meta);
                }
                encode(response)
            }
            ClientRequest::LoadSessionRequest(r) => {
                one_directory(&r.additional_directories)?;
                let id = SessionId(r.session_id.0.to_string());
                let dir = self.reopen(&id, &r.cwd).await?;
                let ignored = self.ignore_mcp(&r.mcp_servers);
                let messages = self.core.ledger().messages(&id).await.map_err(internal)?;
                let tools = Tools::new(self.core.tools().tools());
                for update in updates::replay(&messages, &tools, &dir) {
                    // At the client's pace: a long history is not queued whole.
                    self.peer.room().await;
                    self.peer.notify(
                        "session/update",
                        SessionNotification::new(acp::SessionId::new(id.0.as_str()), update),
                    );
                }
                let mut response = LoadSessionResponse::new();
                if let Some(meta) = ignored {
                    response = response.meta(meta);
                }
                encode(response)
            }
            ClientRequest::ResumeSessionRequest(r) => {
                one_directory(&r.additional_directories)?;
                let id = SessionId(r.session_id.0.to_string());
                self.reopen(&id, &r.cwd).await?;
                self.ignore_mcp(&r.mcp_servers);
                encode(ResumeSessionResponse::new())
            }
            ClientRequest::ListSessionsRequest(r) => {
                let filter = match &r.cwd {
                    Some(cwd) => Some(self.confine(cwd)?),
                    None => None,
                };
                let mut sessions = self.core.ledger().sessions().await.map_err(internal)?;
                sessions.sort_by_key(|s| std::cmp::Reverse(s.time.updated));
                let listed = sessions
                    .into_iter()
                    .filter(|s| {
                        let dir = Path::new(&s.directory);
                        dir.starts_with(&self.options.root)
                            && filter.as_ref().is_none_or(|f| dir == f)
                    })
                    .map(|s| {
                        AcpSession::new(acp::SessionId::new(s.id.0.as_str()), &s.directory)
                            .title(s.title.clone())
                            .updated_at(rfc3339(s.time.updated))
                    })
                    .collect();
                encode(ListSessionsResponse::new(listed))
            }
            ClientRequest::CloseSessionRequest(r) => {
                let id = SessionId(r.session_id.0.to_string());
                let Some(open) = self.lock_open().remove(&id) else {
                    return Err(not_open(&id));
                };
                // Its run stops too (the turn keeps asking the core until it does).
                if let Some(token) = open.prompting {
                    token.cancel();
                    self.core.cancel(&id);
                }
                encode(CloseSessionResponse::new())
            }
            ClientRequest::PromptRequest(r) => {
                let prompting = match prompting {
                    Some(p) => p,
                    None => self.begin_prompt(&SessionId(r.session_id.0.to_string()))?,
                };
                crate::turn::prompt(self, r, prompting).await
            }
            ClientRequest::SetSessionModeRequest(_) => Err(invalid(
                "warden sessions have no modes; the operator's config sets the agent and its rules",
            )),
            ClientRequest::SetSessionConfigOptionRequest(_) => Err(invalid(
                "warden sessions have no config options; the operator's config sets them",
            )),
            _ => Err(error(
                code::METHOD_NOT_FOUND,
                format!("warden's ACP agent does not implement `{method}`"),
            )),
        }
    }

    /// Mark a session as running a prompt, before the prompt's task starts,
    /// so a `session/cancel` read right after it is heard.
    pub fn begin_prompt(self: &Arc<Self>, id: &SessionId) -> Result<Prompting, Error> {
        let mut open = self.lock_open();
        let Some(session) = open.get_mut(id) else {
            return Err(not_open(id));
        };
        if session.prompting.is_some() {
            return Err(error(
                code::INVALID_REQUEST,
                format!(
                    "session {id} is already running a prompt; wait for its answer or send session/cancel"
                ),
            ));
        }
        let token = Arc::new(CancellationToken::new());
        session.prompting = Some(token.clone());
        Ok(Prompting {
            agent: self.clone(),
            id: id.clone(),
            directory: session.directory.clone(),
            token,
        })
    }

    /// A notification from the client.
    pub fn notified(&self, method: &str, params: &Value) {
        if method != "session/cancel" {
            // Notifications get no answer, not even an error.
            tracing::debug!(method, "an ACP notification warden does not handle");
            return;
        }
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            tracing::warn!("session/cancel without a sessionId");
            return;
        };
        let id = SessionId(id.to_string());
        let open = self.lock_open();
        if let Some(token) = open.get(&id).and_then(|o| o.prompting.as_ref()) {
            token.cancel();
            self.core.cancel(&id);
        }
    }

    /// Abort every run this connection started: its client has gone.
    pub fn hang_up(&self) {
        let open = std::mem::take(&mut *self.lock_open());
        for (id, o) in open {
            if let Some(token) = o.prompting {
                token.cancel();
                self.core.cancel(&id);
            }
        }
    }

    pub fn caller(&self) -> String {
        self.lock_client()
            .as_ref()
            .map(Client::caller)
            .unwrap_or_else(|| "acp:unnamed client".into())
    }

    /// Open `id` on this connection. Refused while a prompt of it runs
    /// here: opening it again would lose the prompt's cancel. Checked and
    /// opened under one lock, so a prompt read meanwhile cannot slip between.
    fn open_session(&self, id: &SessionId, directory: PathBuf) -> Result<(), Error> {
        let caller = self.caller();
        let mut open = self.lock_open();
        if open.get(id).is_some_and(|o| o.prompting.is_some()) {
            return Err(invalid(format!(
                "session {id} is running a prompt on this connection; wait for its answer or send session/cancel"
            )));
        }
        let caller = self.core.callers().open(id, caller);
        open.insert(
            id.clone(),
            Open {
                directory,
                prompting: None,
                _caller: caller,
            },
        );
        Ok(())
    }

    /// A stored session, opened on this connection: it must exist, work in
    /// the directory the client names, and that directory must be served.
    async fn reopen(&self, id: &SessionId, cwd: &Path) -> Result<PathBuf, Error> {
        let dir = self.confine(cwd)?;
        let session = self.core.ledger().session(id).await.map_err(|_| {
            error(
                code::RESOURCE_NOT_FOUND,
                format!("no session {id} in this ledger"),
            )
            .data(json!({"sessionId": id.0}))
        })?;
        if Path::new(&session.directory) != dir {
            return Err(invalid(format!(
                "session {id} works in {}, not in {}",
                session.directory,
                dir.display()
            )));
        }
        self.open_session(id, dir.clone())?;
        Ok(dir)
    }

    /// The client's directory, if warden serves it: absolute, existing,
    /// and inside the directory `warden acp` was started for.
    fn confine(&self, cwd: &Path) -> Result<PathBuf, Error> {
        if !cwd.is_absolute() {
            return Err(invalid(format!(
                "cwd {} is not an absolute path",
                cwd.display()
            )));
        }
        let dir = std::fs::canonicalize(cwd)
            .map_err(|e| invalid(format!("cwd {} cannot be used: {e}", cwd.display())))?;
        if !dir.is_dir() {
            return Err(invalid(format!("cwd {} is not a directory", dir.display())));
        }
        if !dir.starts_with(&self.options.root) {
            return Err(invalid(format!(
                "cwd {} is outside the directory warden serves ({}); start `warden acp --dir` there to work in it",
                dir.display(),
                self.options.root.display()
            )));
        }
        Ok(dir)
    }

    /// MCP servers the client asked for, not started: the `_meta` that says so.
    fn ignore_mcp(&self, servers: &[McpServer]) -> Option<serde_json::Map<String, Value>> {
        if servers.is_empty() {
            return None;
        }
        let names: Vec<String> = servers.iter().map(mcp_name).collect();
        let why = "warden does not start MCP servers a client names: they would run outside warden's sandbox and its operator's rules. An operator who trusts one adds it to the config's `mcp` section.";
        tracing::warn!(servers = ?names, "{why}");
        let mut meta = serde_json::Map::new();
        meta.insert(
            "warden".into(),
            json!({"ignoredMcpServers": names, "why": why}),
        );
        Some(meta)
    }
}

/// A session runs in one directory: extra roots are refused, not ignored.
fn one_directory(extra: &[PathBuf]) -> Result<(), Error> {
    if extra.is_empty() {
        Ok(())
    } else {
        Err(invalid(
            "warden sessions work in one directory; leave additionalDirectories out",
        ))
    }
}

/// What a client says of itself, as it may be stored and shown: no
/// control characters, at most 100 characters.
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(100).collect()
}

fn mcp_name(server: &McpServer) -> String {
    match serde_json::to_value(server) {
        Ok(v) => v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_string(),
        Err(_) => "unnamed".into(),
    }
}

pub fn not_open(id: &SessionId) -> Error {
    error(
        code::RESOURCE_NOT_FOUND,
        format!(
            "session {id} is not open on this connection; send session/new or session/load first"
        ),
    )
    .data(json!({"sessionId": id.0}))
}

fn initialize_response() -> InitializeResponse {
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
        .mcp_capabilities(McpCapabilities::new())
        .session_capabilities(
            SessionCapabilities::new()
                .list(agent_client_protocol_schema::v1::SessionListCapabilities::new())
                .resume(agent_client_protocol_schema::v1::SessionResumeCapabilities::new())
                .close(agent_client_protocol_schema::v1::SessionCloseCapabilities::new()),
        );
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")).title("warden"))
}

/// Milliseconds since the epoch as RFC 3339.
fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
