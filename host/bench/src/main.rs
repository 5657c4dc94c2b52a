//! `warden-bench`: where warden stands against the bare floor, measured in
//! one run on this machine. Every warden figure is read against a floor that
//! is *not* warden's code (a bare rusqlite transaction, a bare wasmtime
//! instantiate-and-call, a bare JSON parse), taken in the same process on the
//! same engine settings, so a noisy shared machine moves both sides together.
//! It prints one table and writes it as JSON. Nothing is asserted: a
//! regression is something a reader sees.
//!
//! Where to start reading: [`floor`] (the bare floors), then [`p1`] (one tool
//! call through the real processor), [`p2`], [`p3`], [`p4`], [`pg`] (the
//! PostgreSQL ledger against SQLite), [`ingest`].
//! Live heap bytes come from the counting allocator in [`alloc`].

mod alloc;
mod common;
mod floor;
mod ingest;
mod languages;
mod mock;
mod p1;
mod p2;
mod p3;
mod p4;
mod pg;
mod serve;
mod stats;
mod table;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;

use table::Row;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// The parts, in the order they run.
const PARTS: &[&str] = &[
    "floor",
    "p1",
    "p2",
    "rss",
    "first-run",
    "p3",
    "p4",
    "pg",
    "ingest",
    "langs",
    "serve",
];

/// Measure warden against the bare floor and print the table.
#[derive(Parser)]
#[command(name = "warden-bench", about, long_about = None)]
struct Args {
    /// Fewer iterations and sessions: a quick look, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Where to write the table as JSON.
    #[arg(long, default_value = "bench/latest.json")]
    out: PathBuf,
    /// Also write the table as Markdown here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Run only these parts (comma-separated: floor, p1, p2, rss, first-run, p3, p4, pg, ingest, langs, serve).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Keep the scratch directory (ledgers, cassettes, cache) to inspect it afterwards.
    #[arg(long)]
    keep: bool,
    /// The `warden` binary the process-level parts run (default: built by
    /// `cargo build --release -p warden` from this checkout).
    #[arg(long)]
    warden: Option<PathBuf>,
    /// Another `warden` binary (an older commit's build, say) the serve part
    /// also runs, alternating wave by wave, to read the two side by side.
    #[arg(long)]
    baseline_warden: Option<PathBuf>,
    /// Prompts per wave in the serve part.
    #[arg(long, default_value_t = 400)]
    serve_sessions: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    for o in &args.only {
        if !PARTS.contains(&o.as_str()) {
            eprintln!(
                "warden-bench: unknown part {o:?}; the parts are {}",
                PARTS.join(", ")
            );
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("warden-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warden-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(args: Args) -> Result<()> {
    let started = Instant::now();
    let work = std::env::temp_dir().join(format!("warden-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = run_all(&args, &work).await;
    if args.keep {
        eprintln!("(scratch directory kept: {})", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let rows = result?;
    let took = started.elapsed();

    let m = table::machine(took);
    let text = table::markdown(&rows, &m);
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{text}");
    let doc = json!({"machine": m, "rows": rows});
    if let Some(dir) = args.out.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let _ = writeln!(out, "\n(written to {})", args.out.display());
    if let Some(md) = &args.markdown {
        std::fs::write(md, &text).with_context(|| format!("cannot write {}", md.display()))?;
    }
    Ok(())
}

async fn run_all(args: &Args, work: &Path) -> Result<Vec<Row>> {
    let q = args.quick;
    let want = |part: &str| args.only.is_empty() || args.only.iter().any(|o| o == part);
    let needs_binary = ["rss", "first-run", "p3", "langs", "serve"]
        .iter()
        .any(|p| want(p));
    let warden = if needs_binary {
        Some(common::warden_binary(args.warden.as_deref())?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut floors = None;
    if want("floor") || want("p1") {
        eprintln!("bench: bare floors…");
        let f = floor::measure(work, if q { 300 } else { 2000 }).await?;
        rows.extend(f.rows());
        floors = Some(f);
    }
    if want("p1")
        && let Some(f) = &floors
    {
        eprintln!("bench: P1 (single-call steps through the processor)…");
        rows.extend(p1::measure(work, f, if q { 300 } else { 2000 }).await?);
    }
    if want("p2") {
        eprintln!("bench: P2 (loop speed, ledger size, loopback OpenAI)…");
        rows.extend(p2::loop_speed(work, if q { 200 } else { 1000 }).await?);
        let long = if q { 1000 } else { 10_000 };
        rows.extend(p2::by_length(work, long, p2::Model::Scripted).await?);
        rows.extend(p2::by_length(work, long, p2::Model::Loopback).await?);
    }
    if let Some(warden) = &warden {
        if want("rss") {
            eprintln!("bench: P2 (peak RSS of a 2-turn run)…");
            rows.extend(p3::two_turn_rss(work, warden)?);
        }
        if want("first-run") {
            eprintln!("bench: first run on a fresh data dir…");
            rows.extend(p3::first_run(work, warden, if q { 3 } else { 7 })?);
        }
        if want("p3") {
            eprintln!("bench: P3 (process start to first model request, 10 plugins)…");
            rows.extend(p3::cold_start(work, warden).await?);
        }
    }
    if want("p4") {
        eprintln!("bench: P4 (concurrent sessions)…");
        let ns: &[usize] = if q {
            &[1, 10, 100]
        } else {
            &[1, 10, 100, 1000, 5000]
        };
        rows.extend(
            p4::measure(work, ns, p4::Backend::Sqlite, &Vec::new())
                .await?
                .0,
        );
    }
    if want("pg") {
        eprintln!("bench: the PostgreSQL ledger (a throwaway cluster on loopback)…");
        rows.extend(pg::measure(work, &pg::Sizes::new(q)).await?);
        eprintln!("bench: P4 on the PostgreSQL ledger…");
        let (ns, base): (&[usize], &[usize]) = if q {
            (&[1, 100], &[100])
        } else {
            (&[1, 100, 1000, 5000], &[1000])
        };
        let (alone, rates) =
            p4::measure(work, base, p4::Backend::PostgresAlone, &Vec::new()).await?;
        rows.extend(alone);
        rows.extend(
            p4::measure(work, ns, p4::Backend::Postgres, &rates)
                .await?
                .0,
        );
    }
    if want("ingest") {
        eprintln!("bench: streaming ingest…");
        rows.extend(ingest::measure(work, if q { 2000 } else { 10_000 }).await?);
    }
    if want("langs")
        && let Some(warden) = &warden
    {
        eprintln!("bench: a tool per guest language (Rust, Python, JavaScript)…");
        rows.extend(languages::languages(work, warden, if q { 50 } else { 300 }).await?);
    }
    if want("serve")
        && let Some(warden) = &warden
    {
        eprintln!("bench: waves of concurrent prompts to `warden serve`…");
        let baseline = match &args.baseline_warden {
            Some(b) => Some(
                b.canonicalize()
                    .with_context(|| format!("no warden binary at {}", b.display()))?,
            ),
            None => None,
        };
        let n = if q {
            args.serve_sessions.min(50)
        } else {
            args.serve_sessions
        };
        rows.extend(
            serve::measure(work, warden, baseline.as_deref(), n, if q { 2 } else { 5 }).await?,
        );
    }
    Ok(rows)
}
