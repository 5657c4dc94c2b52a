//! What both backends read the same way: a row's JSON decoded (a row that
//! does not decode is corrupt, named), and a session's parts, read in
//! (message, part id) order, attached to its messages, read in id order.

use serde::de::DeserializeOwned;
use warden_protocol::{MessageWithParts, Part, SessionId};

use crate::LedgerError;

type Result<T> = std::result::Result<T, LedgerError>;

/// `text` as a `T`; `what` names the row when it is not one.
pub(crate) fn decode<T: DeserializeOwned>(text: &str, what: impl FnOnce() -> String) -> Result<T> {
    serde_json::from_str(text).map_err(|e| LedgerError::Corrupt {
        what: what(),
        reason: e.to_string(),
    })
}

/// Attach `parts` (each: its message's key, its id, its body's JSON) to
/// `messages`, whose keys are `keys` in the same order. Both lists are in
/// message id order, so one forward walk pairs them; a part whose message
/// is not there is corrupt (the two were read in one snapshot).
pub(crate) fn attach_parts<K: PartialEq>(
    session: &SessionId,
    messages: &mut [MessageWithParts],
    keys: &[K],
    parts: impl IntoIterator<Item = Result<(K, String, String)>>,
) -> Result<()> {
    let mut idx = 0;
    for part in parts {
        let (message, id, body) = part?;
        while idx < keys.len() && keys[idx] != message {
            idx += 1;
        }
        let Some(m) = messages.get_mut(idx) else {
            return Err(LedgerError::Corrupt {
                what: format!("part {id}"),
                reason: "its message is missing".into(),
            });
        };
        m.parts.push(Part {
            body: decode(&body, || format!("part {id}"))?,
            id: id.into(),
            session_id: session.clone(),
            message_id: m.info.id().clone(),
        });
    }
    Ok(())
}
