//! What the parts share: plugin configs, cassettes, building a core, the
//! `warden` binary, and the two clocks of a tool call (the model's tool call
//! as the provider hands it over, the completed part as the bus publishes it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use serde_json::{Value, json};
use warden_core::config::Config;
use warden_core::tool::Registry;
use warden_core::{Bus, Core, CoreOptions, Ledger};
use warden_llm::{EventStream, Models, Provider, ResolvedModel, scripted};
use warden_protocol::{Event, LlmEvent, LlmRequest, ModelRef, PartBody, ToolState};
use warden_runtime::WasmHost;

/// A component the build made (the test fixtures serve as trivial guests).
pub fn component(name: &str) -> String {
    format!("{}/{name}", warden_runtime::builtin::plugin_dir())
}

/// A JSON object of about `bytes` bytes, distinct per `n`.
pub fn payload(bytes: usize, n: usize) -> Value {
    json!({"n": n, "data": "x".repeat(bytes.saturating_sub(20))})
}

/// Time one future.
pub async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let t = Instant::now();
    let v = f.await;
    (v, t.elapsed())
}

/// The fixture tools (`echo` is the trivial tool), and with `hooks` the
/// fixture hook, which allows and keeps when it is given no script.
/// `echo` is mapped to a permission of its own: a tool of a plugin that can
/// reach files and has no mapping is asked about, and the bench has nobody
/// to ask.
pub fn guest_config(hooks: bool) -> Result<Config> {
    let mut plugins = vec![json!({
        "name": "fx", "path": component("warden_fixtures.wasm"),
        "grants": {"dirs": [{"path": ".", "mode": "ro"}]},
        "tools": {"echo": {"permission": "echo"}}
    })];
    if hooks {
        plugins.push(json!({"name": "hook", "path": component("warden_fixture_hooks.wasm")}));
    }
    let text = json!({"builtins": false, "plugins": plugins}).to_string();
    Config::parse(&text).map_err(|e| anyhow::anyhow!(e))
}

/// A cassette of `steps` single-call steps of `echo` (distinct arguments of
/// about `arg_bytes`), then an answer.
pub fn cassette(path: &Path, steps: usize, arg_bytes: usize) -> Result<()> {
    let mut turns: Vec<Value> = (0..steps)
        .map(|i| json!({"tool_calls": [{"id": format!("call_{i}"), "name": "echo", "arguments": payload(arg_bytes, i)}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    std::fs::write(path, json!({"turns": turns}).to_string())?;
    Ok(())
}

pub fn scripted_model(path: &Path) -> ModelRef {
    ModelRef {
        provider: "scripted".into(),
        model: path.display().to_string(),
    }
}

/// Keep a subscriber reading the bus, as a front end would.
pub fn drain_bus(bus: &Bus) {
    let mut rx = bus.subscribe();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// A core on a fresh ledger file `name.db` in `work`.
pub fn core_on(
    work: &Path,
    name: &str,
    tools: Registry,
    config: Config,
    models: Models,
) -> Result<Core> {
    let ledger = Ledger::open(&work.join(format!("{name}.db")), Bus::new())?;
    core_with(ledger, tools, config, models)
}

/// A core on `ledger` (of either backend).
pub fn core_with(ledger: Ledger, tools: Registry, config: Config, models: Models) -> Result<Core> {
    Ok(Core::new(
        ledger,
        tools,
        Arc::new(models),
        config,
        CoreOptions::default(),
    )?)
}

/// Load the plugins of `config` with the bench's compiled cache.
pub async fn host(work: &Path, config: &Config) -> Result<Arc<WasmHost>> {
    Ok(Arc::new(
        WasmHost::load(&config.plugin_set(), Some(work.join("cache")), None).await?,
    ))
}

/// (session id, call id).
pub type CallKey = (String, String);

/// The two ends of every tool call of a run: when the provider handed the
/// processor the model's tool call, and when a bus subscriber received the
/// call's completed part.
#[derive(Default)]
pub struct CallClock {
    pub called: Mutex<HashMap<CallKey, Instant>>,
    pub completed: Mutex<HashMap<CallKey, Instant>>,
    /// Events the subscriber missed (it fell behind the bus).
    pub lagged: Mutex<u64>,
}

/// One timed call: from its tool call to its completed part on the bus.
#[derive(Debug, Clone)]
pub struct Window {
    pub key: CallKey,
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn duration(&self) -> Duration {
        self.end.saturating_duration_since(self.start)
    }
}

impl CallClock {
    /// Start recording the bus of `core` on a thread of its own (blocking
    /// receive: it wakes when an event is published, and costs no worker).
    pub fn watch(bus: &Bus) -> Arc<CallClock> {
        let clock = Arc::new(CallClock::default());
        let mut rx = bus.subscribe();
        let c = clock.clone();
        std::thread::spawn(move || {
            loop {
                match rx.blocking_recv() {
                    Ok(event) => {
                        let now = Instant::now();
                        if let Event::PartUpdated { part, delta: None } = &*event
                            && let PartBody::Tool {
                                call_id,
                                state: ToolState::Completed { .. },
                                ..
                            } = &part.body
                        {
                            lock(&c.completed).insert(
                                (part.session_id.as_str().to_string(), call_id.clone()),
                                now,
                            );
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        *lock(&c.lagged) += n
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        clock
    }

    /// Register `stamped` with `models`: the scripted provider, stamping
    /// each tool call as the stream hands it to the processor.
    pub fn stamp_calls(self: &Arc<Self>, models: &Models) {
        let clock = self.clone();
        models.register(
            "stamped",
            Arc::new(move |model: &ModelRef| {
                let inner = scripted::resolve(&ModelRef {
                    provider: "scripted".into(),
                    model: model.model.clone(),
                })?;
                Ok(ResolvedModel {
                    info: inner.info,
                    provider: Arc::new(Stamped {
                        inner: inner.provider,
                        clock: clock.clone(),
                        session: String::new(),
                    }),
                })
            }),
        );
    }

    /// Each completed call's window, in the order the calls started.
    pub fn windows(&self) -> Vec<Window> {
        let called = lock(&self.called);
        let completed = lock(&self.completed);
        let mut out: Vec<Window> = called
            .iter()
            .filter_map(|(key, start)| {
                completed.get(key).map(|end| Window {
                    key: key.clone(),
                    start: *start,
                    end: *end,
                })
            })
            .collect();
        out.sort_by_key(|w| w.start);
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A provider that stamps each tool call it streams, per session: the core
/// streams each session's requests through [`Provider::conversation`].
struct Stamped {
    inner: Arc<dyn Provider>,
    clock: Arc<CallClock>,
    session: String,
}

#[async_trait::async_trait]
impl Provider for Stamped {
    async fn stream(
        &self,
        request: LlmRequest,
    ) -> std::result::Result<EventStream, warden_protocol::ProviderError> {
        let session = self.session.clone();
        let stream = self.inner.stream(request).await?;
        let clock = self.clock.clone();
        Ok(Box::pin(stream.inspect(move |event| {
            if let LlmEvent::ToolCall { call_id, .. } = event {
                lock(&clock.called).insert((session.clone(), call_id.clone()), Instant::now());
            }
        })))
    }

    fn conversation(&self, id: &str) -> Option<Arc<dyn Provider>> {
        Some(Arc::new(Stamped {
            inner: self.inner.conversation(id).unwrap_or(self.inner.clone()),
            clock: self.clock.clone(),
            session: id.to_string(),
        }))
    }
}

/// The `warden` binary of this checkout: the one given, or built now by
/// `cargo build --release -p warden` (so the figures are of the same commit).
pub fn warden_binary(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        // Absolute: the processes run in their own project directories.
        return p
            .canonicalize()
            .with_context(|| format!("no warden binary at {}", p.display()));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    eprintln!("bench: cargo build --release -p warden (the process-level parts run it)…");
    let status = std::process::Command::new(&cargo)
        .args(["build", "--release", "--quiet", "-p", "warden"])
        .current_dir(&root)
        .status()
        .with_context(|| format!("cannot run {cargo}"))?;
    anyhow::ensure!(
        status.success(),
        "`cargo build --release -p warden` failed; fix the build or pass --warden PATH"
    );
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .context("the bench binary has no directory")?
        .join(format!("warden{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        path.exists(),
        "built warden, but found no binary at {}; pass --warden PATH",
        path.display()
    );
    Ok(path)
}

/// Run the `warden` binary, polling its peak RSS; returns (elapsed, peak KiB).
pub fn run_binary(
    warden: &Path,
    args: &[&str],
    data: &Path,
    dir: &Path,
) -> Result<(Duration, u64)> {
    let started = Instant::now();
    let mut child = std::process::Command::new(warden)
        .args(args)
        .current_dir(dir)
        .env("WARDEN_DATA_DIR", data)
        .env_remove("WARDEN_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Some(kib) = crate::stats::proc_kib(&status_file, "VmHWM:") {
            peak = peak.max(kib);
        }
        if child.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let elapsed = started.elapsed();
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "warden {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((elapsed, peak))
}

/// Write a user message into `session`, then `warm` + `n` new 1 KiB text
/// parts of it with `Ledger::put_part`, timing the last `n`: what the
/// `put_part` rows measure (on a ledger opened without a lease or under one).
pub async fn time_kib_text_parts(
    ledger: &Ledger,
    session: &warden_protocol::SessionId,
    n: usize,
    warm: usize,
) -> Result<Vec<Duration>> {
    use warden_core::ledger::{PartWrite, id};
    use warden_protocol::{MessageId, MessageInfo, MessageTime, Part, UserInfo};
    let user = MessageInfo::User(UserInfo {
        id: MessageId(id::ascending("msg")),
        session_id: session.clone(),
        time: MessageTime::at(0),
        agent: "build".into(),
        model: ModelRef {
            provider: "scripted".into(),
            model: "-".into(),
        },
    });
    ledger.put_message(&user).await?;
    let mut part = Part {
        id: id::ascending("prt").into(),
        session_id: session.clone(),
        message_id: user.id().clone(),
        body: PartBody::Text {
            text: "x".repeat(1024),
            synthetic: false,
            time: None,
            ignored: false,
        },
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n + warm {
        part.id = id::ascending("prt").into();
        let t = Instant::now();
        ledger.put_part(&part, PartWrite::Changed).await?;
        if i >= warm {
            out.push(t.elapsed());
        }
    }
    Ok(out)
}
