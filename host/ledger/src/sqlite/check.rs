//! Whether a ledger file is sound: the quick check every open runs, the
//! full check `warden ledger check` runs, and the naming of damage SQLite
//! reports later, so a damaged ledger is never used without saying so.

use std::path::Path;

use rusqlite::Connection;

use crate::LedgerError;

/// What `warden ledger check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityReport {
    pub path: String,
    /// Each problem SQLite's integrity and foreign-key checks reported, in
    /// its words; empty when the ledger is sound.
    pub problems: Vec<String>,
}

impl IntegrityReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Run SQLite's full `integrity_check` and `foreign_key_check` on the ledger
/// at `path`, changing nothing. A file that is not a database at all is a
/// report with that one problem; a missing file is an error.
pub fn check_file(path: &Path) -> Result<IntegrityReport, LedgerError> {
    let shown = path.display().to_string();
    if !path.is_file() {
        return Err(LedgerError::Storage(format!(
            "there is no ledger file at {shown}"
        )));
    }
    let problems = match integrity_problems(path) {
        Ok(problems) => problems,
        Err(e) if is_damage(&e) => vec![e.to_string()],
        Err(e) => return Err(LedgerError::Storage(format!("cannot check {shown}: {e}"))),
    };
    Ok(IntegrityReport {
        path: shown,
        problems,
    })
}

fn integrity_problems(path: &Path) -> rusqlite::Result<Vec<String>> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut problems = Vec::new();
    {
        let mut stmt = conn.prepare("PRAGMA integrity_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        for row in rows {
            let row = row?;
            if row != "ok" {
                problems.push(row);
            }
        }
    }
    let mut stmt = conn.prepare("PRAGMA foreign_key_check")?;
    let rows = stmt.query_map([], |r| {
        Ok(format!(
            "row {} of table {} refers to a missing row of {}",
            r.get::<_, Option<i64>>(1)?
                .map_or_else(|| "?".to_string(), |n| n.to_string()),
            r.get::<_, String>(0)?,
            r.get::<_, String>(2)?
        ))
    })?;
    for row in rows {
        problems.push(row?);
    }
    Ok(problems)
}

/// The quick check an open runs (pages and structure, not every index
/// entry): a ledger with damage is refused before anything is written to it.
pub(super) fn quick_check(conn: &Connection, path: &str) -> Result<(), LedgerError> {
    let first: String = conn
        .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
        .map_err(|e| named(e.into(), path))?;
    if first == "ok" {
        Ok(())
    } else {
        Err(LedgerError::Damaged {
            path: path.to_string(),
            reason: first,
        })
    }
}

/// Whether SQLite says the file is damaged or not a database.
pub(super) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Put the ledger's path into a damage error raised without it, and say
/// what the disk under an unavailable ledger is like (SQLite reports a
/// full disk as a plain I/O error at some writes, and a read-only mount
/// as a file it cannot open).
pub(super) fn named(e: LedgerError, path: &str) -> LedgerError {
    match e {
        LedgerError::Damaged { path: p, reason } if p.is_empty() => LedgerError::Damaged {
            path: path.to_string(),
            reason,
        },
        LedgerError::Unavailable(reason) => match disk_state(Path::new(path)) {
            Some(state) if !reason.starts_with(state.split(" (").next().unwrap_or("")) => {
                LedgerError::Unavailable(format!("{state}; {reason}"))
            }
            _ => LedgerError::Unavailable(reason),
        },
        other => other,
    }
}

/// Less room than this on the ledger's file system counts as full.
const NEARLY_FULL: u64 = 256 * 1024;

/// Whether the file system holding `path` is read-only or (nearly) full.
fn disk_state(path: &Path) -> Option<String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let fs = rustix::fs::statvfs(dir).ok()?;
    if fs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return Some("the file system holding the ledger file is mounted read-only".into());
    }
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    (free < NEARLY_FULL).then(|| {
        format!(
            "the disk holding the ledger file is full ({} KiB free)",
            free / 1024
        )
    })
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        if is_damage(&e) {
            LedgerError::Damaged {
                path: String::new(),
                reason: e.to_string(),
            }
        } else if let Some(why) = unwritable(&e) {
            LedgerError::Unavailable(format!("{why} ({e})"))
        } else {
            LedgerError::Storage(e.to_string())
        }
    }
}

/// Why SQLite could not write, when it is the file's state (not a bug or
/// a busy lock) that refused.
fn unwritable(e: &rusqlite::Error) -> Option<&'static str> {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code()? {
        DiskFull => Some("the disk holding the ledger file is full (SQLite said so)"),
        ReadOnly => Some("the ledger file is read-only (its file, its directory or the disk)"),
        SystemIoFailure => Some("the disk failed a write to the ledger file"),
        PermissionDenied => Some("the ledger file may not be written by this user"),
        CannotOpen => Some("the ledger file (or its journal) cannot be opened"),
        _ => None,
    }
}
