//! Phase marks in PostgreSQL: one row per mark, numbered per session, a
//! numeric kind and the kind's fields in columns, as SQLite keeps them.

use deadpool_postgres::{GenericClient, Transaction};
use warden_protocol::{MessageId, Millis, SessionId};

use super::Result;
use crate::phase::{Phase, PhaseKind, PhaseRow};

/// Record `marks` (the caller holds the session's row lock).
pub async fn insert(
    tx: &Transaction<'_>,
    session: &SessionId,
    message: Option<&MessageId>,
    marks: &[(Millis, PhaseKind)],
) -> Result<()> {
    for (at, k) in marks {
        insert_one(tx, session, message, *at, k, None).await?;
    }
    Ok(())
}

/// One mark; `seq` given (an import) or the session's next. Its message is
/// kept only if it is in the ledger, as SQLite keeps it.
pub async fn insert_one(
    tx: &Transaction<'_>,
    session: &SessionId,
    message: Option<&MessageId>,
    at: Millis,
    k: &PhaseKind,
    seq: Option<i64>,
) -> Result<()> {
    let row = k.to_row();
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO phase (session_id, seq, message_id, at, kind, attempt, until_at, detail)
         SELECT s.id,
                COALESCE($8, (SELECT COALESCE(MAX(seq), 0) + 1 FROM phase WHERE session_id = s.id)),
                (SELECT m.id FROM message m WHERE m.session_id = s.id AND m.id = $2),
                $3, $4, $5, $6, $7
         FROM session s WHERE s.id = $1",
        )
        .await?,
        &[
            &session.as_str(),
            &message.map(|m| m.as_str()),
            &at,
            &row.code,
            &row.attempt,
            &row.until,
            &row.detail,
            &seq,
        ],
    )
    .await?;
    Ok(())
}

/// A session's phase marks, in order; a row this warden cannot read (from
/// a newer one) is skipped, as SQLite skips it.
pub async fn read(c: &impl GenericClient, session: &SessionId) -> Result<Vec<Phase>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT seq, at, message_id, kind, attempt, until_at, detail
             FROM phase WHERE session_id = $1 ORDER BY seq",
            )
            .await?,
            &[&session.as_str()],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Phase {
                seq: r.get(0),
                at: r.get(1),
                message_id: r.get::<_, Option<String>>(2).map(MessageId),
                kind: PhaseKind::from_row(PhaseRow {
                    code: r.get(3),
                    attempt: r.get(4),
                    until: r.get(5),
                    detail: r.get(6),
                })?,
            })
        })
        .collect())
}
