//! Moving the write-ahead log into the database file, off the writers' path.

use std::path::Path;

use rusqlite::Connection;

use super::Result;
use crate::LedgerError;

/// Moves the write-ahead log into the database file from a thread of its own,
/// on its own connection, so that no write of a tool call pays for it. Left
/// to SQLite, the commit that crosses the log's threshold copies it back and
/// syncs the file: one tool call in a hundred took milliseconds longer.
pub struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(500);

    pub(super) fn start(path: &Path) -> Result<Checkpointer> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("warden-ledger-checkpoint".into())
            .spawn(move || {
                // A passive checkpoint never waits for a writer or a reader:
                // it copies what it can and leaves the rest for next time.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Self::EVERY)
                {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::warn!("ledger checkpoint failed (will retry): {e}");
                    }
                }
            })
            .map_err(|e| {
                LedgerError::Storage(format!("cannot start the checkpoint thread: {e}"))
            })?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
