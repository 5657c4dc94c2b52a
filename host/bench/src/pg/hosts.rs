//! Sessions per second across hosts sharing one ledger. Each "host" is a
//! `Core` of its own in this process: its own ledger connection (a PgStore
//! with its own pool and relay, or a SQLite file for the baseline), its own
//! plugin host, bus and lease holder id, so leases and fencing work between
//! them as between machines; each session is created and prompted on one of
//! them. They share this process's runtime and the machine's cores with
//! each other and with the database server: what this shows is the cost of
//! coordinating through the database, not more machines' worth of work.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use warden_core::tool::Registry;
use warden_core::{Core, CoreOptions, Ledger, PromptInput};
use warden_llm::Models;
use warden_protocol::{ModelRef, SessionId};

use crate::common;
use crate::stats::{Summary, summarize};

/// Sessions in flight at a time, over all hosts: the same offered load for
/// every host count, and a prompt-to-answer time that is a session's, not
/// the length of a queue of all of them. (Each host's pool has 16
/// connections: one host is not starved of them.)
pub const IN_FLIGHT: usize = 16;

/// What one spread of sessions measured.
pub struct Spread {
    pub hosts: usize,
    pub sessions: usize,
    /// From the first prompt sent to the last answer received.
    pub took: Duration,
    /// Each session's time from its prompt sent to its answer received.
    pub prompts: Summary,
}

impl Spread {
    pub fn per_second(&self) -> f64 {
        self.sessions as f64 / self.took.as_secs_f64()
    }
}

/// One core per ledger of `ledgers` (one per host); `n` sessions created
/// round-robin over them (untimed), then prompted in that order with
/// [`IN_FLIGHT`] at a time, each on the core that created it: prompt → one `echo` call (fixture hook before and
/// after) → the answer `done`.
pub async fn spread(work: &Path, name: &str, ledgers: Vec<Ledger>, n: usize) -> Result<Spread> {
    let project = work.join(name);
    std::fs::create_dir_all(&project)?;
    let cassette = work.join(format!("{name}.json"));
    common::cassette(&cassette, 1, 256)?;
    let model = common::scripted_model(&cassette);
    let mut cores = Vec::new();
    for (i, ledger) in ledgers.into_iter().enumerate() {
        let config = common::guest_config(true)?;
        let host = common::host(work, &config).await?;
        common::drain_bus(ledger.bus());
        cores.push(Core::new(
            ledger,
            Registry::of(host),
            Arc::new(Models::new()),
            config,
            // A lease holder id of its own, as a host on another machine
            // has (by default every `Core` of a process leases as the
            // process).
            CoreOptions {
                holder: Some(format!("bench-host-{i}")),
                ..CoreOptions::default()
            },
        )?);
    }
    anyhow::ensure!(!cores.is_empty(), "no host to spread sessions over");

    // One untimed session per host first: connections opened, plugins
    // instantiated once, the relay listening.
    for core in &cores {
        let s = core.create_session(&project, "warm").await?;
        prompt(core, s.id, &model).await?;
    }
    let mut sessions = Vec::with_capacity(n);
    for i in 0..n {
        let core = &cores[i % cores.len()];
        let s = core.create_session(&project, &format!("s{i}")).await?;
        sessions.push((core.clone(), s.id));
    }
    let started = Instant::now();
    let results: Vec<Result<Duration>> = futures::stream::iter(sessions)
        .map(|(core, id)| {
            let model = model.clone();
            async move {
                let t = Instant::now();
                prompt(&core, id, &model).await.map(|()| t.elapsed())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let took = started.elapsed();
    let prompts = results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(Spread {
        hosts: cores.len(),
        sessions: n,
        took,
        prompts: summarize(&prompts),
    })
}

/// Prompt `session` on `core` and check it answered as scripted.
async fn prompt(core: &Core, session: SessionId, model: &ModelRef) -> Result<()> {
    let answer = core
        .prompt(PromptInput {
            session_id: session,
            text: "go".into(),
            model: Some(model.clone()),
            ..PromptInput::default()
        })
        .await?;
    anyhow::ensure!(
        answer.text() == "done",
        "a session answered {:?}, not the scripted `done`",
        answer.text()
    );
    Ok(())
}
