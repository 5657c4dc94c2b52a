//! Sessions: `prompt` / `run` → the session's actor (`actor.rs`: one per
//! session, holding its lease) → [`run_loop`] → [`turn`]. The loop re-reads
//! the ledger every round; a turn is one model step: its stream becomes
//! parts, its tool calls go through the boundary.

mod actor;
pub mod admission;
pub mod compaction;
pub mod history;
mod phase_marks;
pub mod prompt_queue;
pub mod run_loop;
pub mod status;
pub mod system;
pub mod turn;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use warden_protocol::{MessageWithParts, ModelRef, SessionId, SessionInfo, SessionStatus};

use crate::agent::Agents;
use crate::bus::Bus;
use crate::config::Config;
use crate::error::{CoreError, Result};
use crate::ledger::Ledger;
use crate::permission::Permissions;
use crate::tool::Registry;
use actor::{Actors, Op};
use status::StatusBoard;
use warden_llm::retry::RetryPolicy;
use warden_llm::{ModelResolver, Models};

/// What a user sends.
#[derive(Debug, Clone, Default)]
pub struct PromptInput {
    pub session_id: SessionId,
    pub text: String,
    /// The agent (default: the config's default agent).
    pub agent: Option<String>,
    /// The model (default: the agent's, the config's, or the session's last).
    pub model: Option<ModelRef>,
    /// Per-prompt tool switches, kept as session rules (`true` allow, `false` deny).
    pub tools: BTreeMap<String, bool>,
    /// Only record the message; do not run the loop.
    pub no_reply: bool,
}

/// Knobs that are not in the config file.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// How long a runner lease lasts without renewal.
    pub lease_ttl: Duration,
    /// warden's own files (config, data dir), off limits to tools.
    pub protected: Vec<crate::boundary::Protected>,
    /// Who this core is as a lease holder. `None`: this process
    /// (`crate::hosts::holder::holder_id`). Several cores in one process that should act
    /// as separate hosts (tests, the bench) each name their own.
    pub holder: Option<String>,
    /// What this host agrees to run, whichever host accepted the prompt.
    pub admission: admission::Admission,
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            lease_ttl: Duration::from_secs(30),
            protected: Vec::new(),
            holder: None,
            admission: admission::Admission::default(),
        }
    }
}

pub(crate) struct CoreInner {
    pub ledger: Ledger,
    pub permissions: Permissions,
    pub tools: Registry,
    pub models: Arc<dyn ModelResolver>,
    pub agents: Agents,
    pub config: Config,
    pub retry: RetryPolicy,
    /// One actor per session with work: it queues that session's prompts
    /// and runs, holds its lease and runs its loop.
    pub(crate) actors: Actors,
    pub status: StatusBoard,
    pub holder: String,
    pub options: CoreOptions,
    pub protected: Arc<[crate::boundary::Protected]>,
    /// Front ends naming themselves in the trails of their sessions' calls.
    pub callers: crate::boundary::Callers,
}

impl CoreInner {
    /// The host boundary as this core's calls see it.
    pub(crate) fn call_env(&self) -> crate::boundary::CallEnv {
        crate::boundary::CallEnv::new(
            self.ledger.clone(),
            self.permissions.clone(),
            self.tools.clone(),
        )
        .protecting(self.protected.clone())
        .naming(self.callers.clone())
    }
}

/// The agent core. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    pub(crate) inner: Arc<CoreInner>,
}

impl Core {
    /// Assemble a core from a ledger, the tool registry, a model resolver and a config.
    pub fn new(
        ledger: Ledger,
        tools: Registry,
        models: Arc<dyn ModelResolver>,
        config: Config,
        options: CoreOptions,
    ) -> Result<Core> {
        let agents = Agents::from_config(&config)?;
        let retry = config.retry.unwrap_or_default();
        Ok(Core {
            inner: Arc::new(CoreInner {
                permissions: Permissions::with_deadline(
                    ledger.clone(),
                    config.ask_timeout_ms.map_or(
                        crate::permission::ask::DEFAULT_DEADLINE,
                        std::time::Duration::from_millis,
                    ),
                ),
                status: StatusBoard::new(ledger.bus().clone()),
                ledger,
                tools,
                models,
                agents,
                config,
                retry,
                actors: Actors::default(),
                holder: options
                    .holder
                    .clone()
                    .unwrap_or_else(crate::hosts::holder::holder_id),
                protected: options.protected.clone().into(),
                callers: Default::default(),
                options,
            }),
        })
    }

    pub fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }

    pub fn bus(&self) -> &Bus {
        self.inner.ledger.bus()
    }

    pub fn permissions(&self) -> &Permissions {
        &self.inner.permissions
    }

    /// The config the core was built from.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn agents(&self) -> &Agents {
        &self.inner.agents
    }

    pub fn tools(&self) -> &Registry {
        &self.inner.tools
    }

    /// The host boundary as a session's calls see it (ledger, questions, tool
    /// host, warden's own files), for front ends that run calls themselves,
    /// such as the MCP server.
    pub fn call_env(&self) -> crate::boundary::CallEnv {
        self.inner.call_env()
    }

    /// The front ends naming themselves in their sessions' audit trails.
    pub fn callers(&self) -> &crate::boundary::Callers {
        &self.inner.callers
    }

    /// A session's status in this process.
    pub fn status(&self, session: &SessionId) -> SessionStatus {
        self.inner.status.get(session)
    }

    /// Start a session working in `directory` (which must exist).
    pub async fn create_session(&self, directory: &Path, title: &str) -> Result<SessionInfo> {
        let dir = std::fs::canonicalize(directory).map_err(|e| {
            CoreError::Config(format!(
                "the working directory {} cannot be used: {e}",
                directory.display()
            ))
        })?;
        if !dir.is_dir() {
            return Err(CoreError::Config(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let title: String = title.chars().take(80).collect();
        self.inner
            .ledger
            .create_session(&dir.to_string_lossy(), &title)
            .await
    }

    /// Which model a prompt uses (its own, the agent's, the config's, or the
    /// one the session used last), checked to be usable. Front ends call
    /// this before creating a session, so a bad model writes nothing.
    pub async fn choose_model(
        &self,
        explicit: Option<&ModelRef>,
        agent: Option<&str>,
        session: Option<&SessionId>,
    ) -> Result<ModelRef> {
        let agent = self
            .inner
            .agents
            .get(agent.unwrap_or(self.inner.agents.default_name()))?;
        let model = if let Some(m) = explicit {
            m.clone()
        } else if let Some(m) = &agent.model {
            m.clone()
        } else if let Some(m) = &self.inner.config.model {
            Models::parse(m)?
        } else {
            let last = match session {
                Some(s) => history::latest(&self.inner.ledger.messages(s).await?)
                    .user
                    .map(|u| u.model.clone()),
                None => None,
            };
            last.ok_or(CoreError::NoModel)?
        };
        self.inner.models.resolve(&model)?;
        Ok(model)
    }

    /// Per-prompt tool switches as (permission, on). A switch names a tool
    /// by id and acts on that tool's permission (`write` and `edit` share
    /// `edit`). `false` adds a session deny; `true` only lifts the session's
    /// own deny, so a prompt can never allow what the config forbids.
    pub(crate) fn tool_switches(
        &self,
        tools: &BTreeMap<String, bool>,
    ) -> Result<Vec<(String, bool)>> {
        if tools.is_empty() {
            return Ok(Vec::new());
        }
        let known = self.inner.tools.tools();
        tools
            .iter()
            .map(|(id, on)| match known.iter().find(|t| &t.id == id) {
                Some(t) => Ok((t.permission.clone(), *on)),
                None => Err(CoreError::Config(format!(
                    "tools: no tool {id:?}; the tools are: {}",
                    known
                        .iter()
                        .map(|t| t.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            })
            .collect()
    }

    /// Run the session's loop (joining the run already going, if any) and
    /// return the last assistant message. Also the way to resume a session
    /// from the ledger alone.
    pub async fn run(&self, session: &SessionId) -> Result<MessageWithParts> {
        self.inner.ledger.session(session).await?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.inner.actors.send(self, session, Op::Run { reply });
        actor::reply(rx).await
    }

    /// Whether this process is running the session's loop now.
    pub fn is_running(&self, session: &SessionId) -> bool {
        self.inner.actors.is_running(session)
    }

    /// Delete a session and its history. Refused while it runs, here or in
    /// another process.
    pub async fn delete_session(&self, session: &SessionId) -> Result<()> {
        self.inner.ledger.session(session).await?;
        if self.inner.actors.is_running(session) {
            return Err(CoreError::SessionBusy {
                session: session.clone(),
                holder: self.inner.holder.clone(),
            });
        }
        let ttl = self.inner.options.lease_ttl.as_millis() as i64;
        // The lease keeps any other process from starting it meanwhile; the
        // delete removes it with the session.
        if let Err(held) = self
            .inner
            .ledger
            .acquire_lease(
                session,
                &self.inner.holder,
                ttl,
                crate::hosts::holder::holder_is_dead,
            )
            .await?
        {
            return Err(CoreError::SessionBusy {
                session: session.clone(),
                holder: held.holder,
            });
        }
        self.inner.ledger.delete_session(session).await
    }

    /// Cancel the session's run: the model stream and running guest calls
    /// stop, and their tool parts end as interrupted. `false` if not running.
    pub fn cancel(&self, session: &SessionId) -> bool {
        self.inner.actors.cancel(session)
    }
}

#[cfg(test)]
mod tests;
