//! Runner leases: one runner per session across every process sharing the
//! ledger. A lease carries an epoch, new each time it changes hands; the
//! [`Fence`] a holder gets is checked by every write to the session in the
//! write's own transaction (`Ledger::write`), so a holder whose lease was
//! taken over writes nothing more.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use warden_protocol::{Millis, SessionId};

use super::{Fence, LeaseHeld, Ledger, LedgerError, check};
use crate::clock::now_ms;
use crate::error::Result;

impl Ledger {
    /// Take the session's runner lease for `ttl_ms` (or renew it, when this
    /// holder has it already) and return its [`Fence`]. Fails with the current
    /// holder when someone else holds an unexpired lease, unless
    /// `holder_is_dead` says that holder is gone. Taking a lease from another
    /// holder (or anew) starts a new epoch, which fences off every write of
    /// the previous holder from then on.
    pub fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: impl Fn(&str) -> bool,
    ) -> Result<std::result::Result<Fence, LeaseHeld>> {
        let now = now_ms();
        let taken = (|| -> Result<std::result::Result<Fence, LeaseHeld>> {
            let mut conn = self.conn();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
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
                params![session.as_str(), holder, now + ttl_ms, epoch],
            )?;
            tx.commit()?;
            Ok(Ok(Fence {
                holder: holder.to_string(),
                epoch,
            }))
        })()
        .map_err(|e| check::named(e, &self.path))?;
        let fence = match taken {
            Ok(fence) => fence,
            Err(held) => return Ok(Err(held)),
        };
        self.fences().insert(session.clone(), fence.clone());
        if !self.held().contains_key(session) {
            let msgs = self
                .read_messages(session)?
                .into_iter()
                .map(Arc::new)
                .collect();
            self.held().entry(session.clone()).or_insert(msgs);
        }
        Ok(Ok(fence))
    }

    /// Extend a lease this holder has at this epoch; `false` if it was taken
    /// over meanwhile (its writes are fenced off from then on).
    pub fn renew_lease(&self, session: &SessionId, fence: &Fence, ttl_ms: i64) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE runner_lease SET expires_at = ?4 WHERE session_id = ?1 AND holder = ?2 AND epoch = ?3",
            )?
            .execute(params![
                session.as_str(),
                fence.holder,
                fence.epoch,
                now_ms() + ttl_ms
            ])?;
        if n != 1 {
            // Someone else holds it now and may write: stop trusting the copy.
            self.held().remove(session);
        }
        Ok(n == 1)
    }

    /// Every lease: (session, holder, expiry). A lease outlives its run only
    /// when the run's process died.
    pub fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT session_id, holder, expires_at FROM runner_lease WHERE holder <> '' ORDER BY session_id",
        )?;
        let rows = stmt.query_map([], |r| Ok((SessionId(r.get(0)?), r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Give the lease back (only if this holder still has it at this epoch).
    /// The row stays, without a holder, so the next holder's epoch is higher.
    pub fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        self.held().remove(session);
        {
            let mut fences = self.fences();
            if fences.get(session) == Some(fence) {
                fences.remove(session);
            }
        }
        self.conn().execute(
            "UPDATE runner_lease SET holder = '', expires_at = 0 WHERE session_id = ?1 AND holder = ?2 AND epoch = ?3",
            params![session.as_str(), fence.holder, fence.epoch],
        )?;
        Ok(())
    }
}

/// Fail with `Fenced` unless `fence` is the session's current lease.
pub(super) fn check_fence(conn: &Connection, session: &SessionId, fence: &Fence) -> Result<()> {
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
        }
        .into())
    }
}
