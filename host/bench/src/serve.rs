//! Waves of concurrent prompts against a `warden serve` process over
//! loopback: N sessions created, then N `POST /session/{id}/message` sent at
//! once, each answered after a read call and a text turn. A wave is timed
//! from the first request sent to the last answer read. Each wave uses new
//! sessions (the cassette has two turns per session).
//!
//! Given a second binary (`--baseline-warden`, e.g. an older commit's
//! build), the same waves run against it in the same run, alternating wave
//! by wave, so a load change on the machine hits both alike: the ratio says
//! whether a difference is the code or the machine.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::stats::{fmt_us, summarize};
use crate::table::{Row, row};

const TOKEN: &str = "warden-bench-token";

/// One `warden serve` on loopback, killed when dropped.
struct Served {
    child: Child,
    base: String,
    project: String,
    model: Value,
    http: reqwest::Client,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(warden: &Path, work: &Path, name: &str) -> Result<Served> {
        let project = work.join(name);
        std::fs::create_dir_all(&project)?;
        std::fs::write(project.join("a.txt"), "alpha\n")?;
        let cassette = work.join(format!("{name}.json"));
        std::fs::write(
            &cassette,
            json!({"turns": [
                {"tool_calls": [{"id": "c", "name": "read", "arguments": {"filePath": "a.txt"}}]},
                {"text": "alpha"}
            ]})
            .to_string(),
        )?;
        let mut child = std::process::Command::new(warden)
            .args(["serve", "--port", "0", "--allow-scripted"])
            .current_dir(&project)
            .env("WARDEN_DATA_DIR", work.join(format!("{name}-data")))
            .env("WARDEN_TOKEN", TOKEN)
            .env_remove("WARDEN_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", warden.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .with_context(|| format!("`warden serve` printed no address: {line:?}"))?
            .to_string();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {TOKEN}").parse()?,
        );
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .pool_max_idle_per_host(2048)
            .timeout(Duration::from_secs(300))
            .build()?;
        Ok(Served {
            child,
            base,
            project: project.display().to_string(),
            model: json!({"providerID": "scripted", "modelID": cassette.display().to_string()}),
            http,
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let status = res.status();
        let text = res.text().await?;
        anyhow::ensure!(status.is_success(), "POST {path}: {status} {text}");
        Ok(serde_json::from_str(&text)?)
    }

    async fn new_session(&self) -> Result<String> {
        let body = self
            .post("/session", json!({"directory": self.project}))
            .await?;
        body["id"]
            .as_str()
            .map(str::to_string)
            .context("POST /session answered no id")
    }

    /// One wave: `n` new sessions, then one prompt each, all at once. The
    /// wave's time and each prompt's.
    /// With `watched`, each session also has a client reading its event
    /// stream throughout, as OpenCode's clients do.
    async fn wave(&self, n: usize, watched: bool) -> Result<(Duration, Vec<Duration>)> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.new_session().await?);
        }
        let mut watchers = tokio::task::JoinSet::new();
        if watched {
            for id in &ids {
                let res = self
                    .http
                    .get(format!("{}/event?session={id}", self.base))
                    .send()
                    .await?;
                anyhow::ensure!(res.status().is_success(), "GET /event: {}", res.status());
                watchers.spawn(async move {
                    use futures::StreamExt;
                    let mut body = res.bytes_stream();
                    while let Some(Ok(_)) = body.next().await {}
                });
            }
        }
        let started = Instant::now();
        let prompts = ids.iter().map(|id| async move {
            let t = Instant::now();
            let answer = self
                .post(
                    &format!("/session/{id}/message"),
                    json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": self.model}),
                )
                .await?;
            anyhow::ensure!(
                answer["info"]["finish"] == "stop",
                "the prompt of {id} did not finish: {answer}"
            );
            Ok(t.elapsed())
        });
        let each = futures::future::try_join_all(prompts).await?;
        let took = started.elapsed();
        watchers.abort_all();
        Ok((took, each))
    }
}

/// Waves of `n` prompts against `warden` (and `baseline`, alternating),
/// first unwatched, then with an event stream per session.
pub async fn measure(
    work: &Path,
    warden: &Path,
    baseline: Option<&Path>,
    n: usize,
    waves: usize,
) -> Result<Vec<Row>> {
    let this = Served::start(warden, work, "serve-this")?;
    let base = match baseline {
        Some(b) => Some(Served::start(b, work, "serve-baseline")?),
        None => None,
    };
    // A warm-up wave each.
    this.wave(n.min(20), false).await?;
    if let Some(b) = &base {
        b.wave(n.min(20), false).await?;
    }
    let mut rows = Vec::new();
    for watched in [false, true] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut our_each, mut their_each) = (Vec::new(), Vec::new());
        let mut alone = Vec::new();
        for _ in 0..waves {
            let (w, each) = this.wave(n, watched).await?;
            ours.push(w);
            our_each.extend(each);
            if let Some(b) = &base {
                let (w, each) = b.wave(n, watched).await?;
                theirs.push(w);
                their_each.extend(each);
            }
            alone.push(this.wave(1, watched).await?.0);
        }
        let w = summarize(&ours);
        let each = summarize(&our_each);
        let one = summarize(&alone);
        let secs = |us: f64| format!("{:.2} s", us / 1e6);
        let worst = ours.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e6);
        let streams = if watched {
            ", each session's event stream read by a client throughout"
        } else {
            ", no event streams"
        };
        rows.push(
            row(
                "serve",
                format!(
                    "a wave of {n} prompts at once to `warden serve` over loopback (each: new session, read call, answer){streams}; first request to last answer"
                ),
                format!("median {} · worst {}", secs(w.median_us), secs(worst)),
            )
            .against(
                format!("one prompt alone on the same server: {}", fmt_us(one.median_us)),
                w.median_us / one.median_us,
                None,
            )
            .note(format!(
                "{waves} waves; each prompt's answer: median {} · p99 {}",
                fmt_us(each.median_us),
                fmt_us(each.p99_us)
            ))
            .data(json!({
                "watched": watched,
                "wave_us": ours.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
                "alone_us": alone.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
                "prompt_median_us": each.median_us, "prompt_p99_us": each.p99_us,
            })),
        );
        if let (Some(_), Some(path)) = (&base, baseline) {
            let t = summarize(&theirs);
            let te = summarize(&their_each);
            rows.push(
                row(
                    "serve",
                    format!("the same waves{streams}, against {}", path.display()),
                    format!("median {}", secs(t.median_us)),
                )
                .against(
                    format!("this build's median wave: {}", secs(w.median_us)),
                    w.median_us / t.median_us,
                    None,
                )
                .note(format!(
                    "alternating wave by wave; ratio = this build / the other; its prompts: median {} · p99 {}",
                    fmt_us(te.median_us),
                    fmt_us(te.p99_us)
                ))
                .data(json!({
                    "watched": watched,
                    "wave_us": theirs.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
                })),
            );
        }
    }
    Ok(rows)
}
