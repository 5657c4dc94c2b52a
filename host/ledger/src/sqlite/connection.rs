//! Where the ledger's SQL runs. One connection, two ways in:
//!
//! - **On the caller's thread**, when nothing else is using the connection
//!   and SQLite can take the locks the call needs at once. This is the
//!   common case (one runner writing its session), and it costs no thread
//!   hop: on an idle machine, waking a thread and being woken back cost more
//!   than the transaction itself.
//! - **On the connection's own thread** otherwise: when another task of this
//!   process is using the connection, when another process holds the file's
//!   write lock, and always for reads of a whole session or more
//!   ([`Shared::run_there`]). That thread waits for the lock (up to
//!   [`BUSY_WAIT`]), so no async worker ever waits on a lock held elsewhere
//!   or on a long read.
//!
//! A call that found the file busy on the caller's thread did nothing (its
//! transaction never began, or was rolled back), so it is run again, whole,
//! on the connection's thread. Calls are therefore `Fn`, not `FnOnce`.
//! Calls of one caller run in the order it makes them (each is awaited);
//! calls of different callers run one at a time, in no promised order.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use rusqlite::Connection;

use super::{Result, check};
use crate::LedgerError;

/// How long a call waits, on the connection's thread, for another process
/// to release the file's write lock before it fails.
pub(crate) const BUSY_WAIT: Duration = Duration::from_secs(10);

/// A call, shareable so that it can be run again on the connection's thread.
type Call<T> = Arc<dyn Fn(&mut Connection) -> Result<T> + Send + Sync>;

/// What the connection's thread runs.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

thread_local! {
    /// Set while a call runs on a caller's thread: SQLite's busy handler
    /// then gives up at once instead of waiting.
    static ON_CALLER: Cell<bool> = const { Cell::new(false) };
    /// Set by the busy handler when it gave up for a caller's thread.
    static FOUND_BUSY: Cell<bool> = const { Cell::new(false) };
}

/// SQLite's busy handler for the ledger's connection: on a caller's thread
/// give up at once (the call moves to the connection's thread); there, wait
/// with SQLite's own back-off for up to [`BUSY_WAIT`].
fn busy(attempt: i32) -> bool {
    if ON_CALLER.get() {
        FOUND_BUSY.set(true);
        return false;
    }
    let (delay, waited) = backoff(attempt.max(0) as u64);
    if waited + delay > BUSY_WAIT.as_millis() as u64 {
        return false;
    }
    std::thread::sleep(Duration::from_millis(delay));
    true
}

/// SQLite's default schedule: the delay before try `attempt + 1`, and the
/// total already waited, in milliseconds.
fn backoff(attempt: u64) -> (u64, u64) {
    const DELAYS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];
    const TOTALS: [u64; 12] = [0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228];
    match usize::try_from(attempt) {
        Ok(i) if i < DELAYS.len() => (DELAYS[i], TOTALS[i]),
        _ => (100, 228 + (attempt - 11) * 100),
    }
}

/// The ledger's connection, and the thread that runs what cannot run on the
/// caller's.
pub(crate) struct Shared {
    name: Arc<str>,
    conn: Arc<Mutex<Connection>>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Shared {
    pub(crate) fn start(conn: Connection, name: &str) -> Result<Shared> {
        conn.busy_handler(Some(busy))?;
        let conn = Arc::new(Mutex::new(conn));
        let (jobs, incoming) = mpsc::channel::<Job>();
        let on_thread = conn.clone();
        let thread = std::thread::Builder::new()
            .name("warden-ledger".into())
            .spawn(move || {
                while let Ok(job) = incoming.recv() {
                    job(&mut lock(&on_thread));
                }
            })
            .map_err(|e| LedgerError::Storage(format!("cannot start the ledger's thread: {e}")))?;
        Ok(Shared {
            name: name.into(),
            conn,
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Run `call` on the connection: here if it is free and the file is not
    /// busy, else on the connection's thread.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        call: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let call: Call<T> = Arc::new(call);
        match self.try_here(&call) {
            Some(out) => out,
            None => self.on_thread(call).await,
        }
    }

    /// Run `call` on the connection's thread, always: for calls that may
    /// read a whole session or more (a history, an export, an audit trail),
    /// which would hold an async worker for as long as they take.
    pub(crate) async fn run_there<T: Send + 'static>(
        &self,
        call: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        self.on_thread(Arc::new(call)).await
    }

    /// The call on the caller's thread; `None` if another task holds the
    /// connection or the file was busy (the call did nothing).
    fn try_here<T>(&self, call: &Call<T>) -> Option<Result<T>> {
        let mut conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            // A call that panicked was caught inside the lock (see `lock`).
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let conn = &mut *conn;
        ON_CALLER.set(true);
        FOUND_BUSY.set(false);
        let out = std::panic::catch_unwind(AssertUnwindSafe(|| call(conn)));
        ON_CALLER.set(false);
        let busy = FOUND_BUSY.replace(false);
        match out {
            Ok(Err(_)) if busy => None,
            Ok(out) => Some(out.map_err(|e| check::named(e, &self.name))),
            Err(_) => Some(Err(bug())),
        }
    }

    async fn on_thread<T: Send + 'static>(&self, call: Call<T>) -> Result<T> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let name = self.name.clone();
        let job: Job = Box::new(move |conn| {
            // A panic rolls its transaction back and is logged by the panic
            // hook; the caller gets an error and the thread serves on.
            if let Ok(out) = std::panic::catch_unwind(AssertUnwindSafe(|| call(conn))) {
                let _ = answer.send(out.map_err(|e| check::named(e, &name)));
            }
        });
        let stopped = || LedgerError::Storage("the ledger's connection thread has stopped".into());
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| bug())?
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the jobs sent are done.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A call that panicked was caught inside the lock and its transaction
    // rolled back: the connection is still good.
    conn.lock().unwrap_or_else(|p| p.into_inner())
}

fn bug() -> LedgerError {
    LedgerError::Storage("a ledger call failed inside the ledger (a bug); see the log".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_follows_sqlite_s_schedule_and_stops_after_the_busy_wait() {
        assert_eq!(backoff(0), (1, 0));
        assert_eq!(backoff(11), (100, 228));
        assert_eq!(backoff(12), (100, 328));
        // The first try whose wait would pass ten seconds: it gives up.
        let last = (0..).find(|&a| {
            let (d, w) = backoff(a);
            w + d > BUSY_WAIT.as_millis() as u64
        });
        assert_eq!(last, Some(108));
    }

    fn file_store(dir: &std::path::Path) -> Shared {
        let conn = Connection::open(dir.join("l.db")).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();
        Shared::start(conn, "test").unwrap()
    }

    #[tokio::test]
    async fn a_call_that_finds_another_process_writing_waits_for_it_on_the_connection_s_thread() {
        let dir = tempfile::tempdir().unwrap();
        let shared = file_store(dir.path());
        // Another connection (as another process would) holds the write lock.
        let mut other = Connection::open(dir.path().join("l.db")).unwrap();
        let tx = other
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let threads = Arc::new(Mutex::new(Vec::new()));
        let seen = threads.clone();
        let write = shared.run(move |c| {
            seen.lock()
                .unwrap()
                .push(std::thread::current().name().map(str::to_string));
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute("INSERT INTO t VALUES (2)", [])?;
            tx.commit()?;
            Ok(())
        });
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.commit().unwrap();
        };
        let (written, ()) = tokio::join!(write, release);
        written.unwrap();
        // Tried here first, found the file busy, ran again on the ledger's thread.
        let threads = threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 2, "{threads:?}");
        assert_ne!(threads[0].as_deref(), Some("warden-ledger"));
        assert_eq!(threads[1].as_deref(), Some("warden-ledger"));
        let rows: Vec<i64> = {
            let c = Connection::open(dir.path().join("l.db")).unwrap();
            let mut s = c.prepare("SELECT n FROM t ORDER BY rowid").unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(rows, vec![1, 2]);
    }

    #[tokio::test]
    async fn a_long_read_runs_on_the_connection_s_thread_even_when_the_connection_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let shared = file_store(dir.path());
        let ran_on = shared
            .run_there(|_| Ok(std::thread::current().name().map(str::to_string)))
            .await
            .unwrap();
        assert_eq!(ran_on.as_deref(), Some("warden-ledger"));
    }

    #[tokio::test]
    async fn a_free_connection_runs_the_call_on_the_caller_s_thread_and_a_panic_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let shared = file_store(dir.path());
        let caller = std::thread::current().id();
        let ran_on = shared
            .run(|c| {
                c.execute("INSERT INTO t VALUES (3)", [])?;
                Ok(std::thread::current().id())
            })
            .await
            .unwrap();
        assert_eq!(ran_on, caller);
        let panicked = shared
            .run(|_| -> Result<()> { panic!("a bug in a ledger call") })
            .await;
        assert!(matches!(panicked, Err(LedgerError::Storage(ref m)) if m.contains("a bug")));
        // The connection serves on.
        let n = shared
            .run(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))?))
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
}
