//! Moving a session whole out of and into PostgreSQL, with its own ids,
//! sequence numbers and times (see `Store::export_session`).

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use warden_protocol::SessionId;

use super::{Result, audit, messages, phase, sessions, timeline};
use crate::store::{ExportedMessage, SessionExport};
use crate::timeline::{self as timeline_codec, adds};

/// The session whole, read inside `tx` (a repeatable-read snapshot).
pub async fn export(tx: &Transaction<'_>, id: &SessionId) -> Result<Option<SessionExport>> {
    let Some(session) = sessions::get(tx, id).await? else {
        return Ok(None);
    };
    let updated: HashMap<String, i64> = tx
        .query(
            &tx.prepare_cached("SELECT id, updated_at FROM message WHERE session_id = $1")
                .await?,
            &[&id.as_str()],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let messages = messages::read(tx, id)
        .await?
        .into_iter()
        .map(|m| ExportedMessage {
            updated_at: updated.get(m.info.id().as_str()).copied().unwrap_or(0),
            info: m.info,
            parts: m.parts,
        })
        .collect();
    Ok(Some(SessionExport {
        session,
        messages,
        timeline: timeline::read(tx, id).await?,
        audit: audit::read(tx, id).await?,
        phases: phase::read(tx, id).await?,
    }))
}

/// Write `export` inside `tx`; `false` (nothing written) if its session is
/// here already.
pub async fn import(tx: &Transaction<'_>, export: &SessionExport) -> Result<bool> {
    let id = &export.session.id;
    // Two imports of one session at once: the second waits, then sees it.
    tx.execute(
        &tx.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .await?,
        &[&id.as_str()],
    )
    .await?;
    if sessions::get(tx, id).await?.is_some() {
        return Ok(false);
    }
    sessions::create(tx, &export.session).await?;
    for m in &export.messages {
        let body = messages::encode_message(&m.info)?;
        tx.execute(
            &tx.prepare_cached(
                "INSERT INTO message (session_id, id, role, info, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await?,
            &[
                &id.as_str(),
                &m.info.id().as_str(),
                &m.info.role(),
                &body,
                &m.info.created(),
                &m.updated_at,
            ],
        )
        .await?;
        for p in &m.parts {
            messages::put_part(tx, p, &messages::encode_part(p)?).await?;
        }
    }
    let last = export.last_inputs();
    let started = timeline_codec::started_with(&export.timeline, |part| last.get(part).copied());
    for (e, started_with) in export.timeline.iter().zip(started) {
        if let Some(s) = e.part.tool_state() {
            timeline::insert_row(
                tx,
                &e.part,
                Some(e.seq),
                s.status(),
                Some(e.at),
                adds(s, started_with).as_deref(),
            )
            .await?;
        }
    }
    for e in &export.audit {
        audit::insert_one(tx, e, Some(e.seq)).await?;
    }
    for p in &export.phases {
        phase::insert_one(tx, id, p.message_id.as_ref(), p.at, &p.kind, Some(p.seq)).await?;
    }
    Ok(true)
}
