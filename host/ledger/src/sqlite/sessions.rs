//! Session rows in SQLite: create, read, change the session's own rules,
//! touch, delete with everything recorded about it.

use rusqlite::{Connection, OptionalExtension, params};
use warden_protocol::{Millis, Rule, SessionId, SessionInfo, SessionTime};

use super::Result;
use crate::LedgerError;
use crate::assemble::decode;
use crate::store::PermissionChange;

const COLUMNS: &str = "id, title, directory, permission, created_at, updated_at";

pub fn create(tx: &Connection, info: &SessionInfo) -> Result<()> {
    let rules = serde_json::to_string(&info.permission)
        .map_err(|e| LedgerError::encode("permission rules", e))?;
    tx.execute(
        "INSERT INTO session (id, title, directory, permission, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            info.id.as_str(),
            info.title,
            info.directory,
            rules,
            info.time.created,
            info.time.updated
        ],
    )?;
    Ok(())
}

pub fn get(conn: &Connection, id: &SessionId) -> Result<Option<SessionInfo>> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM session WHERE id = ?1"),
        params![id.as_str()],
        row,
    )
    .optional()?
    .transpose()
}

/// Every session, newest first.
pub fn all(conn: &Connection) -> Result<Vec<SessionInfo>> {
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM session ORDER BY id DESC"))?;
    let rows = stmt.query_map([], row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r??);
    }
    Ok(out)
}

/// Change the session's rules inside `tx`; `false` if there is no such session.
pub fn update_permission(
    tx: &Connection,
    id: &SessionId,
    now: Millis,
    change: PermissionChange,
) -> Result<bool> {
    let current: Option<String> = tx
        .query_row(
            "SELECT permission FROM session WHERE id = ?1",
            params![id.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    let Some(current) = current else {
        return Ok(false);
    };
    let mut rules: Vec<Rule> = decode(&current, || format!("permission rules of session {id}"))?;
    change(&mut rules);
    let body =
        serde_json::to_string(&rules).map_err(|e| LedgerError::encode("permission rules", e))?;
    tx.execute(
        "UPDATE session SET permission = ?2, updated_at = ?3 WHERE id = ?1",
        params![id.as_str(), body, now],
    )?;
    Ok(true)
}

/// Delete the session and what is recorded about it; `false` if there was none.
pub fn delete(tx: &Connection, id: &SessionId) -> Result<bool> {
    // Messages and parts go with the session (foreign keys); the timeline,
    // audit trail and phases are removed by its key, the lease by its id.
    for table in ["part_event", "audit", "phase"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE session = (SELECT key FROM session WHERE id = ?1)"),
            params![id.as_str()],
        )?;
    }
    for table in ["runner_lease", "prompt_queue"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE session_id = ?1"),
            params![id.as_str()],
        )?;
    }
    Ok(tx.execute("DELETE FROM session WHERE id = ?1", params![id.as_str()])? > 0)
}

/// Mark the session as used at `now`; `false` if there is no such session.
pub fn touch(tx: &Connection, id: &SessionId, now: Millis) -> Result<bool> {
    Ok(tx
        .prepare_cached("UPDATE session SET updated_at = ?2 WHERE id = ?1")?
        .execute(params![id.as_str(), now])?
        > 0)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<SessionInfo>> {
    let id: String = r.get(0)?;
    let permission: String = r.get(3)?;
    let rules =
        match decode::<Vec<Rule>>(&permission, || format!("permission rules of session {id}")) {
            Ok(rules) => rules,
            Err(e) => return Ok(Err(e)),
        };
    Ok(Ok(SessionInfo::new(
        SessionId(id),
        r.get(1)?,
        r.get(2)?,
        rules,
        SessionTime {
            created: r.get(4)?,
            updated: r.get(5)?,
        },
    )))
}
