//! Why a call failed, typed. The sentence the model is shown is its
//! `Display`, written here once. Whether a failure stops the loop is not
//! its kind's to say: only a question a person rejected (or nobody
//! approved) does, whatever asked it (see `session/turn`).

use std::fmt;
use std::path::PathBuf;

use warden_protocol::CallId;

use crate::permission::Refusal;
use crate::tool::GuestError;

/// Which hook stage a hook failure happened at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStage {
    Before,
    After,
}

/// Why a tool call did not complete.
#[derive(Debug, Clone, PartialEq)]
pub enum CallFailure {
    /// The arguments are not a JSON object.
    BadArguments(String),
    /// The model called a tool it was not offered.
    UnknownTool { name: String, offered: Vec<String> },
    /// A second call with an id already used in this step.
    DuplicateId { call_id: CallId, name: String },
    /// The same call `times` in a row, and `doom_loop` was not granted.
    DoomLoop { tool: String, times: usize },
    /// The path argument is warden's own file or folder.
    Protected { path: PathBuf, writes_only: bool },
    /// A rule denies it.
    Denied {
        permission: String,
        pattern: String,
        rule: String,
    },
    /// It needed approval that was not given.
    Rejected {
        permission: String,
        pattern: String,
        /// Why the question ended without a yes.
        why: Refusal,
    },
    /// The session's rules could not be read, so nothing may be decided.
    Rules(String),
    /// A hook whose own permission was refused (hooks fail closed).
    HookRefused { plugin: String, stage: HookStage },
    /// A before hook blocked the call.
    Blocked { plugin: String, reason: String },
    /// A before hook asked for approval, and it was not given.
    HookAskRejected { plugin: String, reason: String },
    /// A hook failed (hooks fail closed).
    HookFailed {
        plugin: String,
        stage: HookStage,
        error: GuestError,
    },
    /// The tool guest failed.
    Guest(GuestError),
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallFailure::BadArguments(why) => f.write_str(why),
            CallFailure::UnknownTool { name, offered } if offered.is_empty() => write!(
                f,
                "unknown tool `{name}`: no tools are available on this step"
            ),
            CallFailure::UnknownTool { name, offered } => write!(
                f,
                "unknown tool `{name}`; the tools available are: {}",
                offered.join(", ")
            ),
            CallFailure::DuplicateId { call_id, name } => write!(
                f,
                "refused: this step already has a tool call with the id `{call_id}`; each call needs its own id, so this one (`{name}`) did not run"
            ),
            CallFailure::DoomLoop { tool, times } => write!(
                f,
                "permission denied: `{tool}` was called {times} times in a row with the same arguments, and the `doom_loop` permission was not granted; try something different"
            ),
            CallFailure::Protected { path, writes_only } => write!(
                f,
                "permission denied: {} is warden's own {} and no tool may {} it",
                path.display(),
                if *writes_only {
                    "configuration"
                } else {
                    "data"
                },
                if *writes_only { "change" } else { "use" }
            ),
            CallFailure::Denied {
                permission,
                pattern,
                rule,
            } => write!(
                f,
                "permission denied: `{permission}` on `{pattern}` is denied by the rule `{rule}`; the call did not run"
            ),
            CallFailure::Rejected {
                permission,
                pattern,
                why,
            } => write!(
                f,
                "permission denied: `{permission}` on `{pattern}` needs approval and {why}"
            ),
            CallFailure::Rules(e) => write!(
                f,
                "permission denied: the session's rules could not be read ({e}), so the call did not run"
            ),
            CallFailure::HookRefused {
                plugin,
                stage: HookStage::Before,
            } => write!(
                f,
                "hook {plugin} may not see this call (its permission was refused), and hooks fail closed: the call was blocked"
            ),
            CallFailure::HookRefused {
                plugin,
                stage: HookStage::After,
            } => write!(
                f,
                "after hook {plugin} may not see this call (its permission was refused); the output was withheld because hooks fail closed"
            ),
            CallFailure::Blocked { plugin, reason } => {
                write!(f, "blocked by hook {plugin}: {reason}")
            }
            CallFailure::HookAskRejected { plugin, reason } => write!(
                f,
                "hook {plugin} asked for approval ({reason}) and it was not given"
            ),
            CallFailure::HookFailed {
                plugin,
                stage: HookStage::Before,
                error,
            } => write!(
                f,
                "before hook {plugin} failed ({error}); the call was blocked because hooks fail closed"
            ),
            CallFailure::HookFailed {
                plugin,
                stage: HookStage::After,
                error,
            } => write!(
                f,
                "after hook {plugin} failed ({error}); the tool's output was withheld because hooks fail closed"
            ),
            CallFailure::Guest(e) => write!(f, "{e}"),
        }
    }
}
