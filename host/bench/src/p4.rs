//! P4: N sessions at once in one process, each making tool calls through
//! the hook before, the tool and the hook after. Each call is timed from the
//! model's tool call leaving the provider stream to its completed part on the
//! bus (the whole boundary, the ledger's lock included); the tool guest alone
//! is a second row. The same on a PostgreSQL ledger (the throwaway cluster
//! of the `pg` part), with how many of its writes group commit put in a
//! transaction shared with others. Then the heap an idle session keeps.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use warden_core::ledger::postgres::PgStore;
use warden_core::tool::{
    CallContext, CallObserver, GuestError, Registry, ToolDef, ToolOutput, ToolSource,
};
use warden_core::{Bus, Core, Ledger, PromptInput};
use warden_llm::Models;
use warden_protocol::ModelRef;
use warden_runtime::WasmHost;

use crate::alloc::live_bytes;
use crate::common::{self, CallClock, timed};
use crate::stats::{fmt_us, summarize, summary_value};
use crate::table::{Row, row};

const CALLS: usize = 4;

/// Times every tool guest call it forwards.
struct Timed {
    inner: Arc<WasmHost>,
    samples: Mutex<Vec<Duration>>,
}

#[async_trait::async_trait]
impl ToolSource for Timed {
    fn tools(&self) -> Vec<ToolDef> {
        self.inner.tools()
    }
    fn offers(&self, tool: &ToolDef) -> bool {
        self.inner.offers(tool)
    }
    async fn execute(
        &self,
        tool: &ToolDef,
        ctx: &CallContext,
        arguments: &str,
        observer: Arc<dyn CallObserver>,
    ) -> std::result::Result<ToolOutput, GuestError> {
        let (r, t) = timed(self.inner.execute(tool, ctx, arguments, observer)).await;
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(t);
        r
    }
}

/// Run `n` new sessions at once to completion; how long it took.
async fn batch(core: &Core, n: usize, project: &Path, model: &ModelRef) -> Result<Duration> {
    let mut sessions = Vec::new();
    for i in 0..n {
        sessions.push(core.create_session(project, &format!("s{i}")).await?.id);
    }
    let (results, took) = timed(futures::future::join_all(sessions.iter().map(|s| {
        let core = core.clone();
        let input = PromptInput {
            session_id: s.clone(),
            text: "go".into(),
            model: Some(model.clone()),
            ..PromptInput::default()
        };
        async move { core.prompt(input).await }
    })))
    .await;
    for r in results {
        anyhow::ensure!(r?.text() == "done", "a session did not finish");
    }
    Ok(took)
}

/// The ledger P4 runs on.
#[derive(Clone, Copy, PartialEq)]
pub enum Backend {
    Sqlite,
    Postgres,
    /// PostgreSQL with group commit off: each step's write a transaction
    /// of its own (the baseline group commit is measured against).
    PostgresAlone,
}

impl Backend {
    fn group(self) -> &'static str {
        match self {
            Backend::Sqlite => "P4",
            Backend::Postgres => "P4 on PostgreSQL",
            Backend::PostgresAlone => "P4 on PostgreSQL, group commit off",
        }
    }
}

/// Calls per second at each N.
pub type Rates = Vec<(usize, f64)>;

/// The rows of `backend` at each N in `ns`, and its calls per second; a
/// row at an N that `baseline` has is also set against that rate.
pub async fn measure(
    work: &Path,
    ns: &[usize],
    backend: Backend,
    baseline: &Rates,
) -> Result<(Vec<Row>, Rates)> {
    let project = work.join("p4");
    std::fs::create_dir_all(&project)?;
    let cassette = work.join("p4.json");
    common::cassette(&cassette, CALLS, 256)?;
    let stamped = ModelRef {
        provider: "stamped".into(),
        model: cassette.display().to_string(),
    };
    let mut rows = Vec::new();
    let mut rates = Rates::new();
    let mut single = 0.0;
    for &n in ns {
        let config = common::guest_config(true)?;
        let timed_host = Arc::new(Timed {
            inner: common::host(work, &config).await?,
            samples: Mutex::new(Vec::new()),
        });
        let models = Models::new();
        let (ledger, pg) = match backend {
            Backend::Sqlite => (
                Ledger::open(&work.join(format!("p4-{n}.db")), Bus::new())?,
                None,
            ),
            Backend::Postgres | Backend::PostgresAlone => {
                let store = Arc::new(PgStore::open(&crate::pg::database().await?).await?);
                store.set_group_commit(backend == Backend::Postgres);
                (Ledger::new(store.clone(), Bus::new()), Some(store))
            }
        };
        let core = common::core_with(
            ledger,
            Registry::default()
                .with_source(timed_host.clone())
                .with_hooks(timed_host.inner.clone()),
            config,
            models.clone(),
        )?;
        let clock = CallClock::watch(core.bus());
        clock.stamp_calls(&models);
        // Enough calls for a p99 that is not just the slowest of a few: small
        // N runs batch after batch of fresh sessions.
        let batches = 400usize.div_ceil(n * CALLS);
        let mut took = Duration::ZERO;
        for _ in 0..batches {
            took += batch(&core, n, &project, &stamped).await?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let windows: Vec<Duration> = clock.windows().iter().map(|w| w.duration()).collect();
        let lagged = *clock.lagged.lock().unwrap_or_else(|p| p.into_inner());
        let s = summarize(&windows);
        let guest = summarize(&timed_host.samples.lock().unwrap_or_else(|p| p.into_inner()));
        if n == 1 {
            single = s.median_us;
        }
        let calls = batches * n * CALLS;
        let rate = calls as f64 / took.as_secs_f64();
        rates.push((n, rate));
        let label = if batches > 1 {
            format!("{n} sessions at once, {CALLS} calls each ({batches} batches)")
        } else {
            format!("{n} sessions at once, {CALLS} calls each")
        };
        let mut r = row(
            backend.group(),
            format!("{label}: tool call → completed part on the bus, hooks included"),
            format!(
                "{:.0} calls/s · {}",
                rate,
                summary_value(&s)
            ),
        )
        .data(json!({"sessions": n, "calls": calls, "timed": s.samples, "lagged": lagged, "seconds": took.as_secs_f64(), "per_call": s}));
        if n > 1 && single > 0.0 {
            // The target is set for 1,000 sessions; other N show the trend.
            r = r.against(
                format!(
                    "p99 against 5× the 1-session median ({})",
                    fmt_us(5.0 * single)
                ),
                s.p99_us / (5.0 * single),
                (n == 1000 && backend == Backend::Sqlite).then_some(1.0),
            );
        }
        let mut notes = Vec::new();
        if let Some(store) = pg.as_ref().filter(|_| backend == Backend::Postgres) {
            let (shared, groups) = store.grouped();
            notes.push(format!(
                "group commit: {shared} of the steps' writes committed in {groups} shared transactions ({:.1} a transaction)",
                shared as f64 / groups.max(1) as f64
            ));
        }
        if let Some((_, base)) = baseline.iter().find(|(b, _)| *b == n) {
            notes.push(format!(
                "{:.2}× the calls/s with group commit off at {n} sessions ({base:.0} calls/s, same run)",
                rate / base
            ));
        }
        if lagged > 0 || s.samples < calls {
            notes.push(format!(
                "{} of {calls} calls timed (the subscriber missed {lagged} events)",
                s.samples
            ));
        }
        if !notes.is_empty() {
            r = r.note(notes.join("; "));
        }
        rows.push(r);
        rows.push(
            row(
                backend.group(),
                format!("{label}: the tool guest alone (WasmHost::execute)"),
                summary_value(&guest),
            )
            .data(json!(guest)),
        );
    }

    if backend != Backend::Sqlite {
        return Ok((rows, rates));
    }
    // The heap an idle session keeps: live bytes (counting allocator) after
    // a batch of sessions has run to idle, against before it, on a core with
    // no timing attached. A first batch fills the bus's ring buffer and the
    // caches, so the second one's growth is what its sessions hold.
    let n = ns
        .iter()
        .copied()
        .filter(|&n| n <= 1000)
        .max()
        .unwrap_or(100);
    let config = common::guest_config(true)?;
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, "p4-idle", Registry::of(host), config, Models::new())?;
    common::drain_bus(core.bus());
    let model = common::scripted_model(&cassette);
    batch(&core, n, &project, &model).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = live_bytes();
    batch(&core, n, &project, &model).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = live_bytes();
    let per = (after - before) as f64 / n as f64;
    rows.push(
        row(
            "P4",
            format!("heap kept per idle session ({n} sessions run to idle)"),
            format!("{:.1} KiB", per / 1024.0),
        )
        .against("target 64 KiB", per / 1024.0 / 64.0, Some(1.0))
        .note("bytes live on the heap (a counting allocator) after the batch minus before it, over the sessions; SQLite's page cache is outside this heap")
        .data(json!({"live_before": before, "live_after": after, "sessions": n})),
    );
    Ok((rows, rates))
}
