//! What the ledger records besides sessions, messages and parts, as every
//! backend reads and writes it: the audit trail's entries and the tool
//! calls' timeline.

use serde::{Deserialize, Serialize};
use warden_protocol::{MessageId, Millis, Part, SessionId};

/// One decision or guest call at the host boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its place in the session's trail (numbered when read).
    #[serde(default)]
    pub seq: i64,
    pub session_id: SessionId,
    pub message_id: Option<MessageId>,
    pub call_id: Option<String>,
    pub at: Millis,
    /// `permission`, `before`, `tool`, `after`, `ask`; `stdout` / `stderr`
    /// for what a guest printed during the call.
    pub stage: String,
    /// What was called or checked: `read` (tool), `plugin:name` (guest), ...
    pub subject: String,
    /// The guest's content hash, for guest calls.
    pub plugin_hash: Option<String>,
    /// `allowed`, `denied`, `asked:once`, `asked:reject`, ...
    pub decision: String,
    /// The rule that decided, as `permission pattern action`.
    pub rule: Option<String>,
    pub duration_us: Option<i64>,
    /// `ok`, or what went wrong.
    pub outcome: Option<String>,
}

/// One recorded change of a part: the replayable timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartEvent {
    pub seq: i64,
    pub at: Millis,
    pub message_id: MessageId,
    pub part: Part,
}
