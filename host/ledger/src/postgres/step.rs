//! One transaction of a step in PostgreSQL (see `Store::write_step`): its
//! statements prepared first, then sent in one flight.

use super::{
    LOCK_SESSION, PgClient, Result, audit, begin, lease, lock_session, messages, phase, timeline,
};
use crate::store::{Fence, StepWrite, is_last_of_its_part, step_session};

/// Write `write` (of a session: the caller checked) in one transaction;
/// `false` (and nothing written) if its header's session is missing.
pub async fn write(c: &mut PgClient, write: &StepWrite<'_>, fence: Option<&Fence>) -> Result<bool> {
    let Some(session) = step_session(write)? else {
        return Ok(true);
    };
    let header = match write.header {
        Some(info) => Some((info, messages::encode_message(info)?)),
        None => None,
    };
    // Each part's row is its last change in this write; the earlier
    // ones keep only their timeline rows.
    let bodies: Vec<Option<String>> = (0..write.parts.len())
        .map(|i| match is_last_of_its_part(write.parts, i) {
            true => messages::encode_part(write.parts[i].part).map(Some),
            false => Ok(None),
        })
        .collect::<Result<_>>()?;
    let events = write
        .parts
        .iter()
        .any(|c| c.timeline.is_some() && c.part.tool_state().is_some());
    let numbered = events || !write.audit.is_empty() || !write.marks.is_empty();
    let tx = begin(c).await?;
    // As for a part alone: the statements are prepared first, then go out
    // in one flight in this order (the lock before any row is numbered),
    // and the first failure is the one reported.
    tx.prepare_cached(lease::CHECK_LOCKED).await?;
    tx.prepare_cached(LOCK_SESSION).await?;
    tx.prepare_cached(messages::UPSERT_PART).await?;
    tx.prepare_cached(&timeline::insert_sql()).await?;
    if !write.audit.is_empty() {
        tx.prepare_cached(audit::INSERT).await?;
    }
    type Flight<'f> =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool>> + Send + 'f>>;
    let txn = tx;
    let tx = &txn;
    let mut flight: Vec<Flight<'_>> = Vec::new();
    if let Some(f) = fence {
        flight.push(Box::pin(async {
            lease::check_fence(tx, session, f, true)
                .await
                .map(|()| true)
        }));
    }
    if numbered {
        flight.push(Box::pin(async {
            lock_session(tx, session).await.map(|()| true)
        }));
    }
    if let Some((info, body)) = &header {
        flight.push(Box::pin(messages::put_message(tx, info, body)));
    }
    for (change, body) in write.parts.iter().zip(&bodies) {
        if let Some(body) = body {
            flight.push(Box::pin(async {
                messages::put_part(tx, change.part, body)
                    .await
                    .map(|()| true)
            }));
        }
        if let Some(row) = change.timeline {
            flight.push(Box::pin(async move {
                timeline::insert(tx, change.part, row.started_with, row.at)
                    .await
                    .map(|()| true)
            }));
        }
    }
    if !write.audit.is_empty() {
        flight.push(Box::pin(async {
            audit::insert(tx, write.audit).await.map(|()| true)
        }));
    }
    if !write.marks.is_empty() {
        let message = write.header.map(|i| i.id());
        flight.push(Box::pin(async move {
            phase::insert(tx, session, message, write.marks)
                .await
                .map(|()| true)
        }));
    }
    let landed = futures::future::join_all(flight).await;
    let header_at = usize::from(fence.is_some()) + usize::from(numbered);
    for (i, done) in landed.into_iter().enumerate() {
        match done {
            // A missing session: nothing written (dropped, the
            // transaction rolls back).
            Ok(false) if header.is_some() && i == header_at => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    txn.commit().await?;
    Ok(true)
}
