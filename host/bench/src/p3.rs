//! Whole `warden` processes: the peak memory of a 2-turn run, a first run on
//! a fresh data dir against a warm one, and process start to the first model
//! request with 10 plugins.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;

use crate::common::{component, run_binary};
use crate::stats::{summarize, summary_value};
use crate::table::{Row, row};

/// A project with `a.txt` and a cassette that reads it, then answers.
fn two_turn_project(work: &Path, name: &str) -> Result<(std::path::PathBuf, String)> {
    let project = work.join(name);
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("a.txt"), "alpha\n")?;
    let cassette = work.join(format!("{name}.json"));
    std::fs::write(
        &cassette,
        json!({"turns": [{"tool_calls": [{"id": "c", "name": "read", "arguments": {"filePath": "a.txt"}}]}, {"text": "alpha"}]}).to_string(),
    )?;
    Ok((project, format!("scripted:{}", cassette.display())))
}

/// P2: the peak memory of a whole `warden run` of two turns (a read, an answer).
pub fn two_turn_rss(work: &Path, warden: &Path) -> Result<Vec<Row>> {
    let (project, model) = two_turn_project(work, "rss")?;
    let data = work.join("rss-data");
    // The first run fills the data dir; the second is the one measured.
    run_binary(
        warden,
        &["run", "--model", &model, "read a.txt"],
        &data,
        &project,
    )?;
    let (_, peak) = run_binary(
        warden,
        &["run", "--model", &model, "read a.txt"],
        &data,
        &project,
    )?;
    let mib = peak as f64 / 1024.0;
    Ok(vec![
        row(
            "P2",
            "peak RSS of a `warden run` process, 2 turns (read, answer), second run on its data dir",
            format!("{mib:.1} MiB"),
        )
        .against("target 27 MiB", mib / 27.0, Some(1.0))
        .note("VmHWM of the process, every built-in plugin loaded")
        .data(json!({"peak_kib": peak})),
    ])
}

/// Spawn to exit of one `warden` process.
fn time_run(warden: &Path, model: &str, data: &Path, project: &Path) -> Result<Duration> {
    let started = Instant::now();
    let out = std::process::Command::new(warden)
        .args(["run", "--model", model, "read a.txt"])
        .current_dir(project)
        .env("WARDEN_DATA_DIR", data)
        .env_remove("WARDEN_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()?;
    let took = started.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "warden run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(took)
}

/// A first `warden run` on a data dir that does not exist yet, against the
/// same run on a data dir that has been used: what a new user waits for.
pub fn first_run(work: &Path, warden: &Path, runs: usize) -> Result<Vec<Row>> {
    let (project, model) = two_turn_project(work, "first")?;
    let warm_data = work.join("first-warm");
    time_run(warden, &model, &warm_data, &project)?;
    let (mut fresh, mut warm) = (Vec::new(), Vec::new());
    for i in 0..runs {
        // Alternate, so a load change on the machine hits both alike.
        fresh.push(time_run(
            warden,
            &model,
            &work.join(format!("first-fresh-{i}")),
            &project,
        )?);
        warm.push(time_run(warden, &model, &warm_data, &project)?);
    }
    let f = summarize(&fresh);
    let w = summarize(&warm);
    Ok(vec![
        row(
            "first run",
            "`warden run`, 2 turns (read, answer), spawn to exit, on a fresh data dir",
            summary_value(&f),
        )
        .against(
            format!("the same run on a used data dir: {}", summary_value(&w)),
            f.median_us / w.median_us,
            Some(2.0),
        )
        .note(format!("target ≤ 2×; {runs} runs each, alternating; built-in plugins come compiled in the binary"))
        .data(json!({"fresh": f, "warm": w})),
    ])
}

/// P3: process start to the first model request with 10 plugins.
pub async fn cold_start(work: &Path, warden: &Path) -> Result<Vec<Row>> {
    let project = work.join("p3");
    std::fs::create_dir_all(&project)?;
    let data = work.join("p3-data");
    // The operator's config (`--config`), not the project's own warden.json,
    // which is not trusted until `warden trust` and could not be: its bytes
    // change with the mock's port every run.
    let config = work.join("p3-config.json");
    let config_arg = config.display().to_string();
    let mut rows = Vec::new();
    for (label, runs) in [("fresh data dir", 1usize), ("used data dir", 5)] {
        let mut samples = Vec::new();
        for _ in 0..runs {
            let epoch = Instant::now();
            let mock = crate::mock::start(0, "echo", "{}", epoch).await;
            // 7 built-ins (webfetch granted a host), 2 fixture tool plugins, 1 hook.
            std::fs::write(
                &config,
                json!({
                    "builtin_grants": {"webfetch": {"hosts": ["127.0.0.1"], "timeout_ms": 60000}},
                    "provider": {"bench": {"api": "openai-chat", "base_url": format!("http://127.0.0.1:{}/v1", mock.port)}},
                    "plugins": [
                        {"name": "fx", "path": component("warden_fixtures.wasm")},
                        {"name": "raw", "path": component("warden_fixtures_raw.wasm")},
                        {"name": "redact", "path": component("warden_hook_redact.wasm")}
                    ]
                })
                .to_string(),
            )?;
            let start = epoch.elapsed();
            tokio::task::block_in_place(|| {
                run_binary(
                    warden,
                    &["run", "--config", &config_arg, "--model", "bench/m", "hi"],
                    &data,
                    &project,
                )
            })?;
            let first = mock.first_request_ns.load(Ordering::SeqCst);
            anyhow::ensure!(first > 0, "the model was never asked");
            samples.push(Duration::from_nanos(first).saturating_sub(start));
        }
        let s = summarize(&samples);
        let ms = s.median_us / 1000.0;
        let mut r = row(
            "P3",
            format!("process spawn → first model request, 10 plugins (7 built-in, 3 from files), {label}"),
            format!("{ms:.1} ms"),
        )
        .data(json!(s));
        if runs > 1 {
            r = r.against("target 32 ms", ms / 32.0, Some(1.0));
        } else {
            r = r.note("the 3 plugins from files are compiled and cached; the built-ins come compiled in the binary");
        }
        rows.push(r);
    }
    Ok(rows)
}
