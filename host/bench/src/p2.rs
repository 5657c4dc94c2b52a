//! P2: a long session's speed, scripted and over a loopback OpenAI server,
//! and what each step costs the ledger on disk.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use warden_core::PromptInput;
use warden_llm::Models;
use warden_protocol::{ModelRef, ToolState};

use crate::common::{self, timed};
use crate::stats::fmt_us;
use crate::table::{Row, row};

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

pub async fn loop_speed(work: &Path, steps: usize) -> Result<Vec<Row>> {
    let project = work.join("p2");
    std::fs::create_dir_all(&project)?;
    let mut rows = Vec::new();

    // Scripted: no network, the model answers at once.
    let cassette_path = work.join("p2.json");
    common::cassette(&cassette_path, steps, 64)?;
    let config = common::guest_config(false)?;
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, "p2", host, config, Models::new())?;
    common::drain_bus(core.bus());
    let session = core.create_session(&project, "p2").await?;
    let (answer, took) = timed(core.prompt(PromptInput {
        session_id: session.id.clone(),
        text: "go".into(),
        model: Some(common::scripted_model(&cassette_path)),
        ..PromptInput::default()
    }))
    .await;
    anyhow::ensure!(
        answer?.text() == "done",
        "the scripted session did not finish"
    );
    let per_step = took.as_secs_f64() * 1e6 / steps as f64;
    core.ledger().checkpoint().await?;
    let db_size = file_size(&work.join("p2.db"));
    let tool_bytes: u64 = core
        .ledger()
        .messages(&session.id)
        .await?
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p.tool_state() {
            // The input is stored twice (the part, its running timeline row), the output once.
            Some(ToolState::Completed { input, output, .. }) => {
                Some((2 * input.to_string().len() + output.len()) as u64)
            }
            _ => None,
        })
        .sum();
    let beyond = db_size.saturating_sub(tool_bytes) as f64 / steps as f64;
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
        .data(json!({"steps": steps, "per_step_us": per_step})),
    );
    rows.push(
        row(
            "P2",
            "ledger bytes per step beyond the tool's input and output",
            format!("{beyond:.0} B"),
        )
        .against("target 1 KB", beyond / 1024.0, Some(1.0))
        .note("the database file after a checkpoint, minus each call's input (twice: its part row and its running timeline row) and output, over the steps; the whole file counts, schema and session rows included")
        .data(json!({"ledger_bytes": db_size, "tool_bytes": tool_bytes, "steps": steps})),
    );

    // Over the loopback OpenAI Chat Completions adapter.
    let epoch = Instant::now();
    let mock = crate::mock::start(steps, "echo", r#"{"n": {n}}"#, epoch).await;
    let mut config = common::guest_config(false)?;
    config.provider = serde_json::from_value(
        json!({"bench": {"api": "openai-chat", "base_url": format!("http://127.0.0.1:{}/v1", mock.port)}}),
    )?;
    let models = Models::from_providers(&config.provider);
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, "p2http", host, config, models)?;
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
