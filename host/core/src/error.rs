//! The core's one error type. Each variant says who raises it and how the
//! loop reacts.

use warden_protocol::{ProviderError, SessionId};

pub use crate::ledger::LedgerError;

/// Errors of the agent core.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The ledger failed, is damaged or unreadable, is of another version,
    /// or fenced off a stale runner's write (see [`LedgerError`]). The loop stops and nothing written before is lost.
    #[error(transparent)]
    Ledger(#[from] LedgerError),

    /// No such session. Raised by every per-session entry point.
    #[error("no session {0}; `warden session list` shows the sessions in this ledger")]
    SessionNotFound(SessionId),

    /// The session has no user message to answer. Raised by the loop.
    #[error("session {0} has no user message to answer")]
    NoUserMessage(SessionId),

    /// Another process holds the session's runner lease. Raised when a loop
    /// starts; nothing is written.
    #[error(
        "session {session} is being run by another warden process ({holder}); wait for it to finish"
    )]
    SessionBusy { session: SessionId, holder: String },

    /// The model could not be resolved (unknown provider, unreadable
    /// cassette). Raised before any model request.
    /// No model was named by the prompt, the agent or the config, and the
    /// session has none from before. Each front end says how to name one.
    #[error("no model chosen; set \"model\" in the config")]
    NoModel,
    #[error("model {model}: {reason}")]
    Model { model: String, reason: String },

    /// The agent named by the prompt is not configured.
    #[error("no agent named {name:?}; configured agents: {known}")]
    UnknownAgent { name: String, known: String },

    /// The provider failed and retries did not help. Raised by the processor;
    /// also written to the assistant message.
    #[error("provider: {0}")]
    Provider(ProviderError),

    /// Bad configuration: what is wrong and where.
    #[error("config: {0}")]
    Config(String),

    /// This host's own policy does not let it run the session (its
    /// directory is outside the host's root); raised before any lease is
    /// taken, so another host may run it.
    #[error("session {session} is not run by this host: {why}")]
    NotHere { session: SessionId, why: String },

    /// The session was cancelled.
    #[error("cancelled")]
    Cancelled,

    /// A queued prompt's run failed in the process that ran it; its error
    /// as that process recorded it. Raised to a waiter in another process.
    #[error("{0}")]
    PromptFailed(String),

    /// The loop's task died (a bug); reported instead of hanging the caller.
    #[error("internal: {0}")]
    Internal(String),
}

impl CoreError {
    /// The same error for a second caller of one run (a `run` that joined
    /// a run already going); what cannot be copied keeps its text.
    pub fn share(&self) -> CoreError {
        match self {
            CoreError::Ledger(e) => CoreError::Ledger(e.clone()),
            CoreError::SessionNotFound(s) => CoreError::SessionNotFound(s.clone()),
            CoreError::NoUserMessage(s) => CoreError::NoUserMessage(s.clone()),
            CoreError::SessionBusy { session, holder } => CoreError::SessionBusy {
                session: session.clone(),
                holder: holder.clone(),
            },
            CoreError::Provider(e) => CoreError::Provider(e.clone()),
            CoreError::Config(s) => CoreError::Config(s.clone()),
            CoreError::Cancelled => CoreError::Cancelled,
            CoreError::NotHere { session, why } => CoreError::NotHere {
                session: session.clone(),
                why: why.clone(),
            },
            CoreError::PromptFailed(s) => CoreError::PromptFailed(s.clone()),
            other => CoreError::Internal(other.to_string()),
        }
    }
}

impl From<warden_llm::ModelError> for CoreError {
    fn from(e: warden_llm::ModelError) -> Self {
        match e {
            warden_llm::ModelError::Config(s) => CoreError::Config(s),
            warden_llm::ModelError::Model { model, reason } => CoreError::Model { model, reason },
        }
    }
}

/// Result with [`CoreError`].
pub type Result<T, E = CoreError> = std::result::Result<T, E>;
