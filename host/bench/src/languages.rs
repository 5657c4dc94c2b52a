//! What a tool costs per guest language: the `warden plugin new` tool in
//! Rust, Python and JavaScript, built with `warden plugin build`'s pinned
//! toolchains, then measured the way the host runs it: component size,
//! first compile, loading the compiled cache, and a call in a fresh
//! instance (the same 1 KiB-file count in each language). The projects are
//! made and built by the `warden` binary (`plugin new`, `plugin build`), as
//! an author would, with the toolchains cached in the default data dir.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use warden_core::config::Config;
use warden_core::tool::{CallContext, CallObserver, ToolSource, Unattended};
use warden_protocol::{MessageId, SessionId};
use warden_runtime::WasmHost;
use warden_runtime::engine::{Sandbox, sha256_hex};

use crate::common::timed;
use crate::stats::summarize;
use crate::table::Row;

fn row(measure: String, value: String, data: Value) -> Row {
    Row {
        group: "languages",
        measure,
        value,
        against: String::new(),
        ratio: None,
        meets: None,
        note: String::new(),
        data,
    }
}

/// `warden plugin new NAME --lang LANG --dir DIR`, then `warden plugin
/// build DIR`; the component's path, as the build reports it.
fn make_tool(warden: &Path, name: &str, lang: &str, dir: &Path) -> Result<PathBuf> {
    let run = |args: &[&std::ffi::OsStr]| -> Result<String> {
        let out = std::process::Command::new(warden)
            .args(args)
            .env_remove("WARDEN_CONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", warden.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "warden {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(&[
        "plugin".as_ref(),
        "new".as_ref(),
        name.as_ref(),
        "--lang".as_ref(),
        lang.as_ref(),
        "--dir".as_ref(),
        dir.as_os_str(),
    ])?;
    let built = run(&["plugin".as_ref(), "build".as_ref(), dir.as_os_str()])?;
    built
        .lines()
        .find_map(|l| l.strip_prefix("built "))
        .map(PathBuf::from)
        .with_context(|| format!("`warden plugin build` did not say what it built: {built}"))
}

/// A row of timings in ms with `decimals`, read against `against` (what,
/// ratio) when given.
fn timed_row(
    measure: String,
    s: &crate::stats::Summary,
    decimals: usize,
    against: Option<(&str, f64)>,
) -> Row {
    let mut r = row(
        measure,
        format!(
            "median {:.decimals$} ms · p99 {:.decimals$} ms",
            s.median_us / 1000.0,
            s.p99_us / 1000.0
        ),
        json!({"median_us": s.median_us, "p99_us": s.p99_us, "samples": s.samples}),
    );
    if let Some((what, ratio)) = against {
        r.against = what.into();
        r.ratio = Some(ratio);
    }
    r
}

/// `n` timed calls of the template tool in `directory` (after a tenth more
/// untimed), with instances prepared per `policy`. Each call follows a 1 ms
/// pause, untimed, as calls follow a model's answer; with `always` the pause
/// lasts until the instance made after the previous call is ready.
async fn timed_calls(
    work: &Path,
    name: &str,
    wasm: &Path,
    directory: &str,
    policy: &str,
    n: usize,
) -> Result<crate::stats::Summary> {
    let config = Config::parse(
        &json!({"builtins": false, "prepare_instances": policy,
            "plugins": [{"name": name, "path": wasm,
            "grants": {"dirs": [{"path": ".", "mode": "ro"}]}}]})
        .to_string(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let host = WasmHost::load(
        &config.plugin_set(),
        Some(work.join(format!("cache-{name}"))),
        None,
    )
    .await?;
    let tool = host
        .tools()
        .into_iter()
        .next()
        .context("the template's tool")?;
    let ctx = CallContext {
        session_id: SessionId("ses_bench".into()),
        message_id: MessageId("msg_bench".into()),
        call_id: "c".into(),
        agent: "build".into(),
        directory: directory.to_string(),
    };
    let observer: Arc<dyn CallObserver> = Arc::new(Unattended);
    let args = json!({"path": "words.txt"}).to_string();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 + 5 {
        if i > 0 {
            // The pause a model's answer makes between two calls (1 ms here),
            // and with `always` until the next instance is ready.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            let ready = Instant::now() + std::time::Duration::from_secs(10);
            while policy == "always" && host.prepared_stats().made < i as u64 {
                anyhow::ensure!(
                    Instant::now() < ready,
                    "no instance was made ahead of call {i}"
                );
                tokio::time::sleep(std::time::Duration::from_micros(200)).await;
            }
        }
        let (out, t) = timed(host.execute(&tool, &ctx, &args, observer.clone())).await;
        out.map_err(|e| anyhow::anyhow!("{name} tool call failed: {e}"))?;
        if i >= n / 10 + 5 {
            samples.push(t);
        }
    }
    if policy == "always" {
        let taken = host.prepared_stats().taken;
        anyhow::ensure!(
            taken == (n + n / 10 + 4) as u64,
            "{name}: only {taken} calls took an instance made ahead"
        );
    }
    Ok(summarize(&samples))
}

/// Build the template tool in each language and measure it over `n` calls.
pub async fn languages(work: &Path, warden: &Path, n: usize) -> Result<Vec<Row>> {
    let project_dir = work.join("langs-project");
    std::fs::create_dir_all(&project_dir)?;
    std::fs::write(
        project_dir.join("words.txt"),
        "lorem ipsum dolor\n".repeat(56),
    )?;
    let mut rows = Vec::new();
    let mut rust_median = None;
    let mut rust_instance = None;
    for (lang, label) in [("rust", "Rust"), ("python", "Python"), ("js", "JavaScript")] {
        let name = format!("bench-{}", label.to_lowercase());
        let dir = work.join(&name);
        let wasm = make_tool(warden, &name, lang, &dir)?;
        let bytes = std::fs::read(&wasm)?;

        // First compile, as `plugin add` pays it once.
        let sandbox = Sandbox::new(64, Some(work.join(format!("cache-{name}"))))?;
        let t = Instant::now();
        sandbox.component(&bytes, &sha256_hex(&bytes))?;
        let compile = t.elapsed();
        let t = Instant::now();
        let component = sandbox.component(&bytes, &sha256_hex(&bytes))?;
        let cached = t.elapsed();
        // The fresh instance alone, before the guest runs anything.
        let instances = summarize(
            &crate::floor::bare_instances(&sandbox.engine, &component, n, n / 10 + 5).await?,
        );

        let directory = std::fs::canonicalize(&project_dir)?.display().to_string();
        let never = timed_calls(work, &name, &wasm, &directory, "never", n).await?;
        let ahead = timed_calls(work, &name, &wasm, &directory, "always", n).await?;
        let against = rust_median.map(|(never, _): (f64, f64)| never);
        let ahead_against = rust_median.map(|(_, ahead): (f64, f64)| ahead);
        let instance_against = rust_instance.map(|r: f64| instances.median_us / r);
        if lang == "rust" {
            rust_median = Some((never.median_us, ahead.median_us));
            rust_instance = Some(instances.median_us);
        }
        let call = timed_row(
            format!(
                "{label} tool call (1 KiB file), 1 ms after the last, fresh instance made on the call's path (prepare_instances: never)"
            ),
            &never,
            2,
            against.map(|r| ("the Rust tool", never.median_us / r)),
        );
        let call_ahead = timed_row(
            format!(
                "{label} tool call (1 KiB file), 1 ms or more after the last, fresh instance made ahead in that pause (prepare_instances: always)"
            ),
            &ahead,
            2,
            ahead_against.map(|r| ("the Rust tool", ahead.median_us / r)),
        );
        rows.push(row(
            format!("{label} component: size · first compile · cached load"),
            format!(
                "{:.1} MB · {:.2} s · {:.1} ms",
                bytes.len() as f64 / 1e6,
                compile.as_secs_f64(),
                cached.as_secs_f64() * 1000.0
            ),
            json!({"bytes": bytes.len(), "compile_ms": compile.as_millis() as u64,
                   "cached_load_us": cached.as_micros() as u64}),
        ));
        let instance = timed_row(
            format!(
                "{label} fresh instance alone: new store (empty WASI context) + instantiate, no call (bare wasmtime, warden's engine settings)"
            ),
            &instances,
            3,
            instance_against.map(|r| ("the Rust tool's", r)),
        );
        rows.push(instance);
        rows.push(call);
        rows.push(call_ahead);
    }
    Ok(rows)
}
