//! P4: N sessions at once in one process, each making tool calls through
//! the hook before, the tool and the hook after. Each call is timed from the
//! model's tool call leaving the provider stream to its completed part on the
//! bus (the whole boundary, the ledger's lock included); the tool guest alone
//! is a second row. Then the heap an idle session keeps.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use warden_core::tool::{
    CallContext, CallObserver, GuestError, Registry, ToolDef, ToolOutput, ToolSource,
};
use warden_core::{Core, PromptInput};
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

pub async fn measure(work: &Path, ns: &[usize]) -> Result<Vec<Row>> {
    let project = work.join("p4");
    std::fs::create_dir_all(&project)?;
    let cassette = work.join("p4.json");
    common::cassette(&cassette, CALLS, 256)?;
    let stamped = ModelRef {
        provider: "stamped".into(),
        model: cassette.display().to_string(),
    };
    let mut rows = Vec::new();
    let mut single = 0.0;
    for &n in ns {
        let config = common::guest_config(true)?;
        let timed_host = Arc::new(Timed {
            inner: common::host(work, &config).await?,
            samples: Mutex::new(Vec::new()),
        });
        let models = Models::new();
        let core = common::core_on(
            work,
            &format!("p4-{n}"),
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
        let label = if batches > 1 {
            format!("{n} sessions at once, {CALLS} calls each ({batches} batches)")
        } else {
            format!("{n} sessions at once, {CALLS} calls each")
        };
        let mut r = row(
            "P4",
            format!("{label}: tool call → completed part on the bus, hooks included"),
            format!(
                "{:.0} calls/s · {}",
                calls as f64 / took.as_secs_f64(),
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
                (n == 1000).then_some(1.0),
            );
        }
        if lagged > 0 || s.samples < calls {
            r = r.note(format!(
                "{} of {calls} calls timed (the subscriber missed {lagged} events)",
                s.samples
            ));
        }
        rows.push(r);
        rows.push(
            row(
                "P4",
                format!("{label}: the tool guest alone (WasmHost::execute)"),
                summary_value(&guest),
            )
            .data(json!(guest)),
        );
    }

    // The heap an idle session keeps: live bytes (counting allocator) after
    // a batch of sessions has run to idle, against before it, on a core with
    // no timing attached. A first batch fills the bus's ring buffer and the
    // caches, so the second one's growth is what its sessions hold.
    let n = *ns.last().unwrap_or(&100);
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
    Ok(rows)
}
