//! warden as an Agent Client Protocol agent (`warden acp`): an editor
//! (Zed, a JetBrains IDE, a Neovim plugin) runs warden on stdio and drives
//! its sessions with JSON-RPC, protocol version 1, on the protocol's
//! official schema crate (`agent-client-protocol-schema`).
//!
//! Every tool call still goes through warden's boundary: the operator's
//! rules, the plugin's grants, the hooks and the audit trail. The editor is
//! one more front end: its questions arrive as `session/request_permission`
//! ([`ask`]), its calls are named after its `clientInfo` in the audit trail,
//! and it may not widen what the operator allows (directories outside the
//! served one, MCP servers of its own).
//!
//! Where to start reading: [`serve`] (the read loop), then `agent.rs`
//! (the methods), `turn.rs` (a prompt) and `updates.rs` (parts as updates).

mod agent;
mod ask;
pub mod rpc;
mod turn;
pub mod updates;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use warden_core::Core;
use warden_protocol::SessionId;

pub use agent::Options;
use rpc::{Incoming, Line, Peer, code};

/// What can end `warden acp` with an error.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("cannot read from the ACP client: {0}")]
    Read(#[from] std::io::Error),
}

/// Serve one client on stdin and stdout until it hangs up.
pub async fn serve_stdio(core: Core, options: Options) -> Result<(), AcpError> {
    serve(core, options, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serve one client on `input` and `output` until `input` ends. Each
/// request runs as a task of its own (a prompt runs while cancels and
/// permission answers arrive); notifications and answers are handled as
/// they are read. When the client hangs up, the runs it started are
/// aborted, as the HTTP API's abort does.
pub async fn serve<R, W>(core: Core, options: Options, input: R, output: W) -> Result<(), AcpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, writer) = Peer::new(output);
    let agent = Arc::new(agent::Agent::new(core, options, peer.clone()));
    let mut input = tokio::io::BufReader::new(input);
    let mut requests = JoinSet::new();
    let ended = loop {
        let read = tokio::select! {
            read = rpc::read_line(&mut input) => read,
            _ = peer.gone() => break Ok(()),
        };
        let line = match read {
            Ok(Line::Text(line)) => line,
            Ok(Line::TooLong) => {
                peer.respond(
                    agent_client_protocol_schema::v1::RequestId::Null,
                    Err(agent::error(
                        code::PARSE_ERROR,
                        format!("a line over {} bytes was skipped", rpc::MAX_LINE),
                    )),
                );
                continue;
            }
            Ok(Line::End) => break Ok(()),
            Err(e) => break Err(AcpError::Read(e)),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match rpc::parse(&line) {
            Err(bad) => peer.respond(bad.id, Err(bad.error)),
            // Inline: what follows it is read as the initialized client's.
            Ok(Incoming::Request { id, method, params }) if method == "initialize" => {
                let result = guarded(agent.handle(&method, &params, None)).await;
                peer.respond(id, result);
            }
            Ok(Incoming::Request { id, method, params }) => {
                // A prompt marks its session before its task starts, so a
                // `session/cancel` read next is heard.
                let prompting = match prompted_session(&method, &params) {
                    Some(session) => match agent.begin_prompt(&session) {
                        Ok(prompting) => Some(prompting),
                        Err(e) => {
                            peer.respond(id, Err(e));
                            continue;
                        }
                    },
                    None => None,
                };
                let agent = agent.clone();
                requests.spawn(async move {
                    let result = guarded(agent.handle(&method, &params, prompting)).await;
                    agent.peer.respond(id, result);
                });
            }
            Ok(Incoming::Notification { method, params }) => agent.notified(&method, &params),
            Ok(Incoming::Response { id, result }) => {
                if !peer.answered(&id, result) {
                    tracing::debug!(%id, "an answer to no request warden is waiting on");
                }
            }
        }
        // Finished requests are reaped as the loop goes, so the set stays small.
        while let Some(done) = requests.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                tracing::error!(error = %e, "an ACP request handler panicked");
            }
        }
    };
    agent.hang_up();
    peer.hang_up();
    // Let aborted prompts answer (their client may still read), briefly.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while requests.join_next().await.is_some() {}
    })
    .await;
    drop(requests);
    drop(agent);
    drop(peer);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    ended
}

/// The session a `session/prompt` names, if its params name one.
fn prompted_session(method: &str, params: &serde_json::Value) -> Option<SessionId> {
    (method == "session/prompt")
        .then(|| params.get("sessionId")?.as_str())
        .flatten()
        .map(|id| SessionId(id.to_string()))
}

/// A handler that panics answers with an internal error; the connection
/// and its other requests go on.
async fn guarded(
    handler: impl Future<Output = Result<serde_json::Value, agent_client_protocol_schema::v1::Error>>,
) -> Result<serde_json::Value, agent_client_protocol_schema::v1::Error> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(result) => result,
        Err(_) => {
            tracing::error!("an ACP request handler panicked");
            Err(agent::error(
                code::INTERNAL_ERROR,
                "warden failed on this request (a bug: please report it); the connection goes on",
            ))
        }
    }
}
