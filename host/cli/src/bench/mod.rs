//! `warden bench`: where warden stands against the physical floor, measured
//! in one run on this machine, so every figure is read as a ratio to a
//! baseline taken in the same process. It prints one table and writes it as
//! JSON. Nothing here is asserted: a regression is something a reader sees.

mod languages;
mod mock;
mod parts;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};

pub use parts::Row;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Fewer iterations and sessions: a quick look, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the table as JSON.
    #[arg(long, default_value = "bench/latest.json")]
    pub out: PathBuf,
    /// Also write the table as Markdown here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Run only these parts (comma-separated: p1, p2, rss, p3, p4, ingest, langs), e.g. under a profiler.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Keep the scratch directory (ledgers, cassettes, cache) to inspect it afterwards.
    #[arg(long)]
    pub keep: bool,
}

/// Where the run happened.
#[derive(Serialize)]
struct Machine {
    cpu: String,
    cores: usize,
    memory_gib: u64,
    os: String,
    profile: &'static str,
    date: String,
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let memory_gib =
        stats::proc_kib_file("/proc/meminfo", "MemTotal:").unwrap_or(0) / (1024 * 1024);
    Machine {
        cpu,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_gib,
        os: std::env::consts::OS.into(),
        profile: if cfg!(debug_assertions) {
            "debug (numbers are not representative)"
        } else {
            "release"
        },
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    }
}

pub async fn bench(args: BenchArgs) -> Result<ExitCode> {
    let work = std::env::temp_dir().join(format!("warden-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = run_all(&args, &work).await;
    if args.keep {
        say!("(scratch directory kept: {})", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let rows = result?;

    let m = machine();
    let table = parts::markdown(&rows, &m.cpu, m.cores, m.profile);
    say!("{table}");
    let doc = json!({"machine": m, "rows": rows});
    if let Some(dir) = args.out.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    say!("\n(written to {})", args.out.display());
    if let Some(md) = &args.markdown {
        std::fs::write(md, &table)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_all(args: &BenchArgs, work: &Path) -> Result<Vec<Row>> {
    let q = args.quick;
    let want = |part: &str| args.only.is_empty() || args.only.iter().any(|o| o == part);
    let mut rows = Vec::new();
    if want("p1") {
        eprintln!("bench: floor and P1 (one tool call through the real path)…");
        rows.extend(parts::floor_and_p1(work, if q { 300 } else { 2000 }).await?);
    }
    if want("p2") {
        eprintln!("bench: P2 (loop speed)…");
        rows.extend(parts::loop_speed(work, if q { 200 } else { 1000 }).await?);
    }
    if want("rss") {
        eprintln!("bench: P2 (peak RSS of a 2-turn run)…");
        rows.extend(parts::two_turn_rss(work).await?);
    }
    if want("p3") {
        eprintln!("bench: P3 (cold start with 10 plugins)…");
        rows.extend(parts::cold_start(work).await?);
    }
    if want("p4") {
        eprintln!("bench: P4 (concurrent sessions)…");
        let ns: &[usize] = if q {
            &[1, 10, 100]
        } else {
            &[1, 10, 100, 1000]
        };
        rows.extend(parts::concurrency(work, ns).await?);
    }
    if want("ingest") {
        eprintln!("bench: streaming ingest…");
        rows.extend(parts::ingest(work, if q { 2000 } else { 10_000 }).await?);
    }
    if want("langs") {
        eprintln!("bench: a tool per guest language (Rust, Python, JavaScript)…");
        rows.extend(languages::languages(work, if q { 50 } else { 300 }).await?);
    }
    Ok(rows)
}

/// The components the build made (fixtures are used as trivial guests).
fn component(name: &str) -> String {
    format!("{}/{name}", warden_runtime::builtin::plugin_dir())
}

/// A JSON object of about `bytes` bytes, distinct per `n`.
fn payload(bytes: usize, n: usize) -> Value {
    json!({"n": n, "data": "x".repeat(bytes.saturating_sub(20))})
}

/// Time one future.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let t = Instant::now();
    let v = f.await;
    (v, t.elapsed())
}
