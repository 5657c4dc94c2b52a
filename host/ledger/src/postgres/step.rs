//! One transaction of a step in PostgreSQL (see `Store::write_step`): its
//! statements prepared first, then sent in one flight. The group writer
//! (`group.rs`) runs several steps' flights in one transaction.

use super::{
    LOCK_SESSION, Result, Transaction, audit, lease, lock_session, messages, phase, timeline,
};
use crate::store::{Fence, StepWrite, is_last_of_its_part, step_session};

/// A step's rows encoded, before any connection is taken: the header's body
/// and each part's (its last change in the write; the earlier ones keep
/// only their timeline rows).
#[derive(Debug, Clone, Default)]
pub struct Encoded {
    header: Option<String>,
    bodies: Vec<Option<String>>,
}

/// Encode `write`'s rows.
pub fn encode(write: &StepWrite<'_>) -> Result<Encoded> {
    Ok(Encoded {
        header: write.header.map(messages::encode_message).transpose()?,
        bodies: (0..write.parts.len())
            .map(|i| match is_last_of_its_part(write.parts, i) {
                true => messages::encode_part(write.parts[i].part).map(Some),
                false => Ok(None),
            })
            .collect::<Result<_>>()?,
    })
}

/// Run `write`'s statements in `tx`, in one flight after `first` (a
/// statement sent ahead of them in the same flight, such as the savepoint
/// the group writer takes). `false` if the header's session is missing:
/// the caller then rolls back what ran.
pub async fn run_in(
    tx: &Transaction<'_>,
    write: &StepWrite<'_>,
    encoded: &Encoded,
    fence: Option<&Fence>,
    first: Option<&str>,
) -> Result<bool> {
    let Some(session) = step_session(write)? else {
        return Ok(true);
    };
    let header = write.header.zip(encoded.header.as_ref());
    let bodies = &encoded.bodies;
    let events = write
        .parts
        .iter()
        .any(|c| c.timeline.is_some() && c.part.tool_state().is_some());
    let numbered = events || !write.audit.is_empty() || !write.marks.is_empty();
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
    let mut flight: Vec<Flight<'_>> = Vec::new();
    if let Some(sql) = first {
        flight.push(Box::pin(async move {
            tx.batch_execute(sql).await?;
            Ok(true)
        }));
    }
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
    if let Some((info, body)) = header {
        flight.push(Box::pin(messages::put_message(tx, info, body)));
    }
    for (change, body) in write.parts.iter().zip(bodies) {
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
    let header_at =
        usize::from(first.is_some()) + usize::from(fence.is_some()) + usize::from(numbered);
    for (i, done) in landed.into_iter().enumerate() {
        match done {
            // A missing session: nothing written (the caller rolls back).
            Ok(false) if header.is_some() && i == header_at => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
