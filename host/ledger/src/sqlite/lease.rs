//! Runner leases in SQLite: one row per session that ever had a runner,
//! with its holder, expiry and epoch. The row outlives a release (holder
//! emptied), so epochs only grow.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use warden_protocol::{Millis, SessionId};

use super::Result;
use crate::LedgerError;
use crate::store::{Fence, HolderIsDead, LeaseHeld};

/// Take (or renew) the lease in one write transaction; see `Store::acquire_lease`.
pub fn acquire(
    conn: &mut Connection,
    session: &SessionId,
    holder: &str,
    expires_at: Millis,
    now: Millis,
    holder_is_dead: &HolderIsDead,
) -> Result<std::result::Result<Fence, LeaseHeld>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current: Option<(String, i64, i64)> = tx
        .query_row(
            "SELECT holder, expires_at, epoch FROM runner_lease WHERE session_id = ?1",
            params![session.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let epoch = match &current {
        Some((h, exp, _)) if h != holder && *exp > now && !holder_is_dead(h) => {
            return Ok(Err(LeaseHeld {
                holder: h.clone(),
                expires_at: *exp,
            }));
        }
        Some((h, _, epoch)) if h == holder => *epoch,
        // A lease given back keeps its row (and epoch), so epochs only grow.
        Some((_, _, epoch)) => epoch + 1,
        None => 1,
    };
    tx.execute(
        "INSERT INTO runner_lease (session_id, holder, expires_at, epoch) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(session_id) DO UPDATE SET holder = excluded.holder,
             expires_at = excluded.expires_at, epoch = excluded.epoch",
        params![session.as_str(), holder, expires_at, epoch],
    )?;
    tx.commit()?;
    Ok(Ok(Fence {
        holder: holder.to_string(),
        epoch,
    }))
}

/// Extend the lease if `fence` is still current; whether it was.
pub fn renew(
    conn: &Connection,
    session: &SessionId,
    fence: &Fence,
    expires_at: Millis,
) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE runner_lease SET expires_at = ?4 WHERE session_id = ?1 AND holder = ?2 AND epoch = ?3",
        )?
        .execute(params![
            session.as_str(),
            fence.holder,
            fence.epoch,
            expires_at
        ])?;
    Ok(n == 1)
}

/// Every held lease: (session, holder, expiry).
pub fn all(conn: &Connection) -> Result<Vec<(SessionId, String, Millis)>> {
    let mut stmt = conn.prepare(
        "SELECT session_id, holder, expires_at FROM runner_lease WHERE holder <> '' ORDER BY session_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((SessionId(r.get(0)?), r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The session's lease if it is held: (holder, milliseconds left at `now`).
pub fn one(conn: &Connection, session: &SessionId, now: Millis) -> Result<Option<(String, i64)>> {
    Ok(conn
        .prepare_cached(
            "SELECT holder, expires_at - ?2 FROM runner_lease WHERE session_id = ?1 AND holder <> ''",
        )?
        .query_row(params![session.as_str(), now], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Give the lease back if `fence` is still current; the row stays.
pub fn release(conn: &Connection, session: &SessionId, fence: &Fence) -> Result<()> {
    conn.execute(
        "UPDATE runner_lease SET holder = '', expires_at = 0 WHERE session_id = ?1 AND holder = ?2 AND epoch = ?3",
        params![session.as_str(), fence.holder, fence.epoch],
    )?;
    Ok(())
}

/// Fail with `Fenced` unless `fence` is the session's current lease.
pub fn check_fence(conn: &Connection, session: &SessionId, fence: &Fence) -> Result<()> {
    let held: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runner_lease WHERE session_id = ?1 AND holder = ?2 AND epoch = ?3)",
        )?
        .query_row(params![session.as_str(), fence.holder, fence.epoch], |r| {
            r.get(0)
        })?;
    if held {
        Ok(())
    } else {
        Err(LedgerError::Fenced {
            session: session.clone(),
        })
    }
}
