//! Runner leases: one runner per session, across every process sharing the file.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use warden_protocol::{Millis, SessionId};

use super::{LeaseHeld, Ledger};
use crate::clock::now_ms;
use crate::error::Result;

impl Ledger {
    /// Take (or renew) the session's runner lease for `ttl_ms`. Fails with the
    /// current holder when someone else holds an unexpired lease, unless
    /// `holder_is_dead` says that holder is gone.
    pub fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: impl Fn(&str) -> bool,
    ) -> Result<std::result::Result<(), LeaseHeld>> {
        let now = now_ms();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: Option<(String, i64)> = tx
            .query_row(
                "SELECT holder, expires_at FROM runner_lease WHERE session_id = ?1",
                params![session.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((h, exp)) = &current
            && h != holder
            && *exp > now
            && !holder_is_dead(h)
        {
            return Ok(Err(LeaseHeld {
                holder: h.clone(),
                expires_at: *exp,
            }));
        }
        tx.execute(
            "INSERT INTO runner_lease (session_id, holder, expires_at) VALUES (?1, ?2, ?3)
             ON CONFLICT(session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at",
            params![session.as_str(), holder, now + ttl_ms],
        )?;
        tx.commit()?;
        drop(conn);
        if !self.held().contains_key(session) {
            let msgs = self
                .read_messages(session)?
                .into_iter()
                .map(Arc::new)
                .collect();
            self.held().entry(session.clone()).or_insert(msgs);
        }
        Ok(Ok(()))
    }

    /// Extend a lease this holder has; `false` if it was taken over meanwhile.
    pub fn renew_lease(&self, session: &SessionId, holder: &str, ttl_ms: i64) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE runner_lease SET expires_at = ?3 WHERE session_id = ?1 AND holder = ?2",
            )?
            .execute(params![session.as_str(), holder, now_ms() + ttl_ms])?;
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
            "SELECT session_id, holder, expires_at FROM runner_lease ORDER BY session_id",
        )?;
        let rows = stmt.query_map([], |r| Ok((SessionId(r.get(0)?), r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Give the lease back (only if this holder still has it).
    pub fn release_lease(&self, session: &SessionId, holder: &str) -> Result<()> {
        self.held().remove(session);
        self.conn().execute(
            "DELETE FROM runner_lease WHERE session_id = ?1 AND holder = ?2",
            params![session.as_str(), holder],
        )?;
        Ok(())
    }
}
