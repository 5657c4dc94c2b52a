//! Sessions: `prompt` / `run` → the session's actor (`actor.rs`: one per
//! session, holding its lease) → [`run_loop`] → [`turn`]. The loop re-reads
//! the ledger every round; a turn is one model step: its stream becomes
//! parts, its tool calls go through the boundary.

mod actor;
pub mod compaction;
pub mod history;
pub mod lease;
mod phase_marks;
pub mod run_loop;
pub mod status;
pub mod system;
pub mod turn;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use warden_protocol::{
    Action, MessageId, MessageInfo, MessageTime, MessageWithParts, ModelRef, Part, PartBody, Rule,
    SessionId, SessionInfo, SessionStatus, UserInfo,
};

use crate::agent::Agents;
use crate::bus::Bus;
use crate::clock::now_ms;
use crate::config::Config;
use crate::error::{CoreError, Result};
use crate::ledger::{Ledger, PartWrite, id};
use crate::permission::Permissions;
use crate::tool::ToolHost;
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
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            lease_ttl: Duration::from_secs(30),
            protected: Vec::new(),
        }
    }
}

pub(crate) struct CoreInner {
    pub ledger: Ledger,
    pub permissions: Permissions,
    pub tools: Arc<dyn ToolHost>,
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
}

/// The agent core. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    pub(crate) inner: Arc<CoreInner>,
}

impl Core {
    /// Assemble a core from a ledger, a tool host, a model resolver and a config.
    pub fn new(
        ledger: Ledger,
        tools: Arc<dyn ToolHost>,
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
                holder: lease::holder_id(),
                protected: options.protected.clone().into(),
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

    pub fn tools(&self) -> &Arc<dyn ToolHost> {
        &self.inner.tools
    }

    /// The host boundary as a session's calls see it (ledger, questions, tool
    /// host, warden's own files), for front ends that run calls themselves,
    /// such as the MCP server.
    pub fn call_env(&self) -> crate::boundary::CallEnv {
        crate::boundary::CallEnv::new(
            self.inner.ledger.clone(),
            self.inner.permissions.clone(),
            self.inner.tools.clone(),
        )
        .protecting(self.inner.protected.clone())
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

    /// Record a user message and, unless `no_reply`, run the session until
    /// the model has answered it. Returns the last assistant message (or the
    /// user message with `no_reply`).
    ///
    /// Prompts to one session queue in arrival order on its actor: each waits
    /// for the ones before it to be answered, then gets its own answer. A
    /// session another process is running is refused (`SessionBusy`) before
    /// anything is written.
    pub async fn prompt(&self, input: PromptInput) -> Result<MessageWithParts> {
        let session = self.inner.ledger.session(&input.session_id).await?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.inner
            .actors
            .send(self, &session.id, Op::Prompt { input, reply });
        actor::reply(rx).await
    }

    /// Per-prompt tool switches as (permission, on). A switch names a tool
    /// by id and acts on that tool's permission (`write` and `edit` share
    /// `edit`). `false` adds a session deny; `true` only lifts the session's
    /// own deny, so a prompt can never allow what the config forbids.
    fn tool_switches(&self, tools: &BTreeMap<String, bool>) -> Result<Vec<(String, bool)>> {
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

    /// Write the user message of a prompt (and its tool switches).
    async fn write_prompt(
        &self,
        session: &SessionInfo,
        input: &PromptInput,
    ) -> Result<MessageWithParts> {
        let agent_name = input
            .agent
            .clone()
            .unwrap_or_else(|| self.inner.agents.default_name().to_string());
        let agent = self.inner.agents.get(&agent_name)?;
        // Resolved before writing anything: a bad model or cassette leaves the ledger untouched.
        let model = self
            .choose_model(input.model.as_ref(), Some(&agent.name), Some(&session.id))
            .await?;
        if input.text.trim().is_empty() {
            return Err(CoreError::Config("the prompt is empty".into()));
        }
        let switches = self.tool_switches(&input.tools)?;

        let info = MessageInfo::User(UserInfo {
            id: MessageId(id::ascending(MessageId::PREFIX)),
            session_id: session.id.clone(),
            time: MessageTime::at(now_ms()),
            agent: agent.name.clone(),
            model,
        });
        self.inner.ledger.put_message(&info).await?;
        let part = Part {
            id: id::ascending("prt").into(),
            session_id: session.id.clone(),
            message_id: info.id().clone(),
            body: PartBody::Text {
                text: input.text.clone(),
                synthetic: false,
                time: None,
                ignored: false,
            },
        };
        self.inner
            .ledger
            .put_part(&part, PartWrite::Changed)
            .await?;
        self.inner.ledger.touch_session(&session.id).await?;

        if !switches.is_empty() {
            self.inner
                .ledger
                .update_session_permission(&session.id, move |rules| {
                    for (permission, on) in &switches {
                        rules.retain(|r| {
                            !(&r.permission == permission
                                && r.pattern == "*"
                                && r.action == Action::Deny)
                        });
                        if !on {
                            rules.push(Rule {
                                permission: permission.clone(),
                                pattern: "*".into(),
                                action: Action::Deny,
                            });
                        }
                    }
                })
                .await?;
        }

        Ok(MessageWithParts {
            info,
            parts: vec![part],
        })
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

    /// Sessions whose run was cut short by a process that died (their lease
    /// outlived it): candidates for taking over with [`Core::run`].
    pub async fn orphaned(&self) -> Result<Vec<SessionId>> {
        let now = now_ms();
        Ok(self
            .inner
            .ledger
            .leases()
            .await?
            .into_iter()
            .filter(|(s, holder, expires)| {
                holder != &self.inner.holder
                    && !self.inner.actors.is_running(s)
                    && (*expires <= now || lease::holder_is_dead(holder))
            })
            .map(|(s, _, _)| s)
            .collect())
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
            .acquire_lease(session, &self.inner.holder, ttl, lease::holder_is_dead)
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
