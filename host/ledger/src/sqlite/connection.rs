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
//! **Group commit.** Writes ([`Shared::write`]) that reach the thread while
//! it is busy queue up; it then runs every write queued together in one
//! transaction, each in a savepoint of its own (the ledger's `write` opens a
//! savepoint when a transaction is open already), and answers them once
//! that transaction commits. A write that fails rolls back its savepoint
//! and fails alone; the others commit. Should SQLite roll the whole
//! transaction back (a full disk, an I/O error), every write in it gets the
//! error and the writes not yet run run alone. A lone write still commits
//! on its own, on the caller's thread when it can.
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
enum Job {
    /// A call run by itself (a read, or a write with transactions of its own).
    Alone(Box<dyn FnOnce(&mut Connection) + Send>),
    /// A write that may share a transaction with the writes queued with it.
    /// Running it gives its error, if it failed, and how to answer its
    /// caller once the transaction it ran in has committed (or not).
    Write(Write),
}

/// A write as the thread runs it (see [`Job::Write`]).
type Write = Box<dyn FnOnce(&mut Connection) -> (Option<LedgerError>, Answer) + Send>;

/// Answers a write's caller with the outcome of the commit it waited for.
type Answer = Box<dyn FnOnce(std::result::Result<(), LedgerError>) + Send>;

/// The most writes committed in one transaction.
const GROUP_MOST: usize = 256;

thread_local! {
    /// Set while a call runs on a caller's thread: SQLite's busy handler
    /// then gives up at once instead of waiting.
    static ON_CALLER: Cell<bool> = const { Cell::new(false) };
    /// Set by the busy handler when it gave up for a caller's thread.
    static FOUND_BUSY: Cell<bool> = const { Cell::new(false) };
    /// Set on the connection's thread while the writes of a group run in
    /// the transaction they share.
    static IN_GROUP: Cell<bool> = const { Cell::new(false) };
}

/// Whether the write running now runs in a transaction shared with other
/// writes (so it takes a savepoint, not a transaction of its own).
pub(crate) fn in_group() -> bool {
    IN_GROUP.get()
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
    /// Jobs sent to the thread so far (tests wait on it).
    #[cfg(test)]
    sent: std::sync::atomic::AtomicUsize,
}

impl Shared {
    pub(crate) fn start(conn: Connection, name: &str) -> Result<Shared> {
        conn.busy_handler(Some(busy))?;
        let conn = Arc::new(Mutex::new(conn));
        let (jobs, incoming) = mpsc::channel::<Job>();
        let on_thread = conn.clone();
        let thread = std::thread::Builder::new()
            .name("warden-ledger".into())
            .spawn({
                let name = name.to_string();
                move || serve(&incoming, &on_thread, &name)
            })
            .map_err(|e| LedgerError::Storage(format!("cannot start the ledger's thread: {e}")))?;
        Ok(Shared {
            name: name.into(),
            conn,
            jobs: Some(jobs),
            thread: Some(thread),
            #[cfg(test)]
            sent: Default::default(),
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

    /// Run the write `call` on the connection: here if it is free and the
    /// file is not busy, else on the connection's thread, where it may share
    /// a transaction with the writes queued beside it (see the module's
    /// doc). `call` must take its transaction through the ledger's `write`,
    /// which nests in that transaction.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        call: impl Fn(&mut Connection) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let call: Call<T> = Arc::new(call);
        if let Some(out) = self.try_here(&call) {
            return out;
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        let name = self.name.clone();
        let job = Job::Write(Box::new(move |conn| {
            let out = std::panic::catch_unwind(AssertUnwindSafe(|| call(conn)))
                .unwrap_or_else(|_| Err(bug()))
                .map_err(|e| check::named(e, &name));
            let failed = out.as_ref().err().cloned();
            let reply: Answer = Box::new(move |committed| {
                let _ = answer.send(match (out, committed) {
                    (Err(e), _) | (Ok(_), Err(e)) => Err(e),
                    (Ok(v), Ok(())) => Ok(v),
                });
            });
            (failed, reply)
        }));
        self.send(job)?;
        answered.await.map_err(|_| bug())?
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
        let job = Job::Alone(Box::new(move |conn| {
            // A panic rolls its transaction back and is logged by the panic
            // hook; the caller gets an error and the thread serves on.
            if let Ok(out) = std::panic::catch_unwind(AssertUnwindSafe(|| call(conn))) {
                let _ = answer.send(out.map_err(|e| check::named(e, &name)));
            }
        }));
        self.send(job)?;
        answered.await.map_err(|_| bug())?
    }

    fn send(&self, job: Job) -> Result<()> {
        #[cfg(test)]
        self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let stopped = || LedgerError::Storage("the ledger's connection thread has stopped".into());
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())
    }
}

/// The connection's thread: every job in the order it came, writes queued
/// together committed together.
fn serve(incoming: &mpsc::Receiver<Job>, conn: &Mutex<Connection>, name: &str) {
    let mut next = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match incoming.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        match job {
            Job::Alone(call) => call(&mut lock(conn)),
            Job::Write(first) => {
                let mut group = vec![first];
                while group.len() < GROUP_MOST {
                    match incoming.try_recv() {
                        Ok(Job::Write(w)) => group.push(w),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                commit_together(&mut lock(conn), group, name);
            }
        }
    }
}

/// Run `group` in one transaction, each write in a savepoint, and answer
/// each once it has committed.
fn commit_together(conn: &mut Connection, group: Vec<Write>, name: &str) {
    let alone = |conn: &mut Connection, w: Write| {
        let (_, answer) = w(conn);
        answer(Ok(()));
    };
    if group.len() == 1 || conn.execute_batch("BEGIN IMMEDIATE").is_err() {
        // One write, or no transaction to share (the file stayed busy): each
        // takes its own, and meets whatever kept this one from beginning.
        for w in group {
            alone(conn, w);
        }
        return;
    }
    let mut ran: Vec<Answer> = Vec::with_capacity(group.len());
    let mut lost = None;
    let mut rest = group.into_iter();
    for w in rest.by_ref() {
        IN_GROUP.set(true);
        let (failed, answer) = w(conn);
        IN_GROUP.set(false);
        ran.push(answer);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back: what ran before this
            // write is gone with it.
            lost = Some(failed.unwrap_or_else(|| {
                LedgerError::Storage(
                    "the transaction shared with other writes was rolled back".into(),
                )
            }));
            break;
        }
    }
    let committed = match lost {
        Some(e) => Err(e),
        None => conn
            .execute_batch("COMMIT")
            .map_err(|e| check::named(LedgerError::from(e), name)),
    };
    if committed.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    for answer in ran {
        answer(committed.clone());
    }
    for w in rest {
        alone(conn, w);
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

    /// Hold the connection's thread until the returned sender is dropped.
    fn hold_thread(shared: &Shared) -> std::sync::mpsc::Sender<()> {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        let job = Job::Alone(Box::new(move |_| {
            let _ = started.send(());
            let _ = held.recv();
        }));
        shared.send(job).unwrap();
        running.recv().unwrap();
        release
    }

    /// A write as the ledger's `write` runs it: its own transaction when
    /// none is open, else a savepoint. Records whether one was open.
    fn insert(
        n: i64,
        seen: Arc<Mutex<Vec<(i64, bool)>>>,
    ) -> impl Fn(&mut Connection) -> Result<()> {
        move |c: &mut Connection| {
            let shared_tx = in_group();
            assert_eq!(
                shared_tx,
                !c.is_autocommit(),
                "in a group exactly when a transaction is open"
            );
            seen.lock().unwrap().push((n, shared_tx));
            if n == LOSES_ALL {
                // As SQLite does at a full disk: the whole transaction goes.
                c.execute_batch("ROLLBACK")?;
                return Err(LedgerError::Unavailable("the disk is full".into()));
            }
            let sp = c.savepoint()?;
            if n < 0 {
                return Err(LedgerError::Storage(format!("write {n} is refused")));
            }
            sp.execute("INSERT INTO t VALUES (?1)", [n])?;
            sp.commit()?;
            Ok(())
        }
    }

    const LOSES_ALL: i64 = -99;

    async fn outcomes(
        writes: Vec<tokio::task::JoinHandle<Result<()>>>,
    ) -> Vec<std::result::Result<(), String>> {
        let mut out = Vec::new();
        for w in writes {
            out.push(w.await.unwrap().map_err(|e| e.to_string()));
        }
        out
    }

    fn rows(dir: &std::path::Path) -> Vec<i64> {
        let c = Connection::open(dir.join("l.db")).unwrap();
        let mut s = c.prepare("SELECT n FROM t ORDER BY rowid").unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_queued_together_commit_in_one_transaction_and_a_bad_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(file_store(dir.path()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        // The connection is busy (another task's long read, say): the writes
        // that come meanwhile queue on its thread.
        let release = hold_thread(&shared);
        let writes: Vec<_> = [1, 2, -3, 4]
            .into_iter()
            .map(|n| {
                let (shared, seen) = (shared.clone(), seen.clone());
                tokio::spawn(async move { shared.write(insert(n, seen)).await })
            })
            .collect();
        // Every write is queued before the thread is let go.
        while shared.sent.load(std::sync::atomic::Ordering::SeqCst) < 5 {
            tokio::task::yield_now().await;
        }
        drop(release);
        let outcomes = outcomes(writes).await;
        assert_eq!(
            outcomes.iter().filter(|o| o.is_err()).count(),
            1,
            "{outcomes:?}"
        );
        let mut landed = rows(dir.path());
        landed.sort();
        assert_eq!(
            landed,
            [1, 2, 4],
            "the bad write's savepoint alone was rolled back"
        );
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 4, "each ran once: {seen:?}");
        assert!(
            seen.iter().all(|(_, shared_tx)| *shared_tx),
            "all ran in the one transaction: {seen:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_transaction_sqlite_rolled_back_fails_the_writes_in_it_and_the_rest_run_alone()
    {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(file_store(dir.path()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = hold_thread(&shared);
        let mut writes = Vec::new();
        for n in [1, LOSES_ALL, 3] {
            let (s, seen) = (shared.clone(), seen.clone());
            writes.push(tokio::spawn(async move { s.write(insert(n, seen)).await }));
            // Queued in this order.
            let queued = writes.len() + 1;
            while shared.sent.load(std::sync::atomic::Ordering::SeqCst) < queued {
                tokio::task::yield_now().await;
            }
        }
        drop(release);
        let outcomes = outcomes(writes).await;
        assert_eq!(
            outcomes,
            [
                Err("the ledger is unavailable: the disk is full".to_string()),
                Err("the ledger is unavailable: the disk is full".to_string()),
                Ok(())
            ],
            "the first was lost with the transaction; the last ran alone"
        );
        assert_eq!(rows(dir.path()), [3]);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, [(1, true), (LOSES_ALL, true), (3, false)]);
    }
}
