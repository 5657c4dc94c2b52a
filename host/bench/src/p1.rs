//! P1: one tool call through the real processor. A scripted session of
//! single-call steps (the `echo` fixture with 1 KiB arguments, the fixture
//! hook before and after it); each call is timed from the moment the model's
//! tool call leaves the provider's stream to the moment a bus subscriber
//! receives its completed part. In between is everything the processor does:
//! parsing the arguments, the doom-loop scan, the running write, building and
//! spawning the call, permission, before hook, tool, after hook, the audit
//! row, the channel hop back and the completed write.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use warden_core::{Bus, Ledger, PromptInput};
use warden_llm::Models;
use warden_protocol::ModelRef;

use crate::common::{self, CallClock};
use crate::floor::Floors;
use crate::stats::{Summary, fmt_us, median, summarize, summary_value};
use crate::table::{Row, row};

/// Steps per session: long enough to be a session, short enough that the
/// history each round re-reads stays a few hundred messages.
const STEPS_PER_SESSION: usize = 200;

/// What one P1 run measured.
pub struct Run {
    /// Each call, from its tool call to its completed part on the bus.
    pub calls: Summary,
    /// The transactions a call's window holds (the ledger writes the bus
    /// carried in it, median, + the call's audit row).
    pub txns: f64,
    /// Events the bus subscriber missed.
    pub lagged: u64,
    /// The guest calls' medians as the audit trail recorded them, µs:
    /// before / tool / after.
    pub guest: (f64, f64, f64),
}

/// Run P1's sessions on `ledger` (SQLite or PostgreSQL), at least `n`
/// timed calls, in a project folder `name` of `work`.
pub async fn run(work: &Path, name: &str, ledger: Ledger, n: usize) -> Result<Run> {
    let project = work.join(name);
    std::fs::create_dir_all(&project)?;
    let config = common::guest_config(true)?;
    let host = common::host(work, &config).await?;
    let models = Models::new();
    let core = common::core_with(ledger, host, config, models.clone())?;
    let clock = CallClock::watch(core.bus());
    // `Models` clones share one registry: the core resolves `stamped` too.
    clock.stamp_calls(&models);

    let warm_sessions = 1;
    let sessions = n.div_ceil(STEPS_PER_SESSION) + warm_sessions;
    let mut skip = 0usize;
    for s in 0..sessions {
        let cassette = work.join(format!("{name}-{s}.json"));
        common::cassette(&cassette, STEPS_PER_SESSION, 1024)?;
        let session = core
            .create_session(&project, &format!("{name} {s}"))
            .await?;
        let answer = core
            .prompt(PromptInput {
                session_id: session.id.clone(),
                text: "go".into(),
                model: Some(ModelRef {
                    provider: "stamped".into(),
                    model: cassette.display().to_string(),
                }),
                ..PromptInput::default()
            })
            .await?;
        anyhow::ensure!(answer.text() == "done", "a P1 session did not finish");
        if s < warm_sessions {
            skip = STEPS_PER_SESSION;
        }
    }
    // Let the subscriber take the last events off the bus.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let windows: Vec<(Duration, usize)> = clock.windows().into_iter().skip(skip).collect();
    anyhow::ensure!(!windows.is_empty(), "no tool call was timed");
    let lagged = *clock.lagged.lock().unwrap_or_else(|p| p.into_inner());

    let calls = summarize(&windows.iter().map(|w| w.0).collect::<Vec<_>>());
    // The transactions the window really holds: the ledger writes the bus
    // carried in it, and the call's audit row (not published).
    let mut writes: Vec<f64> = windows.iter().map(|w| w.1 as f64).collect();
    let txns = median(&mut writes) + 1.0;

    // The guest calls inside it, as the audit trail recorded them (WasmHost
    // timing: fresh instance, grants, limits).
    let mut trail = Vec::new();
    for s in core.ledger().sessions().await? {
        trail.extend(core.ledger().audit_trail(&s.id).await?);
    }
    let stage = |name: &str| -> f64 {
        let mut us: Vec<f64> = trail
            .iter()
            .filter(|e| e.stage == name)
            .filter_map(|e| e.duration_us)
            .map(|d| d as f64)
            .collect();
        median(&mut us)
    };
    Ok(Run {
        calls,
        txns,
        lagged,
        guest: (stage("before"), stage("tool"), stage("after")),
    })
}

pub async fn measure(work: &Path, floors: &Floors, n: usize) -> Result<Vec<Row>> {
    let ledger = Ledger::open(&work.join("p1.db"), Bus::new())?;
    let Run {
        calls: p1,
        txns,
        lagged,
        guest: (g_before, g_tool, g_after),
    } = run(work, "p1", ledger, n).await?;
    let floor = floors.tool.median_us
        + floors.before.median_us
        + floors.after.median_us
        + txns * floors.txn.median_us;

    Ok(vec![
        row(
            "P1",
            "single-call step, from the model's tool call leaving the provider stream to its completed part received on the bus: the real processor, 3 guest calls (hook before, `echo` 1 KiB, hook after)",
            summary_value(&p1),
        )
        .against(
            format!(
                "bare floor: 3 bare guest calls + {txns:.0} bare transactions = {}",
                fmt_us(floor)
            ),
            p1.median_us / floor,
            Some(2.0),
        )
        .note(format!(
            "target ≤ 2×; {txns:.0} transactions = the ledger writes the bus carried in the window + the call's audit row; {} calls{}",
            p1.samples,
            if lagged > 0 { format!("; the subscriber missed {lagged} events") } else { String::new() }
        ))
        .data(json!({"p1": p1, "floor_us": floor, "transactions": txns, "lagged": lagged})),
        row(
            "P1",
            "… of which the guest calls, as warden timed them (WasmHost, audit trail): before / tool / after",
            format!("{} / {} / {}", fmt_us(g_before), fmt_us(g_tool), fmt_us(g_after)),
        )
        .against(
            format!(
                "bare: {} / {} / {}",
                fmt_us(floors.before.median_us),
                fmt_us(floors.tool.median_us),
                fmt_us(floors.after.median_us)
            ),
            (g_before + g_tool + g_after)
                / (floors.before.median_us + floors.tool.median_us + floors.after.median_us),
            None,
        )
        .data(json!({"before_us": g_before, "tool_us": g_tool, "after_us": g_after})),
    ])
}
