//! Wake-ups for a ledger another process writes to, where nothing relays
//! its notices (a SQLite file several processes on one machine open): the
//! kernel says when the file's write-ahead log changed, and the waiter reads
//! what it waits for again. Each commit of any process (this one's too)
//! changes the log, so a wake-up means "look", never "it happened".
//!
//! On Linux this is inotify on the `-wal` file, which SQLite keeps while
//! any connection is open (ours is). Elsewhere there is no watch, and a
//! waiter falls back to looking now and then (see the core's `hosts`).

use std::path::Path;

/// A watch on a ledger file's writes.
pub struct Writes {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Writes {
    /// Watch the write-ahead log of the SQLite file at `db`; `None` where
    /// the platform has no watch or the log cannot be watched.
    pub fn sqlite(db: &Path) -> Option<Writes> {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Self::file(Path::new(&wal))
    }

    #[cfg(target_os = "linux")]
    fn file(path: &Path) -> Option<Writes> {
        use rustix::fs::inotify;
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .map_err(|e| tracing::debug!("no inotify for {}: {e}", path.display()))
            .ok()?;
        inotify::add_watch(
            &fd,
            path,
            inotify::WatchFlags::MODIFY | inotify::WatchFlags::DELETE_SELF,
        )
        .map_err(|e| tracing::debug!("cannot watch {}: {e}", path.display()))
        .ok()?;
        // Outside a runtime there is nothing to wake.
        tokio::runtime::Handle::try_current().ok()?;
        #[allow(unsafe_code)]
        // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it
        // (open, the same file description) until it is dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .ok()?;
        Some(Writes { fd })
    }

    #[cfg(not(target_os = "linux"))]
    fn file(_path: &Path) -> Option<Writes> {
        None
    }

    /// Return once the file was written to since the last call (at once if
    /// it was meanwhile). Every change seen so far is consumed.
    #[cfg(target_os = "linux")]
    pub async fn changed(&mut self) {
        loop {
            let Ok(mut ready) = self.fd.readable().await else {
                // The watch is broken: never wake (the waiter's other
                // wake-ups still do).
                return std::future::pending().await;
            };
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut seen = false;
            {
                let mut events = rustix::fs::inotify::Reader::new(ready.get_inner(), &mut buf);
                loop {
                    match events.next() {
                        Ok(_) => seen = true,
                        Err(rustix::io::Errno::AGAIN) => break,
                        Err(rustix::io::Errno::INTR) => {}
                        Err(_) => return std::future::pending().await,
                    }
                }
            }
            ready.clear_ready();
            if seen {
                return;
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub async fn changed(&mut self) {
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_write_by_another_connection_wakes_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let store = crate::SqliteStore::open(&db).unwrap();
        let mut writes = Writes::sqlite(&db).expect("a watch on the log");
        // Nothing written yet: no wake-up.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), writes.changed())
                .await
                .is_err()
        );
        let other = rusqlite::Connection::open(&db).unwrap();
        other
            .execute_batch("CREATE TABLE scratch (x); INSERT INTO scratch VALUES (1);")
            .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), writes.changed())
            .await
            .expect("woken by the other connection's commit");
        drop(store);
    }
}
