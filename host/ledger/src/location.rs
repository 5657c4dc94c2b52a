//! Choosing the ledger's backend from where it is: a file path (or
//! `sqlite:PATH`) is a SQLite ledger, a `postgres://` or `postgresql://`
//! URL a PostgreSQL one.

use std::path::Path;
use std::sync::Arc;

use super::LedgerError;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::store::Store;

/// Open the ledger at `location`: `PATH` or `sqlite:PATH` (a SQLite file,
/// created if missing), or `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`
/// (also `postgresql://`). Anything else is refused with the forms it takes.
pub async fn open_store(location: &str) -> Result<Arc<dyn Store>, LedgerError> {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
        return Ok(Arc::new(PgStore::open(location).await?));
    }
    let path = match location.strip_prefix("sqlite:") {
        Some(p) => p.strip_prefix("//").unwrap_or(p),
        None => location,
    };
    // A scheme this does not know (`mysql://…`, `http://…`) is a mistake,
    // not a file name.
    if path.is_empty() || path.contains("://") {
        return Err(LedgerError::Storage(format!(
            "`{}` is not a ledger location: give a SQLite file (a path, or sqlite:PATH) or a PostgreSQL URL (postgres://USER@HOST[:PORT]/DATABASE)",
            super::postgres::without_password(location)
        )));
    }
    let path = Path::new(path).to_path_buf();
    // SQLite opens (and checks) its file synchronously: off the async workers.
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path))
        .await
        .map_err(|e| LedgerError::Storage(format!("opening the ledger failed: {e}")))??;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_location_names_its_backend() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a").join("l.db");
        let plain = open_store(&file.display().to_string()).await.unwrap();
        assert_eq!(plain.name(), file.display().to_string());
        drop(plain);
        let prefixed = open_store(&format!("sqlite:{}", file.display()))
            .await
            .unwrap();
        assert_eq!(prefixed.name(), file.display().to_string());

        let url = warden_pg_harness::database();
        let pg = open_store(&url).await.unwrap();
        assert_eq!(pg.name(), url);
        let pg = open_store(&url.replacen("postgres://", "postgresql://", 1))
            .await
            .unwrap();
        assert!(pg.sessions().await.unwrap().is_empty());

        for bad in ["mysql://u:secret@h/d", "", "sqlite:"] {
            match open_store(bad).await {
                Err(LedgerError::Storage(m)) => {
                    assert!(m.contains("not a ledger location"), "{m}");
                    assert!(
                        m.contains("sqlite:PATH") && m.contains("postgres://"),
                        "{m}"
                    );
                    assert!(!m.contains("secret"), "{m}");
                }
                Err(other) => panic!("{bad:?}: {other:?}"),
                Ok(_) => panic!("{bad:?} opened"),
            }
        }
    }
}
