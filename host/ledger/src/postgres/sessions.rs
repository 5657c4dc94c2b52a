//! Session rows in PostgreSQL: create, read, change the session's own
//! rules, touch, delete with everything recorded about it.

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;
use warden_protocol::{Rule, SessionId, SessionInfo, SessionTime};

use super::{NOW, Result};
use crate::LedgerError;
use crate::assemble::decode;
use crate::store::PermissionChange;

const COLUMNS: &str = "id, title, directory, permission, created_at, updated_at";

pub async fn create(c: &impl GenericClient, info: &SessionInfo) -> Result<()> {
    let rules = serde_json::to_string(&info.permission)
        .map_err(|e| LedgerError::encode("permission rules", e))?;
    c.execute(
        &c.prepare_cached("INSERT INTO session (id, title, directory, permission, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)").await?,
        &[
            &info.id.as_str(),
            &info.title,
            &info.directory,
            &rules,
            &info.time.created,
            &info.time.updated,
        ],
    )
    .await?;
    Ok(())
}

pub async fn get(c: &impl GenericClient, id: &SessionId) -> Result<Option<SessionInfo>> {
    c.query_opt(
        &c.prepare_cached(&format!("SELECT {COLUMNS} FROM session WHERE id = $1"))
            .await?,
        &[&id.as_str()],
    )
    .await?
    .map(|r| row(&r))
    .transpose()
}

/// Every session, newest first.
pub async fn all(c: &impl GenericClient) -> Result<Vec<SessionInfo>> {
    c.query(
        &c.prepare_cached(&format!("SELECT {COLUMNS} FROM session ORDER BY id DESC"))
            .await?,
        &[],
    )
    .await?
    .iter()
    .map(row)
    .collect()
}

/// Change the session's rules inside `tx` (its row locked from the read to
/// the write, so two changes at once both land); `false` if there is no
/// such session.
pub async fn update_permission(
    tx: &Transaction<'_>,
    id: &SessionId,
    change: PermissionChange,
) -> Result<bool> {
    let Some(current) = tx
        .query_opt(
            &tx.prepare_cached("SELECT permission FROM session WHERE id = $1 FOR UPDATE")
                .await?,
            &[&id.as_str()],
        )
        .await?
    else {
        return Ok(false);
    };
    let current: String = current.get(0);
    let mut rules: Vec<Rule> = decode(&current, || format!("permission rules of session {id}"))?;
    change(&mut rules);
    let body =
        serde_json::to_string(&rules).map_err(|e| LedgerError::encode("permission rules", e))?;
    tx.execute(
        &tx.prepare_cached(&format!(
            "UPDATE session SET permission = $2, updated_at = {NOW} WHERE id = $1"
        ))
        .await?,
        &[&id.as_str(), &body],
    )
    .await?;
    Ok(true)
}

/// Delete the session and what is recorded about it (cascades), and its
/// lease; `false` if there was none.
pub async fn delete(tx: &Transaction<'_>, id: &SessionId) -> Result<bool> {
    tx.execute(
        &tx.prepare_cached("DELETE FROM runner_lease WHERE session_id = $1")
            .await?,
        &[&id.as_str()],
    )
    .await?;
    Ok(tx
        .execute(
            &tx.prepare_cached("DELETE FROM session WHERE id = $1")
                .await?,
            &[&id.as_str()],
        )
        .await?
        > 0)
}

/// Mark the session as used now (the database's clock); `false` if there
/// is no such session.
pub async fn touch(tx: &Transaction<'_>, id: &SessionId) -> Result<bool> {
    Ok(tx
        .execute(
            &tx.prepare_cached(&format!(
                "UPDATE session SET updated_at = {NOW} WHERE id = $1"
            ))
            .await?,
            &[&id.as_str()],
        )
        .await?
        > 0)
}

fn row(r: &Row) -> Result<SessionInfo> {
    let id: String = r.get(0);
    let permission: String = r.get(3);
    let rules = decode::<Vec<Rule>>(&permission, || format!("permission rules of session {id}"))?;
    Ok(SessionInfo::new(
        SessionId(id),
        r.get(1),
        r.get(2),
        rules,
        SessionTime {
            created: r.get(4),
            updated: r.get(5),
        },
    ))
}
