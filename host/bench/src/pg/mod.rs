//! The PostgreSQL ledger's rows: what the same operations cost on
//! PostgreSQL next to SQLite, measured in the same run, and how many
//! sessions per second one database serves across 1, 2 and 3 hosts.
//!
//! The part starts its own throwaway cluster on loopback through
//! `warden-pg-harness` (initdb in a temporary folder, as the `postgres` user
//! when run as root; `fsync=off`, `synchronous_commit=off`: no flush per
//! commit, as SQLite's `synchronous=NORMAL` in WAL mode does none) and
//! stops it when the process ends. Without PostgreSQL the part fails and
//! says what to install; it is never skipped. Each measurement gets a fresh
//! database, so none reads another's rows.
//!
//! Read [`floor`] (the bare client), [`writes`] (the fenced `put_part`),
//! then [`hosts`] (sessions across hosts); P1 on PostgreSQL is P1's own
//! code ([`crate::p1::run`]) on a ledger opened from the cluster's URL.

mod floor;
mod hosts;
mod writes;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use warden_core::ledger::{SqliteStore, Store};
use warden_core::{Bus, Ledger};

use crate::p1;
use crate::stats::{fmt_us, summarize, summary_value};
use crate::table::{Row, row};

const GROUP: &str = "PostgreSQL ledger";

/// How much to measure.
pub struct Sizes {
    /// Samples of each bare transaction and of each backend's `put_part`.
    pub writes: usize,
    /// Tool calls timed in P1, per backend.
    pub p1_calls: usize,
    /// Sessions per host count.
    pub sessions: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                writes: 300,
                p1_calls: 300,
                sessions: 30,
            }
        } else {
            Sizes {
                writes: 2000,
                p1_calls: 2000,
                sessions: 300,
            }
        }
    }
}

/// A fresh database on this process's throwaway cluster (started on first
/// use), or why there is none.
pub(crate) async fn database() -> Result<String> {
    tokio::task::spawn_blocking(warden_pg_harness::try_database)
        .await
        .context("starting the throwaway PostgreSQL cluster")?
        .map_err(|e| {
            anyhow::anyhow!(
                "the `pg` part measures against a PostgreSQL cluster it starts itself: {e}"
            )
        })
}

/// A ledger on a fresh database, as `warden --ledger postgres://…` opens one.
async fn pg_ledger() -> Result<Ledger> {
    Ok(Ledger::new(pg_store().await?, Bus::new()))
}

/// The backend of [`pg_ledger`].
async fn pg_store() -> Result<Arc<dyn Store>> {
    let url = database().await?;
    Ok(warden_core::ledger::location::open_store(&url).await?)
}

fn sqlite_ledger(work: &Path, name: &str) -> Result<Ledger> {
    Ok(Ledger::open(&work.join(format!("{name}.db")), Bus::new())?)
}

pub async fn measure(work: &Path, sizes: &Sizes) -> Result<Vec<Row>> {
    let warm = sizes.writes / 10 + 20;
    let mut rows = Vec::new();

    // 1. The floors: a bare transaction on each.
    let bare_pg = floor::transactions(&database().await?, sizes.writes, warm).await?;
    let pg_three = summarize(&bare_pg.three_trips);
    let pg_one = summarize(&bare_pg.one_trip);
    let sqlite_bare = summarize(&crate::floor::bare_transactions(
        &work.join("pg-bare.db"),
        sizes.writes,
        warm,
    )?);
    rows.push(
        row(
            GROUP,
            "floor: bare tokio-postgres, one connection over loopback TCP: BEGIN; INSERT one 1 KiB row (prepared, body as a parameter); COMMIT — 3 round trips",
            summary_value(&pg_three),
        )
        .against(
            format!("bare rusqlite transaction (same run): {}", fmt_us(sqlite_bare.median_us)),
            pg_three.median_us / sqlite_bare.median_us,
            None,
        )
        .note("the cluster pg-harness starts: PostgreSQL 15 on 127.0.0.1, fsync=off, synchronous_commit=off (no flush per commit; SQLite's synchronous=NORMAL in WAL flushes none either)")
        .data(json!({"three_round_trips": pg_three, "sqlite_bare": sqlite_bare})),
    );
    rows.push(
        row(
            GROUP,
            "floor: the same three statements as one simple query (one round trip, body inlined)",
            summary_value(&pg_one),
        )
        .data(json!(pg_one)),
    );

    // 2. The runner's write, fenced, on each backend.
    let project = work.join("pg-writes");
    std::fs::create_dir_all(&project)?;
    let sqlite = sqlite_ledger(work, "pg-writes")?;
    let on_sqlite =
        summarize(&writes::fenced_put_parts(&sqlite, &project, sizes.writes, warm).await?);
    let on_pg = summarize(
        &writes::fenced_put_parts(&pg_ledger().await?, &project, sizes.writes, warm).await?,
    );
    let put_part = "warden `Ledger::put_part` under a held lease (fence checked in the write's transaction): one new 1 KiB text part, upsert + serde + bus event";
    rows.push(
        row(
            GROUP,
            format!("{put_part} — SQLite (baseline)"),
            summary_value(&on_sqlite),
        )
        .against(
            format!(
                "floor: bare rusqlite transaction {}",
                fmt_us(sqlite_bare.median_us)
            ),
            on_sqlite.median_us / sqlite_bare.median_us,
            None,
        )
        .data(json!(on_sqlite)),
    );
    rows.push(
        row(
            GROUP,
            format!("{put_part} — PostgreSQL (pool of 16, event relay on)"),
            summary_value(&on_pg),
        )
        .against(
            format!("SQLite `put_part`, fenced: {}", fmt_us(on_sqlite.median_us)),
            on_pg.median_us / on_sqlite.median_us,
            None,
        )
        .note(format!(
            "{:.2}× the bare 3-round-trip PostgreSQL transaction ({}); the relay appends each published event to the outbox in a background task, on the same 2 cores",
            on_pg.median_us / pg_three.median_us,
            fmt_us(pg_three.median_us)
        ))
        .data(json!({"put_part": on_pg, "floor_three_trips": pg_three})),
    );

    // 3. One tool call through the real processor (P1's own code).
    let sqlite_store = Arc::new(SqliteStore::open(&work.join("pg-p1.db"))?);
    let p1_sqlite = p1::run(work, "pg-p1-sqlite", sqlite_store, sizes.p1_calls).await?;
    let p1_pg = p1::run(work, "pg-p1-pg", pg_store().await?, sizes.p1_calls).await?;
    let step = "P1's single-call step through the real processor (model's tool call leaving the provider stream → completed part on the bus; hook before, `echo` 1 KiB, hook after)";
    let p1_note = |r: &p1::Run| {
        let mut note = format!("{} calls; {} per call", r.calls.samples, r.counted());
        if r.lagged > 0 {
            note.push_str(&format!("; the subscriber missed {} events", r.lagged));
        }
        note
    };
    rows.push(
        row(
            GROUP,
            format!("{step} — SQLite (baseline)"),
            summary_value(&p1_sqlite.calls),
        )
        .note(p1_note(&p1_sqlite))
        .data(json!({"calls": p1_sqlite.calls, "transactions": p1_sqlite.writes})),
    );
    rows.push(
        row(
            GROUP,
            format!("{step} — PostgreSQL"),
            summary_value(&p1_pg.calls),
        )
        .against(
            format!("SQLite, same run: {}", fmt_us(p1_sqlite.calls.median_us)),
            p1_pg.calls.median_us / p1_sqlite.calls.median_us,
            None,
        )
        .note(p1_note(&p1_pg))
        .data(json!({"calls": p1_pg.calls, "transactions": p1_pg.writes})),
    );

    // 4. Sessions per second across hosts on one database.
    rows.extend(sessions_across_hosts(work, sizes.sessions).await?);
    Ok(rows)
}

/// The same `n` sessions on one SQLite host, then on 1, 2 and 3 hosts
/// sharing one PostgreSQL database (a fresh one per host count).
async fn sessions_across_hosts(work: &Path, n: usize) -> Result<Vec<Row>> {
    use hosts::IN_FLIGHT;
    let what = |hosts: usize, backend: &str| {
        format!(
            "{n} sessions, {IN_FLIGHT} in flight at a time, round-robin over {hosts} host{} on one {backend} ({}), each session: prompt → one `echo` call (hooks before/after) → answer; sessions/s from the first prompt sent to the last answer",
            if hosts == 1 { "" } else { "s" },
            if hosts == 1 {
                "a Core in this process".to_string()
            } else {
                format!(
                    "{hosts} Cores in this process, each with its own pool, relay, plugin host and lease holder id, sharing the 2 cores with the database"
                )
            }
        )
    };
    let value = |s: &hosts::Spread| {
        format!(
            "{:.0} sessions/s · prompt → answer {}",
            s.per_second(),
            summary_value(&s.prompts)
        )
    };
    let data = |s: &hosts::Spread| json!({"hosts": s.hosts, "sessions": s.sessions, "seconds": s.took.as_secs_f64(), "per_second": s.per_second(), "prompt_to_answer": s.prompts});

    let mut rows = Vec::new();
    let sqlite = hosts::spread(
        work,
        "pg-hosts-sqlite",
        vec![sqlite_ledger(work, "pg-hosts")?],
        n,
    )
    .await?;
    rows.push(
        row(
            GROUP,
            format!("{} (baseline)", what(1, "SQLite file")),
            value(&sqlite),
        )
        .data(data(&sqlite)),
    );
    let mut one_host: Option<f64> = None;
    for k in 1..=3 {
        let url = database().await?;
        let mut ledgers = Vec::new();
        for _ in 0..k {
            let store = warden_core::ledger::location::open_store(&url).await?;
            ledgers.push(Ledger::new(store, Bus::new()));
        }
        let s = hosts::spread(work, &format!("pg-hosts-{k}"), ledgers, n).await?;
        let (against, base) = match one_host {
            None => (
                format!("SQLite, 1 host: {:.0} sessions/s", sqlite.per_second()),
                sqlite.per_second(),
            ),
            Some(base) => (format!("PostgreSQL, 1 host: {base:.0} sessions/s"), base),
        };
        rows.push(
            row(GROUP, what(k, "PostgreSQL database"), value(&s))
                .against(against, s.per_second() / base, None)
                .note("ratio: sessions/s against the baseline named (higher is more)")
                .data(data(&s)),
        );
        one_host.get_or_insert(s.per_second());
    }
    Ok(rows)
}
