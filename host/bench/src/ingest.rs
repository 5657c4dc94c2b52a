//! Streaming ingest: a Chat Completions stream of `deltas` text deltas,
//! read by warden from a loopback server through its adapter, processor and
//! ledger, against a real parsing floor: the same bytes, in memory, split
//! into SSE lines and each `data:` parsed by serde_json into a typed chunk.
//! Between the two, warden's own SSE parser and Chat decoder on the same
//! bytes in memory (a component row).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde::Deserialize;
use serde_json::json;
use warden_core::PromptInput;
use warden_core::tool::Registry;
use warden_llm::Models;
use warden_llm::openai::chat_stream::ChatDecoder;
use warden_llm::sse::SseParser;
use warden_llm::stream::Decoder;
use warden_protocol::{Event, LlmEvent, ModelRef, PartBody};

use crate::common::{self, timed};
use crate::stats::fmt_us;
use crate::table::{Row, row};

/// The stream: `deltas` chunks of three words, then the finish.
fn stream(deltas: usize) -> String {
    let mut sse = String::new();
    for i in 0..deltas {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("w{i} x{i} y{i} ")}, "finish_reason": null}]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    sse.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"total_tokens\":11}}\n\ndata: [DONE]\n\n");
    sse
}

#[derive(Deserialize)]
struct Chunk {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Delta,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
}

/// The floor: split the body into lines, parse each `data:` as a typed
/// chunk, concatenate the text. Returns the text and how many deltas.
fn bare_parse(body: &str) -> Result<(String, usize)> {
    let mut text = String::new();
    let mut n = 0;
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Chunk = serde_json::from_str(data)?;
        for c in chunk.choices {
            if let Some(t) = c.delta.content {
                text.push_str(&t);
                n += 1;
            }
        }
    }
    Ok((text, n))
}

/// warden's SSE parser and Chat Completions decoder, in memory.
fn warden_parse(body: &str) -> Result<usize> {
    let mut parser = SseParser::new();
    let mut decoder = ChatDecoder::new("bench");
    let mut out = Vec::new();
    for ev in parser
        .push(body.as_bytes())
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        decoder.event(ev, &mut out);
    }
    decoder.end(&mut out);
    Ok(out
        .iter()
        .filter(|e| matches!(e, LlmEvent::TextDelta { .. }))
        .count())
}

pub async fn measure(work: &Path, deltas: usize) -> Result<Vec<Row>> {
    let project = work.join("ingest");
    std::fs::create_dir_all(&project)?;
    let body = stream(deltas);

    // Best of 5 for both in-memory parses (they take milliseconds).
    let mut bare = f64::MAX;
    let mut parsed = (String::new(), 0);
    for _ in 0..5 {
        let t = Instant::now();
        parsed = bare_parse(&body)?;
        bare = bare.min(t.elapsed().as_secs_f64() * 1e6 / deltas as f64);
    }
    let mut decoded = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let n = warden_parse(&body)?;
        anyhow::ensure!(n == deltas, "warden's decoder saw {n} deltas of {deltas}");
        decoded = decoded.min(t.elapsed().as_secs_f64() * 1e6 / deltas as f64);
    }
    anyhow::ensure!(parsed.1 == deltas, "the floor parsed {} deltas", parsed.1);

    let epoch = Instant::now();
    let mock = crate::mock::serve(crate::mock::Reply::Fixed(Arc::from(body.as_str())), epoch).await;
    let mut config =
        warden_core::Config::parse(r#"{"builtins": false}"#).map_err(|e| anyhow::anyhow!(e))?;
    config.provider = serde_json::from_value(
        json!({"bench": {"api": "openai-chat", "base_url": format!("http://127.0.0.1:{}/v1", mock.port)}}),
    )?;
    let models = Models::from_providers(&config.provider);
    let host = common::host(work, &config).await?;
    let core = common::core_on(work, "ingest", Registry::of(host), config, models)?;
    let mut rx = core.bus().subscribe();
    let session = core.create_session(&project, "ingest").await?;
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
    anyhow::ensure!(answer?.text() == parsed.0, "the text was not stored whole");
    // How often the growing text part was written to the ledger.
    let (mut writes, mut bus_deltas) = (0usize, 0usize);
    while let Ok(e) = rx.try_recv() {
        if let Event::PartUpdated { part, delta } = &*e
            && matches!(
                &part.body,
                PartBody::Text {
                    synthetic: false,
                    ..
                }
            )
            && part.message_id.as_str() != ""
            && !matches!(&part.body, PartBody::Text { text, .. } if text == "go")
        {
            writes += 1;
            if delta.as_deref().is_some_and(|d| !d.is_empty()) {
                bus_deltas += 1;
            }
        }
    }
    let per = took.as_secs_f64() * 1e6 / deltas as f64;
    Ok(vec![
        row(
            "ingest",
            format!("floor: {deltas} Chat Completions text deltas in memory, SSE lines split and each `data:` parsed by serde_json into a typed chunk"),
            format!("{} per delta", fmt_us(bare)),
        )
        .note("best of 5")
        .data(json!({"per_delta_us": bare})),
        row(
            "ingest",
            "component: warden's SSE parser and Chat Completions decoder on the same bytes in memory",
            format!("{} per delta", fmt_us(decoded)),
        )
        .against(format!("floor {}", fmt_us(bare)), decoded / bare, None)
        .note("best of 5")
        .data(json!({"per_delta_us": decoded})),
        row(
            "ingest",
            "the same stream from a loopback server through warden's HTTP adapter, processor and ledger, prompt to answer",
            format!("{} per delta", fmt_us(per)),
        )
        .against(format!("floor {}", fmt_us(bare)), per / bare, None)
        .note(format!("the text part was written {writes} times ({bus_deltas} with text appended): at its start, then at most every 50 ms, and at its end; the bus carries those writes, not every delta"))
        .data(json!({"deltas": deltas, "per_delta_us": per, "ledger_writes": writes})),
    ])
}
