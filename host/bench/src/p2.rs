//! P2: a long session's speed, scripted and over a loopback OpenAI server,
//! and what each step costs the ledger on disk.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use std::sync::Arc;

use warden_core::ledger::{Ledger, SqliteStore};
use warden_core::tool::Registry;
use warden_core::{Bus, PromptInput};
use warden_llm::Models;
use warden_protocol::{ModelRef, ToolState};

use crate::common::{self, timed};
use crate::stats::fmt_us;
use crate::table::{Row, row};
use warden_core::ledger::counted::{self, Counted};

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// What a scripted session of `steps` single-call steps left in a fresh
/// ledger file `name.db`.
struct Scripted {
    per_step_us: f64,
    /// The file after a checkpoint.
    db_bytes: u64,
    /// Each call's input and output, as its part row keeps them.
    tool_bytes: u64,
    /// Transactions that wrote, from the prompt to the answer, by name.
    writes: Vec<&'static str>,
}

async fn scripted(
    work: &Path,
    project: &Path,
    name: &str,
    steps: usize,
    payload: usize,
) -> Result<Scripted> {
    let cassette_path = work.join(format!("{name}.json"));
    common::cassette(&cassette_path, steps, payload)?;
    let config = common::guest_config(false)?;
    let host = common::host(work, &config).await?;
    let store = Arc::new(SqliteStore::open(&work.join(format!("{name}.db")))?);
    let (store, calls) = Counted::new(store);
    let core = common::core_with(
        Ledger::new(store, Bus::new()),
        Registry::of(host),
        config,
        Models::new(),
    )?;
    common::drain_bus(core.bus());
    let session = core.create_session(project, name).await?;
    let from = Instant::now();
    let (answer, took) = timed(core.prompt(PromptInput {
        session_id: session.id.clone(),
        text: "go".into(),
        model: Some(common::scripted_model(&cassette_path)),
        ..PromptInput::default()
    }))
    .await;
    let writes = counted::within(
        &calls.lock().unwrap_or_else(|p| p.into_inner()),
        from,
        Instant::now(),
    )
    .0;
    anyhow::ensure!(
        answer?.text() == "done",
        "the scripted session did not finish"
    );
    core.ledger().checkpoint().await?;
    let tool_bytes: u64 = core
        .ledger()
        .messages(&session.id)
        .await?
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p.tool_state() {
            Some(ToolState::Completed { input, output, .. }) => {
                Some((input.to_string().len() + output.len()) as u64)
            }
            _ => None,
        })
        .sum();
    Ok(Scripted {
        per_step_us: took.as_secs_f64() * 1e6 / steps as f64,
        db_bytes: file_size(&work.join(format!("{name}.db"))),
        tool_bytes,
        writes,
    })
}

/// The writes per step, in all and by name (most first).
fn per_step_writes(writes: &[&'static str], steps: usize) -> (f64, String) {
    let by_name = counted::tally(writes);
    // What a step writes, and apart, what the session writes once or so
    // (its prompt, its lease).
    let (each, once): (Vec<_>, Vec<_>) = by_name.iter().partition(|(_, c)| *c >= steps / 2);
    let mut said = each
        .iter()
        .map(|(n, c)| format!("{n} {:.1}", *c as f64 / steps as f64))
        .collect::<Vec<_>>()
        .join(", ");
    if !once.is_empty() {
        let names: Vec<String> = once.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
        said.push_str(&format!("; once a session: {}", names.join(", ")));
    }
    (writes.len() as f64 / steps as f64, said)
}

pub async fn loop_speed(work: &Path, steps: usize) -> Result<Vec<Row>> {
    let project = work.join("p2");
    std::fs::create_dir_all(&project)?;
    let mut rows = Vec::new();

    // Scripted: no network, the model answers at once. A session a tenth as
    // long, on a file of its own, separates what each step adds from what
    // any ledger holds (schema, a session, a first prompt).
    let short_steps = (steps / 10).max(1);
    let short = scripted(work, &project, "p2short", short_steps, 64).await?;
    let long = scripted(work, &project, "p2", steps, 64).await?;
    let per_step = long.per_step_us;
    let (writes, by_name) = per_step_writes(&long.writes, steps);
    rows.push(
        row(
            "P2",
            format!(
                "scripted session of {steps} single-call steps (`echo`, 64 B), prompt to answer"
            ),
            format!(
                "{:.0} steps/s ({} per step)",
                1e6 / per_step,
                fmt_us(per_step)
            ),
        )
        .note(format!(
            "{writes:.1} transactions per step, counted at the ledger's backend: {by_name}"
        ))
        .data(json!({"steps": steps, "per_step_us": per_step, "writes_per_step": writes})),
    );
    rows.push(bytes_row(&short, &long, "64 B", short_steps, steps));
    // Larger payloads: a row of the part table over about 1,000 bytes is
    // where SQLite's storage of it changes (see the ledger's schema 9).
    for (payload, label, steps) in [(1024, "1 KiB", steps), (64 * 1024, "64 KiB", steps / 10)] {
        let short_steps = (steps / 10).max(1);
        let short = scripted(
            work,
            &project,
            &format!("p2b{payload}short"),
            short_steps,
            payload,
        )
        .await?;
        let long = scripted(work, &project, &format!("p2b{payload}"), steps, payload).await?;
        rows.push(bytes_row(&short, &long, label, short_steps, steps));
    }

    // Over the loopback OpenAI Chat Completions adapter.
    let epoch = Instant::now();
    let mock = crate::mock::start(steps, "echo", r#"{"n": {n}}"#, epoch).await;
    let mut config = common::guest_config(false)?;
    config.provider = serde_json::from_value(
        json!({"bench": {"api": "openai-chat", "base_url": format!("http://127.0.0.1:{}/v1", mock.port)}}),
    )?;
    let models = Models::from_providers(&config.provider);
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, "p2http", Registry::of(host), config, models)?;
    common::drain_bus(core.bus());
    let session = core.create_session(&project, "p2 http").await?;
    let (answer, took) = timed(core.prompt(PromptInput {
        session_id: session.id.clone(),
        text: "go".into(),
        model: Some(ModelRef {
            provider: "bench".into(),
            model: "m".into(),
        }),
        ..PromptInput::default()
    }))
    .await;
    anyhow::ensure!(
        answer?.text() == "done",
        "the loopback session did not finish"
    );
    let per_step = took.as_secs_f64() * 1e6 / steps as f64;
    rows.push(
        row(
            "P2",
            format!("loopback OpenAI Chat Completions session of {steps} single-call steps, prompt to answer, per step"),
            fmt_us(per_step),
        )
        .against("target 0.8 ms", per_step / 800.0, Some(1.0))
        .note("each step: the whole conversation encoded and sent (Chat Completions is stateless), the mock server reading it, SSE parsing, the tool call, the ledger")
        .data(json!({"steps": steps, "per_step_us": per_step, "requests": mock.requests.load(Ordering::SeqCst), "request_bytes": mock.bytes.load(Ordering::SeqCst)})),
    );
    Ok(rows)
}

/// What each step of `long` adds to its ledger file beyond its calls' input
/// and output, read against `short` (the same session a tenth as long).
fn bytes_row(
    short: &Scripted,
    long: &Scripted,
    payload: &str,
    short_steps: usize,
    steps: usize,
) -> Row {
    let added = (long.db_bytes as f64 - long.tool_bytes as f64)
        - (short.db_bytes as f64 - short.tool_bytes as f64);
    let per_step_bytes = added / (steps - short_steps) as f64;
    let whole = long.db_bytes.saturating_sub(long.tool_bytes) as f64 / steps as f64;
    row(
        "P2",
        format!("ledger bytes each step adds beyond the tool's input and output, {payload} of arguments echoed back (sessions of {short_steps} and {steps} steps)"),
        format!("{per_step_bytes:.0} B"),
    )
    .against("target 1 KB", per_step_bytes / 1024.0, Some(1.0))
    .note(format!("each file after a checkpoint, minus each call's input and output (kept once, in its part row); the difference between the two files over the {} steps between them. The whole {steps}-step file over its steps: {whole:.0} B (schema, session and prompt included)", steps - short_steps))
    .data(json!({"payload_bytes": payload, "ledger_bytes": long.db_bytes, "tool_bytes": long.tool_bytes, "steps": steps, "short_ledger_bytes": short.db_bytes, "short_tool_bytes": short.tool_bytes, "short_steps": short_steps, "whole_file_per_step": whole}))
}

/// The model a [`by_length`] session talks to.
#[derive(Clone, Copy, PartialEq)]
pub enum Model {
    /// The scripted provider: no network, the model answers at once.
    Scripted,
    /// The OpenAI Chat Completions adapter against the loopback mock: each
    /// request carries the whole conversation (the protocol is stateless).
    Loopback,
}

/// How a step's cost grows with the session's length: one session of
/// `steps` single-call steps, each step timed from its assistant message's
/// creation to the next one's (the ledger's clock, in milliseconds, so read
/// as the mean over a window of steps).
pub async fn by_length(work: &Path, steps: usize, model: Model) -> Result<Vec<Row>> {
    let name = match model {
        Model::Scripted => "p2len",
        Model::Loopback => "p2lenhttp",
    };
    let project = work.join(name);
    std::fs::create_dir_all(&project)?;
    let mut config = common::guest_config(false)?;
    let (models, model_ref, mock) = match model {
        Model::Scripted => {
            let cassette_path = work.join(format!("{name}.json"));
            common::cassette(&cassette_path, steps, 64)?;
            (Models::new(), common::scripted_model(&cassette_path), None)
        }
        Model::Loopback => {
            let mock = crate::mock::start(steps, "echo", r#"{"n": {n}}"#, Instant::now()).await;
            config.provider = serde_json::from_value(
                json!({"bench": {"api": "openai-chat", "base_url": format!("http://127.0.0.1:{}/v1", mock.port)}}),
            )?;
            let model_ref = ModelRef {
                provider: "bench".into(),
                model: "m".into(),
            };
            (
                Models::from_providers(&config.provider),
                model_ref,
                Some(mock),
            )
        }
    };
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, name, Registry::of(host), config, models)?;
    common::drain_bus(core.bus());
    let session = core.create_session(&project, "p2 length").await?;
    let answer = core
        .prompt(PromptInput {
            session_id: session.id.clone(),
            text: "go".into(),
            model: Some(model_ref),
            ..PromptInput::default()
        })
        .await?;
    anyhow::ensure!(
        answer.text() == "done",
        "the scripted session did not finish"
    );
    let created: Vec<i64> = core
        .ledger()
        .messages(&session.id)
        .await?
        .iter()
        .filter(|m| m.info.role() == "assistant")
        .map(|m| m.info.created())
        .collect();
    const WINDOW: usize = 100;
    let mean_ms = |from: usize| -> Option<f64> {
        let (a, b) = (created.get(from)?, created.get(from + WINDOW)?);
        Some((b - a) as f64 / WINDOW as f64)
    };
    let mut rows = Vec::new();
    let at = [10, steps / 10, steps - WINDOW - 1];
    let first = mean_ms(at[0]);
    for from in at {
        let Some(ms) = mean_ms(from) else { continue };
        let which = match model {
            Model::Scripted => "scripted step",
            Model::Loopback => "loopback OpenAI Chat Completions step",
        };
        let mut r = row(
            "P2",
            format!(
                "{which} at step {from} of a {steps}-step session (`echo`, 64 B): the mean over steps {from} to {}",
                from + WINDOW
            ),
            fmt_us(ms * 1000.0),
        );
        if from != at[0]
            && let Some(first) = first
        {
            r = r.against(
                format!("the step at step {}: {}", at[0], fmt_us(first * 1000.0)),
                ms / first,
                Some(1.1),
            );
        }
        let note = match &mock {
            None => "from one assistant message's creation to the next's (the ledger's millisecond clock, so a mean over the window): the whole step, the history read and the conversation built included".to_string(),
            Some(mock) => format!(
                "as the scripted rows; each request carries the whole conversation, so its body grows with the session ({:.1} MB sent over the {steps} steps, {:.0} KB a request on average)",
                mock.bytes.load(Ordering::SeqCst) as f64 / 1e6,
                mock.bytes.load(Ordering::SeqCst) as f64 / 1e3 / mock.requests.load(Ordering::SeqCst).max(1) as f64
            ),
        };
        rows.push(
            r.note(note)
                .data(json!({"from": from, "window": WINDOW, "mean_ms": ms, "steps": steps})),
        );
    }
    Ok(rows)
}
