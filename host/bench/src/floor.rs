//! The bare floors, which are not warden's code: a rusqlite transaction with
//! the ledger's PRAGMAs, and a wasmtime instantiate-and-call of the trivial
//! fixture components with an empty WASI context on an engine with warden's
//! settings (pooling allocator, epoch deadline). Next to them, warden's own
//! `Ledger::put_part` and `WasmHost` calls for the same work, as component
//! rows: what warden adds on top of each floor.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rusqlite::{Connection, params};
use serde_json::json;
use warden_core::Bus;
use warden_core::ledger::{Ledger, id};
use warden_core::tool::{
    CallContext, CallObserver, HookCall, HookHost, ToolOutput, ToolSource, Unattended,
};
use warden_protocol::{MessageId, SessionId};
use warden_runtime::engine::Sandbox;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::common::{self, component, payload, timed};
use crate::stats::{Summary, fmt_us, summarize, summary_value};
use crate::table::{Row, row};

mod bindings {
    pub mod tool {
        wasmtime::component::bindgen!({
            world: "tool-plugin",
            path: "../../wit/v0.1.0",
            exports: { default: async },
        });
    }
    pub mod hook {
        wasmtime::component::bindgen!({
            world: "hook-plugin",
            path: "../../wit/v0.1.0",
            exports: { default: async },
            with: {
                "warden:plugin/host": super::tool::warden::plugin::host,
                "warden:plugin/types": super::tool::warden::plugin::types,
            },
        });
    }
}
use bindings::tool::warden::plugin::{host as wit_host, types as wit};

/// What the bare guest call's store holds: an empty WASI context (and an
/// HTTP one, for components that import wasi:http).
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
    http: wasmtime_wasi_http::WasiHttpCtx,
}

impl wasmtime_wasi_http::WasiHttpView for Bare {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: wasmtime_wasi_http::default_hooks(),
        }
    }
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wit::Host for Bare {}

// The trivial guests never call these; they exist so the component links.
impl wit_host::Host for Bare {
    fn log(&mut self, _: wit_host::LogLevel, _: String) {}
    fn progress(&mut self, _: Option<String>, _: String) {}
    fn ask(&mut self, _: String, _: Vec<String>, _: String) -> Result<(), String> {
        Err("nobody to ask".into())
    }
}

fn bare_store(engine: &wasmtime::Engine) -> Store<Bare> {
    let mut store = Store::new(
        engine,
        Bare {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
        },
    );
    // The engine counts epochs (as warden's does): a deadline far away.
    store.set_epoch_deadline(1_000_000);
    store
}

/// The floors, and warden's component rows beside them.
pub struct Floors {
    /// Bare rusqlite: BEGIN; INSERT 1 KiB; COMMIT.
    pub txn: Summary,
    /// Bare wasmtime: fresh store, instantiate, call `execute("echo", 1 KiB)`.
    pub tool: Summary,
    pub before: Summary,
    pub after: Summary,
    /// The same bare calls, each right after 8 MiB of other memory was
    /// written: before / tool / after.
    pub cold: [Summary; 3],
    /// warden's own, for the same work.
    put_part: Summary,
    host_tool: Summary,
    host_before: Summary,
    host_after: Summary,
}

impl Floors {
    /// The three bare guest calls of a P1 step, warm (µs).
    pub fn warm_guests(&self) -> f64 {
        self.before.median_us + self.tool.median_us + self.after.median_us
    }

    /// The same, each call after the cache was made cold (µs).
    pub fn cold_guests(&self) -> f64 {
        self.cold.iter().map(|s| s.median_us).sum()
    }

    pub fn rows(&self) -> Vec<Row> {
        let vs = |floor: &Summary, what: &str| format!("floor: {what} {}", fmt_us(floor.median_us));
        vec![
            row(
                "floor",
                "bare rusqlite: BEGIN; INSERT one 1 KiB row; COMMIT (WAL, synchronous=NORMAL, foreign_keys=ON, prepared statement)",
                summary_value(&self.txn),
            )
            .data(json!(self.txn)),
            row(
                "floor",
                "bare wasmtime: new store (empty WASI context) + instantiate + call the fixture `echo` tool, 1 KiB in and out (pooling, warden's engine settings)",
                summary_value(&self.tool),
            )
            .data(json!(self.tool)),
            row(
                "floor",
                "bare wasmtime: the same for the fixture hook's `before` / `after`",
                format!(
                    "median {} / {}",
                    fmt_us(self.before.median_us),
                    fmt_us(self.after.median_us)
                ),
            )
            .data(json!({"before": self.before, "after": self.after})),
            row(
                "floor",
                format!("bare wasmtime: the same three calls, each made right after {} MiB of other memory was written (caches cold): before / `echo` / after", COLD_BYTES >> 20),
                format!(
                    "median {} / {} / {}",
                    fmt_us(self.cold[0].median_us),
                    fmt_us(self.cold[1].median_us),
                    fmt_us(self.cold[2].median_us)
                ),
            )
            .against(
                format!(
                    "the same calls warm: {}",
                    fmt_us(self.warm_guests())
                ),
                self.cold_guests() / self.warm_guests(),
                None,
            )
            .data(json!({"before": self.cold[0], "tool": self.cold[1], "after": self.cold[2]})),
            row(
                "component",
                "warden `Ledger::put_part`: one new 1 KiB text part (upsert, serde, bus event)",
                summary_value(&self.put_part),
            )
            .against(vs(&self.txn, "bare transaction"), self.put_part.median_us / self.txn.median_us, None)
            .data(json!(self.put_part)),
            row(
                "component",
                "warden `WasmHost::execute`: the `echo` tool, 1 KiB (plugin lookup, grants, preopened dir, limits)",
                summary_value(&self.host_tool),
            )
            .against(vs(&self.tool, "bare call"), self.host_tool.median_us / self.tool.median_us, None)
            .data(json!(self.host_tool)),
            row(
                "component",
                "warden `WasmHost::before` / `after`: the fixture hook",
                format!(
                    "median {} / {}",
                    fmt_us(self.host_before.median_us),
                    fmt_us(self.host_after.median_us)
                ),
            )
            .against(
                format!(
                    "floor: bare calls {} / {}",
                    fmt_us(self.before.median_us),
                    fmt_us(self.after.median_us)
                ),
                (self.host_before.median_us + self.host_after.median_us)
                    / (self.before.median_us + self.after.median_us),
                None,
            )
            .data(json!({"before": self.host_before, "after": self.host_after})),
        ]
    }
}

/// Measure the floors and the component rows, `n` samples each.
pub async fn measure(work: &Path, n: usize) -> Result<Floors> {
    let warm = n / 10 + 20;
    let txn = bare_transactions(&work.join("floor.db"), n, warm)?;
    let (tool, before, after) = bare_guest_calls(n, warm, false).await?;
    let (cold_tool, cold_before, cold_after) = bare_guest_calls(n, warm, true).await?;

    // warden's own calls for the same work.
    let project = work.join("floor");
    std::fs::create_dir_all(&project)?;
    let host = common::host(work, &common::guest_config(true)?).await?;
    let echo = host
        .tools()
        .into_iter()
        .find(|t| t.id == "echo")
        .context("the fixture plugin has no echo tool")?;
    let hook = host
        .hooks()
        .into_iter()
        .next()
        .context("the hook fixture")?;
    let session = SessionId(id::ascending("ses"));
    let c = CallContext {
        session_id: session.clone(),
        message_id: MessageId(id::ascending("msg")),
        call_id: "c".into(),
        agent: "build".into(),
        directory: project.display().to_string(),
    };
    let args = payload(1024, 0).to_string();
    let out = ToolOutput {
        output: args.clone(),
        title: String::new(),
        metadata: json!({}),
    };
    let observer: Arc<dyn CallObserver> = Arc::new(Unattended);
    let (mut host_tool, mut host_before, mut host_after) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + warm {
        let (r, t) = timed(host.execute(&echo, &c, &args, observer.clone())).await;
        r.map_err(|e| anyhow::anyhow!("echo failed: {e}"))?;
        let call = HookCall {
            hook: &hook,
            ctx: &c,
            tool: "echo",
            arguments: &args,
            observer: observer.clone(),
        };
        let (_, b) = timed(host.before(&call)).await;
        let (_, a) = timed(host.after(&call, &out)).await;
        if i >= warm {
            host_tool.push(t);
            host_before.push(b);
            host_after.push(a);
        }
    }

    let bus = Bus::new();
    common::drain_bus(&bus);
    let ledger = Ledger::open(&work.join("floor-ledger.db"), bus)?;
    let s = ledger
        .create_session(&project.display().to_string(), "floor")
        .await?;
    let put_part = common::time_kib_text_parts(&ledger, &s.id, n, warm).await?;

    Ok(Floors {
        txn: summarize(&txn),
        tool: summarize(&tool),
        before: summarize(&before),
        after: summarize(&after),
        cold: [
            summarize(&cold_before),
            summarize(&cold_tool),
            summarize(&cold_after),
        ],
        put_part: summarize(&put_part),
        host_tool: summarize(&host_tool),
        host_before: summarize(&host_before),
        host_after: summarize(&host_after),
    })
}

/// `BEGIN; INSERT 1 KiB; COMMIT`, `n` times after `warm`, on a file with the
/// ledger's settings.
pub fn bare_transactions(path: &Path, n: usize, warm: usize) -> Result<Vec<Duration>> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")?;
    let body = "x".repeat(1024);
    let mut out = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t = Instant::now();
        let tx = conn.transaction()?;
        tx.prepare_cached("INSERT INTO t (body) VALUES (?1)")?
            .execute(params![body])?;
        tx.commit()?;
        if i >= warm {
            out.push(t.elapsed());
        }
    }
    Ok(out)
}

type Samples = Vec<Duration>;

/// A fresh store (empty WASI context) and instance of a tool `component`,
/// without a call: what a fresh instance costs before the guest runs
/// anything, on `engine` (warden's settings).
pub async fn bare_instances(
    engine: &wasmtime::Engine,
    component: &Component,
    n: usize,
    warm: usize,
) -> Result<Samples> {
    let mut linker = Linker::<Bare>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    bindings::tool::ToolPlugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    // The SDKs' components import wasi:http too (warden gives it, behind
    // the plugin's HTTP grants).
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let pre = bindings::tool::ToolPluginPre::new(
        linker
            .instantiate_pre(component)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?,
    )
    .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t0 = Instant::now();
        let mut store = bare_store(engine);
        pre.instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        drop(store);
        if i >= warm {
            out.push(t0.elapsed());
        }
    }
    Ok(out)
}

/// How much memory the cold-cache variant writes before each bare call:
/// twice the per-core L2 of the machines this runs on (the tables' headings
/// name the machine), so what the call touches is no longer cached close by.
const COLD_BYTES: usize = 8 << 20;

/// Write one byte in every cache line of `buf` (the cold-cache variant).
fn evict(buf: &mut [u8], round: usize) {
    for (i, b) in buf.iter_mut().step_by(64).enumerate() {
        *b = (i + round) as u8;
    }
    std::hint::black_box(&*buf);
}

/// Bare guest calls, `n` after `warm` (see [`bare_calls`]); with `cold`,
/// each call is made right after [`COLD_BYTES`] of other memory is written.
async fn bare_guest_calls(
    n: usize,
    warm: usize,
    cold: bool,
) -> Result<(Samples, Samples, Samples)> {
    let mut buf = if cold {
        vec![0u8; COLD_BYTES]
    } else {
        Vec::new()
    };
    bare_calls(n, warm, &mut |round| {
        if !buf.is_empty() {
            evict(&mut buf, round)
        }
    })
    .await
}

/// A fresh store and instance per call, as warden makes them, without
/// anything warden adds; `before_each` runs before each call, untimed.
async fn bare_calls(
    n: usize,
    warm: usize,
    before_each: &mut dyn FnMut(usize),
) -> Result<(Samples, Samples, Samples)> {
    // warden's engine settings: the same constructor warden's host uses.
    let sandbox = Sandbox::new(64, None)?;
    let engine = &sandbox.engine;
    let load = |file: &str| {
        Component::from_file(engine, component(file))
            .map_err(|e| anyhow::anyhow!("cannot compile {file}: {e:#}"))
    };
    let fixtures = load("warden_fixtures.wasm")?;
    let hooks = load("warden_fixture_hooks.wasm")?;

    let mut linker = Linker::<Bare>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    bindings::tool::ToolPlugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let tool_pre = bindings::tool::ToolPluginPre::new(
        linker
            .instantiate_pre(&fixtures)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?,
    )
    .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let hook_pre = bindings::hook::HookPluginPre::new(
        linker
            .instantiate_pre(&hooks)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?,
    )
    .map_err(|e| anyhow::anyhow!("{e:#}"))?;

    let ctx = wit::CallContext {
        session_id: "ses".into(),
        message_id: "msg".into(),
        call_id: "c".into(),
        agent: "build".into(),
        directory: "/".into(),
    };
    let args = payload(1024, 0).to_string();
    let output = wit::ToolOutput {
        output: args.clone(),
        title: String::new(),
        metadata: "{}".into(),
    };
    let (mut tool, mut before, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + warm {
        before_each(i);
        let t0 = Instant::now();
        let mut store = bare_store(engine);
        let instance = tool_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let r = instance
            .warden_plugin_tool()
            .call_execute(&mut store, &ctx, "echo", &args)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        anyhow::ensure!(r.is_ok(), "the bare echo call failed: {r:?}");
        drop(store);
        let t = t0.elapsed();

        before_each(i);
        let t0 = Instant::now();
        let mut store = bare_store(engine);
        let instance = hook_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        instance
            .warden_plugin_hooks()
            .call_before(&mut store, &ctx, "echo", &args)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        drop(store);
        let b = t0.elapsed();

        before_each(i);
        let t0 = Instant::now();
        let mut store = bare_store(engine);
        let instance = hook_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        instance
            .warden_plugin_hooks()
            .call_after(&mut store, &ctx, "echo", &args, &output)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        drop(store);
        let a = t0.elapsed();
        if i >= warm {
            tool.push(t);
            before.push(b);
            after.push(a);
        }
    }
    Ok((tool, before, after))
}
