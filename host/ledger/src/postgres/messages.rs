//! Message and part rows in PostgreSQL: ids and role in columns, the
//! header or part body as its whole JSON.

use deadpool_postgres::{GenericClient, Transaction};
use warden_protocol::{MessageInfo, MessageWithParts, Part, SessionId};

use super::{NOW, Result};
use crate::LedgerError;
use crate::assemble::{attach_parts, decode};

pub fn encode_message(info: &MessageInfo) -> Result<String> {
    serde_json::to_string(info).map_err(|e| LedgerError::encode("a message", e))
}

pub fn encode_part(part: &Part) -> Result<String> {
    serde_json::to_string(&part.body).map_err(|e| LedgerError::encode("a part", e))
}

/// Insert or update a header (already encoded); `false` if its session is missing.
pub async fn put_message(tx: &Transaction<'_>, info: &MessageInfo, body: &str) -> Result<bool> {
    let n = tx
        .execute(
            &tx.prepare_cached(&format!(
                "INSERT INTO message (session_id, id, role, info, created_at, updated_at)
                 SELECT id, $2, $3, $4, $5, {NOW} FROM session WHERE id = $1
                 ON CONFLICT (session_id, id) DO UPDATE
                 SET info = excluded.info, updated_at = excluded.updated_at"
            ))
            .await?,
            &[
                &info.session_id().as_str(),
                &info.id().as_str(),
                &info.role(),
                &body,
                &info.created(),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// A part written, or rewritten in place.
pub const UPSERT_PART: &str = "INSERT INTO part (session_id, message_id, id, body)
             SELECT session_id, id, $3, $4 FROM message WHERE session_id = $1 AND id = $2
             ON CONFLICT (session_id, message_id, id) DO UPDATE SET body = excluded.body";

/// Insert or update a part (already encoded); refused as corrupt when its
/// message is missing.
pub async fn put_part(tx: &Transaction<'_>, part: &Part, body: &str) -> Result<()> {
    let n = tx
        .execute(
            &tx.prepare_cached(UPSERT_PART).await?,
            &[
                &part.session_id.as_str(),
                &part.message_id.as_str(),
                &part.id.as_str(),
                &body,
            ],
        )
        .await?;
    if n == 0 {
        return Err(LedgerError::Corrupt {
            what: format!("part {}", part.id),
            reason: format!(
                "its message {} of session {} is not in the ledger",
                part.message_id, part.session_id
            ),
        });
    }
    Ok(())
}

/// Every message of a session with its parts, both in id order.
pub async fn read(c: &impl GenericClient, session: &SessionId) -> Result<Vec<MessageWithParts>> {
    let headers = c
        .query(
            &c.prepare_cached("SELECT id, info FROM message WHERE session_id = $1 ORDER BY id")
                .await?,
            &[&session.as_str()],
        )
        .await?;
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(headers.len());
    for r in headers {
        let id: String = r.get(0);
        let info: String = r.get(1);
        out.push(MessageWithParts {
            info: decode(&info, || format!("message {id}"))?,
            parts: Vec::new(),
        });
    }
    let parts = c
        .query(
            &c.prepare_cached("SELECT message_id, id, body FROM part WHERE session_id = $1 ORDER BY message_id, id").await?,
            &[&session.as_str()],
        )
        .await?;
    let keys: Vec<String> = out.iter().map(|m| m.info.id().to_string()).collect();
    let parts = parts.iter().map(|r| Ok((r.get(0), r.get(1), r.get(2))));
    attach_parts(session, &mut out, &keys, parts)?;
    Ok(out)
}
