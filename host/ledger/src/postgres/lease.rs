//! Runner leases in PostgreSQL: one row per session that ever had a runner,
//! with its holder, expiry (on the database's clock) and epoch. The row
//! outlives a release (holder emptied), so epochs only grow.

use deadpool_postgres::GenericClient;
use warden_protocol::{Millis, SessionId};

use super::{NOW, PgClient, Result};
use crate::LedgerError;
use crate::store::{Fence, HolderIsDead, LeaseHeld};

/// Take (or renew) the lease in one transaction, its row locked from the
/// read to the write, so two processes taking it at once get one fence
/// between them; see `Store::acquire_lease`.
pub async fn acquire(
    client: &mut PgClient,
    session: &SessionId,
    holder: &str,
    ttl_ms: i64,
    holder_is_dead: &HolderIsDead,
) -> Result<std::result::Result<Fence, LeaseHeld>> {
    let tx = super::begin(client).await?;
    // A row to lock even for a session that never had a runner (epoch 0,
    // held by no one); a second process doing the same waits for this one.
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO runner_lease (session_id, holder, expires_at, epoch) VALUES ($1, '', 0, 0)
         ON CONFLICT (session_id) DO NOTHING",
        )
        .await?,
        &[&session.as_str()],
    )
    .await?;
    let row = tx
        .query_one(
            &tx.prepare_cached(&format!(
                "SELECT holder, expires_at, epoch, {NOW} FROM runner_lease WHERE session_id = $1 FOR UPDATE"
            )).await?,
            &[&session.as_str()],
        )
        .await?;
    let (current, expires, epoch, now): (String, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let epoch = if current.is_empty() {
        // Never held, or given back: a new epoch.
        epoch + 1
    } else if current == holder {
        epoch
    } else if expires > now && !holder_is_dead(&current) {
        return Ok(Err(LeaseHeld {
            holder: current,
            expires_at: expires,
        }));
    } else {
        epoch + 1
    };
    tx.execute(
        &tx.prepare_cached("UPDATE runner_lease SET holder = $2, expires_at = $3, epoch = $4 WHERE session_id = $1").await?,
        &[&session.as_str(), &holder, &(now + ttl_ms), &epoch],
    )
    .await?;
    tx.commit().await?;
    Ok(Ok(Fence {
        holder: holder.to_string(),
        epoch,
    }))
}

/// Extend the lease if `fence` is still current; whether it was.
pub async fn renew(
    c: &impl GenericClient,
    session: &SessionId,
    fence: &Fence,
    ttl_ms: i64,
) -> Result<bool> {
    let n = c
        .execute(
            &c.prepare_cached(&format!(
                "UPDATE runner_lease SET expires_at = {NOW} + $4
                 WHERE session_id = $1 AND holder = $2 AND epoch = $3"
            ))
            .await?,
            &[&session.as_str(), &fence.holder, &fence.epoch, &ttl_ms],
        )
        .await?;
    Ok(n == 1)
}

/// Every held lease: (session, holder, expiry), by session.
pub async fn all(c: &impl GenericClient) -> Result<Vec<(SessionId, String, Millis)>> {
    Ok(c
        .query(
            &c.prepare_cached("SELECT session_id, holder, expires_at FROM runner_lease WHERE holder <> '' ORDER BY session_id").await?,
            &[],
        )
        .await?
        .iter()
        .map(|r| (SessionId(r.get(0)), r.get(1), r.get(2)))
        .collect())
}

/// The session's lease if it is held: (holder, milliseconds left on the
/// database's clock).
pub async fn one(c: &impl GenericClient, session: &SessionId) -> Result<Option<(String, i64)>> {
    Ok(c
        .query_opt(
            &c.prepare_cached(&format!(
                "SELECT holder, expires_at - {NOW} FROM runner_lease WHERE session_id = $1 AND holder <> ''"
            ))
            .await?,
            &[&session.as_str()],
        )
        .await?
        .map(|r| (r.get(0), r.get(1))))
}

/// Give the lease back if `fence` is still current; the row stays.
pub async fn release(c: &impl GenericClient, session: &SessionId, fence: &Fence) -> Result<()> {
    c.execute(
        &c.prepare_cached(
            "UPDATE runner_lease SET holder = '', expires_at = 0
         WHERE session_id = $1 AND holder = $2 AND epoch = $3",
        )
        .await?,
        &[&session.as_str(), &fence.holder, &fence.epoch],
    )
    .await?;
    Ok(())
}

const CHECK: &str =
    "SELECT 1 FROM runner_lease WHERE session_id = $1 AND holder = $2 AND epoch = $3";
/// The fence check inside a write: the lease row share-locked until the commit.
pub const CHECK_LOCKED: &str =
    "SELECT 1 FROM runner_lease WHERE session_id = $1 AND holder = $2 AND epoch = $3 FOR SHARE";

/// Fail with `Fenced` unless `fence` is the session's current lease. With
/// `lock` (inside a write's transaction), the lease row stays share-locked
/// until the commit, so no one can take the lease over in between.
pub async fn check_fence(
    c: &impl GenericClient,
    session: &SessionId,
    fence: &Fence,
    lock: bool,
) -> Result<()> {
    let sql = if lock { CHECK_LOCKED } else { CHECK };
    let held = c
        .query_opt(
            &c.prepare_cached(sql).await?,
            &[&session.as_str(), &fence.holder, &fence.epoch],
        )
        .await?
        .is_some();
    if held {
        Ok(())
    } else {
        Err(LedgerError::Fenced {
            session: session.clone(),
        })
    }
}
