//! P1: one tool call through the real processor. A scripted session of
//! single-call steps (the `echo` fixture with 1 KiB arguments, the fixture
//! hook before and after it); each call is timed from the moment the model's
//! tool call leaves the provider's stream to the moment a bus subscriber
//! receives its completed part. In between is everything the processor does:
//! parsing the arguments, the doom-loop scan, the running write, building and
//! spawning the call, permission, before hook, tool, after hook, the audit
//! row, the channel hop back and the completed write.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use warden_core::ledger::{AuditEntry, SqliteStore, Store};
use warden_core::tool::Registry;
use warden_core::{Bus, Ledger, PromptInput};
use warden_llm::Models;
use warden_protocol::ModelRef;

use crate::common::{self, CallClock, Window};
use crate::floor::Floors;
use crate::stats::{Summary, fmt_us, median, summarize, summary_value};
use crate::table::{Row, row};
use warden_core::ledger::counted::{self, Counted};

/// Steps per session: long enough to be a session, short enough that the
/// history each round re-reads stays a few hundred messages.
const STEPS_PER_SESSION: usize = 200;

/// What one P1 run measured.
pub struct Run {
    /// Each call, from its tool call to its completed part on the bus.
    pub calls: Summary,
    /// The ledger's transactions that ended inside a call's window (median
    /// over the calls), counted at the backend, and the names of those of
    /// the median window.
    pub writes: f64,
    pub write_names: Vec<&'static str>,
    /// Reads the backend answered inside a call's window (median).
    pub reads: f64,
    /// Events the bus subscriber missed.
    pub lagged: u64,
    /// The guest calls' medians as the audit trail recorded them, µs:
    /// before / tool / after.
    pub guest: (f64, f64, f64),
    /// Where each call's window went (medians over the calls).
    pub shares: Shares,
}

/// One call's window in four shares, µs: the ledger's transactions (the
/// backend's time for the writes that ended in it), the three guest calls
/// (as the audit trail timed them), the completed part's way from its
/// commit to the subscriber (the held copy, the bus, the subscriber's
/// wake-up), and the rest: the processor, the boundary, the task and
/// channel hops.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shares {
    pub writes: f64,
    pub guests: f64,
    pub delivery: f64,
    pub rest: f64,
}

impl Run {
    /// "5 transactions (put_part ×3, …) and 1 read".
    pub fn counted(&self) -> String {
        let names: Vec<String> = counted::tally(&self.write_names)
            .iter()
            .map(|(n, k)| {
                if *k > 1 {
                    format!("{n} ×{k}")
                } else {
                    n.to_string()
                }
            })
            .collect();
        format!(
            "{:.0} transactions ({}) and {:.0} reads",
            self.writes,
            names.join(", "),
            self.reads
        )
    }
}

/// Run P1's sessions on `store` (SQLite or PostgreSQL), at least `n` timed
/// calls, in a project folder `name` of `work`. The store is counted
/// ([`counted`]): every transaction that ends inside a call's window is one
/// the call's path waited for or ran beside.
pub async fn run(work: &Path, name: &str, store: Arc<dyn Store>, n: usize) -> Result<Run> {
    let project = work.join(name);
    std::fs::create_dir_all(&project)?;
    let config = common::guest_config(true)?;
    let host = common::host(work, &config).await?;
    let models = Models::new();
    let (counted, store_calls) = Counted::new(store);
    let core = common::core_with(
        Ledger::new(counted, Bus::new()),
        Registry::of(host),
        config,
        models.clone(),
    )?;
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
    let windows: Vec<Window> = clock.windows().into_iter().skip(skip).collect();
    anyhow::ensure!(!windows.is_empty(), "no tool call was timed");
    let lagged = *clock.lagged.lock().unwrap_or_else(|p| p.into_inner());
    let calls = summarize(&windows.iter().map(Window::duration).collect::<Vec<_>>());
    // What the backend did inside each window.
    let store_calls = store_calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut inside: Vec<(Vec<&'static str>, usize)> = windows
        .iter()
        .map(|w| counted::within(&store_calls, w.start, w.end))
        .collect();
    // The guest calls inside it, as the audit trail recorded them (WasmHost
    // timing: fresh instance, grants, limits).
    let trail = trail_of(&core).await?;
    let shares = shares(&windows, &store_calls, &trail);
    inside.sort_by_key(|(writes, _)| writes.len());
    let write_names = inside[inside.len() / 2].0.clone();
    let mut writes: Vec<f64> = inside.iter().map(|(w, _)| w.len() as f64).collect();
    let mut reads: Vec<f64> = inside.iter().map(|(_, r)| *r as f64).collect();

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
        writes: median(&mut writes),
        write_names,
        reads: median(&mut reads),
        lagged,
        guest: (stage("before"), stage("tool"), stage("after")),
        shares,
    })
}

/// Every audit row of the core's sessions.
async fn trail_of(core: &warden_core::Core) -> Result<Vec<AuditEntry>> {
    let mut trail = Vec::new();
    for s in core.ledger().sessions().await? {
        trail.extend(core.ledger().audit_trail(&s.id).await?);
    }
    Ok(trail)
}

/// The guest stages of a call, as the audit trail names them.
const GUEST_STAGES: [&str; 3] = ["before", "tool", "after"];

/// Each window's shares, and their medians.
fn shares(windows: &[Window], calls: &[counted::Call], trail: &[AuditEntry]) -> Shares {
    let mut guests: HashMap<(&str, &str), f64> = HashMap::new();
    for e in trail {
        if let (Some(call), Some(us)) = (&e.call_id, e.duration_us)
            && GUEST_STAGES.contains(&e.stage.as_str())
        {
            *guests.entry((e.session_id.as_str(), call)).or_default() += us as f64;
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (mut w, mut g, mut d, mut r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for win in windows {
        let (spent, last) = counted::write_time(calls, win.start, win.end);
        let guest = guests
            .get(&(win.key.0.as_str(), win.key.1.as_str()))
            .copied()
            .unwrap_or(0.0);
        let delivery = last.map_or(0.0, |l| us(win.end.saturating_duration_since(l)));
        w.push(us(spent));
        g.push(guest);
        d.push(delivery);
        r.push((us(win.duration()) - us(spent) - guest - delivery).max(0.0));
    }
    Shares {
        writes: median(&mut w),
        guests: median(&mut g),
        delivery: median(&mut d),
        rest: median(&mut r),
    }
}

pub async fn measure(work: &Path, floors: &Floors, n: usize) -> Result<Vec<Row>> {
    let store = Arc::new(SqliteStore::open(&work.join("p1.db"))?);
    let run = run(work, "p1", store, n).await?;
    let (p1, g, s) = (&run.calls, run.guest, run.shares);
    let floor = floors.warm_guests() + run.writes * floors.txn.median_us;

    Ok(vec![
        row(
            "P1",
            "single-call step, from the model's tool call leaving the provider stream to its completed part received on the bus: the real processor, 3 guest calls (hook before, `echo` 1 KiB, hook after)",
            summary_value(p1),
        )
        .against(
            format!(
                "bare floor: 3 bare guest calls + {:.0} bare transactions = {}",
                run.writes,
                fmt_us(floor)
            ),
            p1.median_us / floor,
            Some(2.0),
        )
        .note(format!(
            "target ≤ 2×; in the window, counted at the ledger's backend: {}; {} calls{}",
            run.counted(),
            p1.samples,
            if run.lagged > 0 {
                format!("; the subscriber missed {} events", run.lagged)
            } else {
                String::new()
            }
        ))
        .data(json!({"p1": p1, "floor_us": floor, "transactions": run.writes, "reads": run.reads, "lagged": run.lagged})),
        row(
            "P1",
            "… of which the guest calls, as warden timed them (WasmHost, audit trail): before / tool / after",
            format!("{} / {} / {}", fmt_us(g.0), fmt_us(g.1), fmt_us(g.2)),
        )
        .against(
            format!(
                "bare: {} / {} / {}",
                fmt_us(floors.before.median_us),
                fmt_us(floors.tool.median_us),
                fmt_us(floors.after.median_us)
            ),
            (g.0 + g.1 + g.2)
                / (floors.before.median_us + floors.tool.median_us + floors.after.median_us),
            None,
        )
        .data(json!({"before_us": g.0, "tool_us": g.1, "after_us": g.2})),
        row(
            "P1",
            "… where each call's window went (median of each share over the calls): the ledger's transactions (the backend's time for the writes that ended in the window) / the 3 guest calls (audit trail) / the completed part from its commit to the subscriber (held copy, bus, the subscriber thread's wake-up) / the rest (the processor, the boundary, task and channel hops)",
            format!(
                "{} / {} / {} / {}",
                fmt_us(s.writes),
                fmt_us(s.guests),
                fmt_us(s.delivery),
                fmt_us(s.rest)
            ),
        )
        .against(
            format!(
                "bare: {:.0} transactions {} / guest calls warm {}, cold {}",
                run.writes,
                fmt_us(run.writes * floors.txn.median_us),
                fmt_us(floors.warm_guests()),
                fmt_us(floors.cold_guests())
            ),
            (s.writes + s.guests) / (run.writes * floors.txn.median_us + floors.warm_guests()),
            None,
        )
        .note("medians of each share, so they need not add up to the window's median; the ratio is transactions and guest calls against their warm bare floors")
        .data(json!({"writes_us": s.writes, "guests_us": s.guests, "delivery_us": s.delivery, "rest_us": s.rest})),
    ])
}
