//! The PostgreSQL ledger's schema, as an ordered list of migrations.
//! `warden_schema.version` records how many have been applied; they run
//! under an advisory lock (two processes starting at once migrate once),
//! each in its own transaction, and a ledger from a newer warden is refused
//! rather than misread, as SQLite's is.
//!
//! Ids are `COLLATE "C"`: rows are read in their ids' byte order, the order
//! SQLite gives, whatever the database's default collation.

use super::{PgClient, Result};
use crate::LedgerError;

/// Migration `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: sessions, messages, parts, the tool calls' timeline, runner leases,
    // the audit trail (one row per entry) and phase marks. Everything of a
    // session goes with it (cascades). Bodies are whole JSON.
    r#"
    CREATE TABLE session (
        id          TEXT COLLATE "C" PRIMARY KEY,
        title       TEXT NOT NULL,
        directory   TEXT NOT NULL,
        permission  TEXT NOT NULL DEFAULT '[]',
        created_at  BIGINT NOT NULL,
        updated_at  BIGINT NOT NULL
    );
    CREATE TABLE message (
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        id          TEXT COLLATE "C" NOT NULL,
        role        TEXT NOT NULL,
        info        TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        updated_at  BIGINT NOT NULL,
        PRIMARY KEY (session_id, id)
    );
    CREATE TABLE part (
        session_id  TEXT COLLATE "C" NOT NULL,
        message_id  TEXT COLLATE "C" NOT NULL,
        id          TEXT COLLATE "C" NOT NULL,
        body        TEXT NOT NULL,
        PRIMARY KEY (session_id, message_id, id),
        FOREIGN KEY (session_id, message_id) REFERENCES message(session_id, id) ON DELETE CASCADE
    );
    -- A tool call's state changes; `adds`: what the state has beyond its
    -- status and defaults (content stays in the part row), as SQLite keeps it.
    CREATE TABLE part_event (
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        seq         BIGINT NOT NULL,
        message_id  TEXT COLLATE "C" NOT NULL,
        part_id     TEXT COLLATE "C" NOT NULL,
        status      TEXT NOT NULL,
        at          BIGINT NOT NULL,
        adds        TEXT,
        PRIMARY KEY (session_id, seq)
    );
    -- One row per session that ever had a runner; it outlives a release
    -- (holder emptied), so epochs only grow. Expiry is on the database's clock.
    CREATE TABLE runner_lease (
        session_id  TEXT COLLATE "C" PRIMARY KEY,
        holder      TEXT NOT NULL,
        expires_at  BIGINT NOT NULL,
        epoch       BIGINT NOT NULL
    );
    CREATE TABLE audit (
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        seq         BIGINT NOT NULL,
        message_id  TEXT COLLATE "C",
        call_id     TEXT,
        at          BIGINT NOT NULL,
        stage       TEXT NOT NULL,
        subject     TEXT NOT NULL,
        plugin_hash TEXT,
        decision    TEXT NOT NULL,
        rule        TEXT,
        duration_us BIGINT,
        outcome     TEXT,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE phase (
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        seq         BIGINT NOT NULL,
        message_id  TEXT COLLATE "C",
        at          BIGINT NOT NULL,
        kind        INTEGER NOT NULL,
        attempt     BIGINT,
        until_at    BIGINT,
        detail      TEXT,
        PRIMARY KEY (session_id, seq)
    );
    "#,
    // 2: the event relay between hosts (see `relay.rs`): rows in commit
    // order, pruned to the newest 100 000.
    r#"
    CREATE TABLE relay_outbox (
        seq         BIGSERIAL PRIMARY KEY,
        origin      TEXT NOT NULL,
        session_id  TEXT COLLATE "C" NOT NULL,
        kind        TEXT NOT NULL,
        body        TEXT NOT NULL,
        at          BIGINT NOT NULL
    );
    "#,
    // 3: the prompt queue (`session/prompt_queue.rs`): prompts any host
    // accepted, answered in number order by the session's lease holder;
    // relayed events carry their runner's lease epoch.
    r#"
    CREATE TABLE prompt_queue (
        number      BIGSERIAL PRIMARY KEY,
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        state       TEXT NOT NULL,
        detail      TEXT,
        body        TEXT NOT NULL,
        accepted_at BIGINT NOT NULL,
        settled_at  BIGINT
    );
    CREATE INDEX prompt_queue_by_session ON prompt_queue (session_id, state, number);
    -- The lease epoch a relayed event's session was held at by its host:
    -- readers drop a stale runner's late events (the core's hosts/relay/).
    ALTER TABLE relay_outbox ADD COLUMN epoch BIGINT;
    "#,
    // 4: no table changes. A running call's timeline row keeps no arguments
    // and a completed one no title, as in SQLite's schema 8 (they are the
    // part row's); an older warden would replay such calls without them.
    "",
];

/// The advisory lock key migrations run under (any fixed number).
const MIGRATION_LOCK: i64 = 0x7761_7264_656e; // "warden"

/// Bring the schema up to date (refusing a ledger it cannot write).
pub async fn migrate(client: &mut PgClient, name: &str) -> Result<()> {
    let tx = super::begin(client).await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS warden_schema (version BIGINT NOT NULL)")
        .await?;
    let version: Option<i64> = tx
        .query_opt("SELECT version FROM warden_schema", &[])
        .await?
        .map(|r| r.get(0));
    let version = match version {
        Some(v) => v,
        None => {
            tx.execute("INSERT INTO warden_schema (version) VALUES (0)", &[])
                .await?;
            0
        }
    };
    let supported = MIGRATIONS.len() as i64;
    if version > supported {
        return Err(LedgerError::TooNew {
            path: name.to_string(),
            found: version,
            supported,
        });
    }
    // One transaction for all of them, under the lock: a process that
    // starts meanwhile waits, then finds the schema current.
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "UPDATE warden_schema SET version = $1",
            &[&((i + 1) as i64)],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
