//! The PostgreSQL backend: one database shared by warden processes on any
//! number of hosts. Every SQL statement lives in this folder, a module per
//! kind of row, like `sqlite/`; the rows mean what SQLite's mean and read
//! back equal (the contract tests in `contract.rs` run on both).
//!
//! Connections come from a pool (deadpool-postgres over tokio-postgres,
//! no TLS for now); each call takes one, runs its statements, and gives it
//! back. A write to a session is one transaction that first checks the
//! writer's fence with `SELECT … FOR SHARE` on the lease row, so a lease
//! cannot change hands between the check and the commit (taking a lease
//! locks that row `FOR UPDATE`). Writes that number rows per session (the
//! timeline, the audit trail, phases) lock the session row first, so two
//! writers never pick the same number. Bookkeeping times (`updated_at`,
//! lease expiry) are the database's clock: the one clock every host sees.

mod audit;
mod error;
mod export;
mod group;
mod lease;
mod messages;
pub mod outbox;
mod phase;
mod queue;
pub(crate) mod schema;
mod sessions;
mod step;
mod timeline;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Transaction,
};
use tokio_postgres::NoTls;
use warden_protocol::{
    MessageId, MessageInfo, MessageWithParts, Millis, Part, SessionId, SessionInfo,
};

use super::phase::{Phase, PhaseKind};
use super::store::SessionExport;
use super::store::{
    Fence, HolderIsDead, LeaseHeld, PermissionChange, PromptState, QueuedPrompt, StepWrite, Store,
    step_session, write_audit_only,
};
use super::{AuditEntry, LedgerError, PartEvent, TimelineRow};

type Result<T> = std::result::Result<T, LedgerError>;

/// A pooled connection.
pub(crate) type PgClient = deadpool_postgres::Object;

/// The database's clock, in ms since the epoch (the clock hosts agree on).
const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// How long connecting (or checking a pooled connection) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call may wait for a free connection of the pool.
const POOL_WAIT: Duration = Duration::from_secs(60);
/// How long a connection may sit in an open transaction doing nothing
/// before the server ends it (its host stopped or lost between statements).
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(15);
/// How long a statement may wait for a row lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long one statement may run.
const STATEMENT: Duration = Duration::from_secs(60);

/// A transaction at READ COMMITTED, whatever the database's default: the
/// fence check and the per-session numbering rely on each statement seeing
/// what committed before it (a snapshot taken at the first statement would
/// miss the rows of the writer it waited for).
/// A read-only transaction seeing one moment of the database, for a read
/// of more than one query.
async fn snapshot(client: &mut PgClient) -> Result<Transaction<'_>> {
    Ok(client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

pub(crate) async fn begin(client: &mut PgClient) -> Result<Transaction<'_>> {
    Ok(client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await?)
}

/// The PostgreSQL ledger.
pub struct PgStore {
    /// The URL without its password.
    name: String,
    pool: Pool,
    /// How to connect, for the relay's listening connection.
    config: tokio_postgres::Config,
    /// The steps' writes, committed in groups.
    steps: Arc<group::Group>,
}

impl PgStore {
    /// Connect to the database at `url` (`postgres://user[:password]@host[:port]/db`)
    /// and bring its schema up to date. A database written by a newer warden
    /// is refused.
    pub async fn open(url: &str) -> Result<PgStore> {
        let name = without_password(url);
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            LedgerError::Storage(format!(
                "{name} is not a PostgreSQL URL ({e}); write postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            ))
        })?;
        // A server that does not answer (a dropped route, a host gone) is an
        // error after a while, never a call that waits forever.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // Nothing may hold a session's rows for long: a host paused (SIGSTOP)
        // or cut off between BEGIN and COMMIT is ended by the server and its
        // locks freed, so another host can take the session over when its
        // lease expires; a lock wait or a statement that never ends is an
        // error, not a hang. Settings in the URL's own `options` win.
        let ours = format!(
            "-c idle_in_transaction_session_timeout={} -c lock_timeout={} -c statement_timeout={}",
            IDLE_IN_TRANSACTION.as_millis(),
            LOCK_WAIT.as_millis(),
            STATEMENT.as_millis()
        );
        let options = match config.get_options() {
            Some(theirs) => format!("{ours} {theirs}"),
            None => ours,
        };
        config.options(options);
        // A connection whose peer vanished without a word (no FIN, no RST)
        // is found dead in seconds, not the two hours of TCP's default.
        config.keepalives_idle(Duration::from_secs(10));
        config.tcp_user_timeout(Duration::from_secs(30));
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| LedgerError::Storage(format!("cannot set up the pool for {name}: {e}")))?;
        let steps = group::Group::new(pool.clone(), name.clone());
        let store = PgStore {
            name,
            pool,
            config,
            steps,
        };
        let mut client = store.client().await?;
        schema::migrate(&mut client, &store.name).await?;
        Ok(store)
    }

    /// How many of the steps' writes committed in a transaction shared
    /// with others (group commit), and in how many transactions.
    pub fn grouped(&self) -> (u64, u64) {
        self.steps.shared()
    }

    /// Switch group commit off (each step's write a transaction of its own,
    /// on a connection of the pool) or back on: for measuring one against
    /// the other in the same run.
    pub fn set_group_commit(&self, on: bool) {
        self.steps.set_grouping(on);
    }

    async fn client(&self) -> Result<PgClient> {
        self.pool.get().await.map_err(|e| {
            LedgerError::Unavailable(format!(
                "the PostgreSQL server of {} cannot be reached ({e})",
                self.name
            ))
        })
    }

    /// A connection with a transaction begun, and the fence (if any) checked
    /// in it, its lease row locked until the commit.
    async fn fenced<'c>(
        client: &'c mut PgClient,
        session: &SessionId,
        fence: Option<&Fence>,
    ) -> Result<deadpool_postgres::Transaction<'c>> {
        let tx = begin(client).await?;
        if let Some(fence) = fence {
            lease::check_fence(&tx, session, fence, true).await?;
        }
        Ok(tx)
    }
}

/// `url` with any password left out: what messages may show.
pub fn without_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // The user info runs to the first `@`, as the client parses it: a
    // password may hold a `/` or a `?` (an `@` in it must be encoded).
    let (authority, tail) = match rest.split_once('@') {
        Some((user, after)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            let (host, tail) = match after.find(['/', '?']) {
                Some(i) => after.split_at(i),
                None => (after, ""),
            };
            (format!("{user}@{host}"), tail)
        }
        None => match rest.find(['/', '?']) {
            Some(i) => (rest[..i].to_string(), &rest[i..]),
            None => (rest.to_string(), ""),
        },
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|kv| !kv.to_ascii_lowercase().starts_with("password="))
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_string(),
    };
    if scheme.is_empty() {
        format!("{authority}{tail}")
    } else {
        format!("{scheme}://{authority}{tail}")
    }
}

/// Lock the session's row until the commit, so numbers given out per
/// session (timeline, audit, phases) are given out one writer at a time.
async fn lock_session(tx: &Transaction<'_>, session: &SessionId) -> Result<()> {
    tx.query_opt(
        &tx.prepare_cached(LOCK_SESSION).await?,
        &[&session.as_str()],
    )
    .await?;
    Ok(())
}

const LOCK_SESSION: &str = "SELECT 1 FROM session WHERE id = $1 FOR NO KEY UPDATE";

#[async_trait]
impl Store for PgStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn outbox(&self) -> Option<std::sync::Arc<dyn crate::outbox::Outbox>> {
        Some(std::sync::Arc::new(outbox::PgOutbox {
            pool: self.pool.clone(),
            config: self.config.clone(),
            name: self.name.clone(),
        }))
    }

    async fn replay(
        &self,
        after: i64,
        session: Option<&SessionId>,
    ) -> Result<Option<super::store::Replay>> {
        let c = self.client().await?;
        Ok(Some(
            outbox::replay(&c, after, session.map(|s| s.as_str())).await?,
        ))
    }

    async fn create_session(&self, info: &SessionInfo) -> Result<()> {
        let c = self.client().await?;
        sessions::create(&c, info).await
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        let c = self.client().await?;
        sessions::get(&c, id).await
    }

    async fn sessions(&self) -> Result<Vec<SessionInfo>> {
        let c = self.client().await?;
        sessions::all(&c).await
    }

    async fn update_permission(
        &self,
        id: &SessionId,
        fence: Option<&Fence>,
        change: PermissionChange,
    ) -> Result<Option<SessionInfo>> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, id, fence).await?;
        if !sessions::update_permission(&tx, id, change).await? {
            return Ok(None);
        }
        let after = sessions::get(&tx, id).await?;
        tx.commit().await?;
        Ok(after)
    }

    async fn delete_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, id, fence).await?;
        let deleted = sessions::delete(&tx, id).await?;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn touch_session(&self, id: &SessionId, fence: Option<&Fence>) -> Result<bool> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, id, fence).await?;
        let touched = sessions::touch(&tx, id).await?;
        tx.commit().await?;
        Ok(touched)
    }

    async fn put_message(&self, info: &MessageInfo, fence: Option<&Fence>) -> Result<bool> {
        // A step's header alone: committed with the other steps' writes.
        let write = StepWrite {
            header: Some(info),
            ..StepWrite::default()
        };
        self.steps.write(&write, fence).await
    }

    async fn put_part(
        &self,
        part: &Part,
        timeline: Option<TimelineRow<'_>>,
        audit: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let body = messages::encode_part(part)?;
        let mut c = self.client().await?;
        let tx = begin(&mut c).await?;
        let started_with = timeline.and_then(|t| t.started_with);
        let event = timeline.is_some() && part.tool_state().is_some();
        let numbered = event || !audit.is_empty();
        // The hot path: the fence check, the session's lock, the part, its
        // timeline row and its audit rows go out in one flight (pipelined),
        // then the commit: two round trips after BEGIN, not one per
        // statement. The statements are prepared first (once per
        // connection; then without a round trip), so each is sent the moment
        // its future is first polled, and `join!` polls them in this order:
        // the lock is taken before a row is numbered. If the fence does not
        // hold, or the part's message is missing, whatever ran after is
        // rolled back with the transaction.
        tx.prepare_cached(lease::CHECK_LOCKED).await?;
        tx.prepare_cached(LOCK_SESSION).await?;
        tx.prepare_cached(messages::UPSERT_PART).await?;
        tx.prepare_cached(&timeline::insert_sql()).await?;
        if !audit.is_empty() {
            tx.prepare_cached(audit::INSERT).await?;
        }
        let (held, locked, put, event, audited) = futures::join!(
            async {
                match fence {
                    Some(f) => lease::check_fence(&tx, &part.session_id, f, true).await,
                    None => Ok(()),
                }
            },
            async {
                match numbered {
                    true => lock_session(&tx, &part.session_id).await,
                    false => Ok(()),
                }
            },
            messages::put_part(&tx, part, &body),
            async {
                match event {
                    true => timeline::insert(&tx, part, started_with, None).await,
                    false => Ok(()),
                }
            },
            audit::insert(&tx, audit),
        );
        // The first failure is the one to report: after it, PostgreSQL
        // refuses the rest of the transaction anyway.
        held?;
        locked?;
        put?;
        event?;
        audited?;
        tx.commit().await?;
        Ok(())
    }

    async fn write_step(&self, write: &StepWrite<'_>, fence: Option<&Fence>) -> Result<bool> {
        if step_session(write)?.is_none() {
            return write_audit_only(self, write, fence).await;
        }
        self.steps.write(write, fence).await
    }

    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        let mut c = self.client().await?;
        // Headers and parts are two queries: read both in one snapshot, or a
        // message written between them would bring a part without it.
        let tx = snapshot(&mut c).await?;
        let out = messages::read(&tx, session).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn part_events(&self, session: &SessionId) -> Result<Vec<PartEvent>> {
        let c = self.client().await?;
        timeline::read(&c, session).await
    }

    async fn audit(
        &self,
        session: &SessionId,
        entries: &[AuditEntry],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, session, fence).await?;
        lock_session(&tx, session).await?;
        audit::insert(&tx, entries).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn audit_trail(&self, session: &SessionId) -> Result<Vec<AuditEntry>> {
        let c = self.client().await?;
        audit::read(&c, session).await
    }

    async fn mark_phases(
        &self,
        session: &SessionId,
        message: Option<&MessageId>,
        marks: &[(Millis, PhaseKind)],
        fence: Option<&Fence>,
    ) -> Result<()> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, session, fence).await?;
        lock_session(&tx, session).await?;
        phase::insert(&tx, session, message, marks).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn phases(&self, session: &SessionId) -> Result<Vec<Phase>> {
        let c = self.client().await?;
        phase::read(&c, session).await
    }

    async fn acquire_lease(
        &self,
        session: &SessionId,
        holder: &str,
        ttl_ms: i64,
        holder_is_dead: Arc<HolderIsDead>,
    ) -> Result<std::result::Result<Fence, LeaseHeld>> {
        let mut c = self.client().await?;
        lease::acquire(&mut c, session, holder, ttl_ms, &*holder_is_dead).await
    }

    async fn renew_lease(&self, session: &SessionId, fence: &Fence, ttl_ms: i64) -> Result<bool> {
        let c = self.client().await?;
        lease::renew(&c, session, fence, ttl_ms).await
    }

    async fn release_lease(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        let c = self.client().await?;
        lease::release(&c, session, fence).await
    }

    async fn leases(&self) -> Result<Vec<(SessionId, String, Millis)>> {
        let c = self.client().await?;
        lease::all(&c).await
    }

    async fn lease(&self, session: &SessionId) -> Result<Option<(String, i64)>> {
        let c = self.client().await?;
        lease::one(&c, session).await
    }

    async fn check_fence(&self, session: &SessionId, fence: &Fence) -> Result<()> {
        let c = self.client().await?;
        lease::check_fence(&c, session, fence, false).await
    }

    async fn enqueue_prompt(&self, session: &SessionId, body: &str) -> Result<i64> {
        let mut c = self.client().await?;
        let tx = begin(&mut c).await?;
        let number = queue::enqueue(&tx, session, body).await?;
        tx.commit().await?;
        Ok(number)
    }

    async fn open_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>> {
        let c = self.client().await?;
        queue::open(&c, session).await
    }

    async fn queued_prompt(&self, number: i64) -> Result<Option<QueuedPrompt>> {
        let c = self.client().await?;
        queue::get(&c, number).await
    }

    async fn take_prompt(
        &self,
        session: &SessionId,
        number: i64,
        message: &MessageId,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, session, fence).await?;
        let taken = queue::take(&tx, session, number, message).await?;
        tx.commit().await?;
        Ok(taken)
    }

    async fn settle_prompt(
        &self,
        session: &SessionId,
        number: i64,
        state: &PromptState,
        fence: Option<&Fence>,
    ) -> Result<()> {
        let mut c = self.client().await?;
        let tx = Self::fenced(&mut c, session, fence).await?;
        queue::settle(&tx, session, number, state).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn sessions_with_open_prompts(&self) -> Result<Vec<SessionId>> {
        let c = self.client().await?;
        queue::sessions_with_open(&c).await
    }

    async fn checkpoint(&self) -> Result<()> {
        // A committed transaction is in PostgreSQL's write-ahead log, which
        // the server checkpoints itself: nothing to move.
        Ok(())
    }

    async fn export_session(&self, id: &SessionId) -> Result<Option<SessionExport>> {
        let mut c = self.client().await?;
        // One snapshot: the session as it was at one moment.
        let tx = snapshot(&mut c).await?;
        let out = export::export(&tx, id).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn import_session(&self, export: &SessionExport) -> Result<bool> {
        let mut c = self.client().await?;
        let tx = begin(&mut c).await?;
        if !export::import(&tx, export).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stores opening one new database at once migrate it once; a schema
    /// from a newer warden is refused, naming the ledger without its password.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_schema_is_migrated_once_and_a_newer_one_refused() {
        let url = warden_pg_harness::database();
        let (a, b) = tokio::join!(PgStore::open(&url), PgStore::open(&url));
        let (a, _b) = (a.unwrap(), b.unwrap());
        let c = a.client().await.unwrap();
        let version: i64 = c
            .query_one("SELECT version FROM warden_schema", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, schema::MIGRATIONS.len() as i64);
        let rows = c.query("SELECT * FROM warden_schema", &[]).await.unwrap();
        assert_eq!(rows.len(), 1);
        c.execute("UPDATE warden_schema SET version = 99", &[])
            .await
            .unwrap();
        let with_password = url.replacen("postgres@", "postgres:hunter2@", 1);
        match PgStore::open(&with_password).await {
            Err(LedgerError::TooNew {
                path,
                found,
                supported,
            }) => {
                assert_eq!(
                    (path, found, supported),
                    (url.clone(), 99, schema::MIGRATIONS.len() as i64)
                );
            }
            Err(other) => panic!("expected a refused schema, got {other:?}"),
            Ok(_) => panic!("a newer schema was opened"),
        }
    }

    /// Every connection carries the limits that keep a stopped host from
    /// holding a session's rows, and the URL's own settings win over them.
    #[tokio::test]
    async fn connections_carry_the_timeouts_and_the_url_s_own_settings_win() {
        let url = warden_pg_harness::database();
        let show = async |store: &PgStore, what: &str| -> String {
            let c = store.client().await.unwrap();
            c.query_one(&format!("SHOW {what}"), &[])
                .await
                .unwrap()
                .get(0)
        };
        let store = PgStore::open(&url).await.unwrap();
        assert_eq!(
            show(&store, "idle_in_transaction_session_timeout").await,
            "15s"
        );
        assert_eq!(show(&store, "lock_timeout").await, "10s");
        assert_eq!(show(&store, "statement_timeout").await, "1min");
        let theirs = format!("{url}?options=-c%20lock_timeout%3D2000");
        let store = PgStore::open(&theirs).await.unwrap();
        assert_eq!(show(&store, "lock_timeout").await, "2s");
        assert_eq!(show(&store, "statement_timeout").await, "1min");
    }

    /// A server that is not there is an error naming it, not a hang or a panic.
    #[tokio::test]
    async fn an_unreachable_server_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("postgres://w:pw@127.0.0.1:{port}/ledger");
        match PgStore::open(&url).await {
            Err(LedgerError::Unavailable(m)) => {
                assert!(
                    m.starts_with(&format!(
                        "the PostgreSQL server of postgres://w@127.0.0.1:{port}/ledger cannot be reached"
                    )),
                    "{m}"
                );
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("opened a ledger on a closed port"),
        }
        match PgStore::open("postgres://w@127.0.0.1:notaport/x").await {
            Err(LedgerError::Storage(m)) => assert!(m.contains("is not a PostgreSQL URL"), "{m}"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("opened a bad URL"),
        }
    }

    #[test]
    fn names_leave_the_password_out() {
        assert_eq!(
            without_password("postgres://warden:s3cret@db.example:5432/ledger"),
            "postgres://warden@db.example:5432/ledger"
        );
        assert_eq!(
            without_password("postgresql://db/ledger?user=w&password=x&sslmode=disable"),
            "postgresql://db/ledger?user=w&sslmode=disable"
        );
        assert_eq!(
            without_password("postgres://w@127.0.0.1:1/d"),
            "postgres://w@127.0.0.1:1/d"
        );
        assert_eq!(
            without_password("postgres://w:p@h/d?password=p"),
            "postgres://w@h/d"
        );
        // A password with a `/` or a `?` in it, which the client accepts.
        assert_eq!(
            without_password("postgres://w:ab/cd@db/l"),
            "postgres://w@db/l"
        );
        assert_eq!(
            without_password("postgres://w:a?b/c@db:5/l?sslmode=disable"),
            "postgres://w@db:5/l?sslmode=disable"
        );
    }
}
