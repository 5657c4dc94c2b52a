//! The runner's write: `Ledger::put_part` under a held lease, so the
//! backend checks the fence inside the write's own transaction (SQLite: an
//! immediate transaction; PostgreSQL: `SELECT … FOR SHARE` on the lease row,
//! pipelined with the write). The same loop runs on either backend.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use warden_core::Ledger;

use crate::common;

/// The holder the lease is taken as (one holder: no other host contends).
const HOLDER: &str = "warden-bench";

/// `n` new 1 KiB text parts written after `warm`, each timed, in a session
/// whose lease `ledger` holds.
pub async fn fenced_put_parts(
    ledger: &Ledger,
    project: &Path,
    n: usize,
    warm: usize,
) -> Result<Vec<Duration>> {
    common::drain_bus(ledger.bus());
    let session = ledger
        .create_session(&project.display().to_string(), "fenced writes")
        .await?;
    let fence = ledger
        .acquire_lease(&session.id, HOLDER, 600_000, |_| false)
        .await?
        .map_err(|held| anyhow::anyhow!("the bench's fresh session is leased to {held:?}"))?;
    let out = common::time_kib_text_parts(ledger, &session.id, n, warm).await?;
    ledger.release_lease(&session.id, &fence).await?;
    Ok(out)
}
