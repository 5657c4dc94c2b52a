//! One guest call's sandbox: a fresh store holding only what the plugin was
//! granted, and the linker that decides which imports exist at all.
//!
//! Default is no authority. The WASI context starts empty (no files, no
//! environment, no stdin, no network); each grant is an explicit builder
//! call. `wasi:sockets` is never linked, so no raw TCP/UDP/DNS path exists;
//! any import the host does not provide is defined to trap.
//!
//! Three parts: [`link`] (which imports exist), [`grants`] (what a plugin's
//! grants resolve to on this host, at the moment of a call) and this file
//! (the store holding exactly that, armed, run and its failures named).

mod grants;
mod link;

pub use grants::{Limits, Resolved, resolve, resolve_dir};
pub use link::{World, linker};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_tool::config::DirMode;
use warden_tool::{CallObserver, GuestError};
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::budget::{self, Meter};
use crate::guest_output::{self, GuestOutput};
use crate::net::HttpGate;

/// How long a guest call runs before it starts yielding at every epoch tick.
const RUN_BEFORE_YIELDING: Duration = Duration::from_millis(10);

/// The state of one guest instance.
pub struct GuestState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    http: WasiHttpCtx,
    gate: HttpGate,
    limits: StoreLimits,
    pub(crate) observer: Option<Arc<dyn CallObserver>>,
    pub(crate) plugin: Arc<str>,
    output: GuestOutput,
    /// What the host interface has used of the call's budget.
    pub(crate) meter: Meter,
    /// warden's own files, refused through every grant.
    pub(crate) protected: Arc<[PathBuf]>,
    /// Why the file-system gate refused paths in this call (the first few).
    pub(crate) fs_refusals: Vec<String>,
    /// When the call began, for its time limit (see [`arm`]).
    started: Instant,
    timeout: Duration,
    /// Made ahead of its call (see [`preparing`]): files and network refused.
    pub(crate) preparing: bool,
    /// It reached for a file while being made ahead.
    pub(crate) tripped: bool,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

impl GuestState {
    /// What the guest wrote to stderr (a panic or a traceback lands here).
    pub fn stderr(&self) -> String {
        self.output.stderr()
    }

    /// Hand what the guest printed to the call's observer (the audit trail).
    fn report_output(&self) {
        let Some(observer) = &self.observer else {
            return;
        };
        for (stream, text) in [
            ("stdout", self.output.stdout()),
            ("stderr", self.output.stderr()),
        ] {
            if !text.is_empty() {
                observer.guest_output(&self.plugin, stream, text);
            }
        }
    }

    /// Why the file-system gate refused paths during the call.
    pub fn fs_refusals(&self) -> &[String] {
        &self.fs_refusals
    }

    /// Whether, while made ahead of its call, it reached for a file or the
    /// network (and was refused).
    pub fn tripped(&self) -> bool {
        self.tripped || self.gate.tripped
    }
}

/// A fresh store for one call with exactly what `resolved` holds, and the
/// plugin's limits. Its time limit starts now; [`arm`] restarts it.
pub fn store(
    engine: &Engine,
    plugin: &Arc<str>,
    resolved: &Resolved,
    limits: &Limits,
    observer: Option<Arc<dyn CallObserver>>,
    protected: &Arc<[PathBuf]>,
) -> Result<Store<GuestState>, GuestError> {
    let mut b = WasiCtxBuilder::new();
    // Blocking file I/O on the current thread is several times faster than
    // hopping to a blocking pool, and calls are bounded by their time limit.
    b.allow_blocking_current_thread(true);
    for (var, value) in &resolved.env {
        b.env(var, value);
    }
    for (host, mode, _) in &resolved.dirs {
        let perms = match mode {
            DirMode::ReadOnly => FsPerms::ReadOnly,
            DirMode::ReadWrite => FsPerms::ReadWrite,
        };
        let guest_path = host.to_string_lossy().into_owned();
        b.preopened_dir(host, &guest_path, perms)
            .map_err(|e| GuestError::Unavailable {
                guest: format!("plugin {plugin}"),
                message: format!("cannot open the granted directory {}: {e}", host.display()),
            })?;
    }
    let output = GuestOutput::attach(&mut b);

    // One budget for every host-side object the guest can make: the table
    // holds them all; HTTP header collections are capped each (see budget).
    let mut table = ResourceTable::new();
    table.set_max_capacity(budget::TABLE_ENTRIES);
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(budget::FIELD_BYTES);
    let state = GuestState {
        wasi: b.build(),
        table,
        http,
        gate: HttpGate {
            plugin: plugin.clone(),
            allowed: limits.hosts.clone(),
            observer: observer.clone(),
            preparing: false,
            tripped: false,
        },
        limits: StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .instances(64)
            .tables(64)
            // The memory limit is per linear memory; few components need more than one.
            .memories(4)
            .trap_on_grow_failure(true)
            .build(),
        observer,
        plugin: plugin.clone(),
        output,
        meter: Meter::default(),
        protected: protected.clone(),
        fs_refusals: Vec::new(),
        started: Instant::now(),
        timeout: limits.timeout,
        preparing: false,
        tripped: false,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_epoch_deadline(1);
    // A guest that has run for a while yields to the async runtime at every
    // tick, so a busy one never starves other sessions; a short call runs to
    // its end (yielding it would only queue it behind every other task);
    // past its time limit it is interrupted.
    store.epoch_deadline_callback(|s| {
        let ran = s.data().started.elapsed();
        if ran >= s.data().timeout {
            Ok(UpdateDeadline::Interrupt)
        } else if ran >= RUN_BEFORE_YIELDING {
            Ok(UpdateDeadline::Yield(1))
        } else {
            Ok(UpdateDeadline::Continue(1))
        }
    });
    Ok(store)
}

/// Mark a store as being made ahead of its call: until [`arm`], every path
/// the guest opens, removes, renames or links, every directory or link it
/// creates, and every HTTP request is refused, and the store remembers it
/// tried ([`GuestState::tripped`]).
pub fn preparing(store: &mut Store<GuestState>) {
    let state = store.data_mut();
    state.preparing = true;
    state.gate.preparing = true;
}

/// Hand a store made ahead of its call to that call: its time limit starts
/// now, and progress, questions and HTTP verdicts go to `observer`.
pub fn arm(store: &mut Store<GuestState>, observer: Arc<dyn CallObserver>) {
    let state = store.data_mut();
    state.preparing = false;
    state.gate.preparing = false;
    state.started = Instant::now();
    state.gate.observer = Some(observer.clone());
    state.observer = Some(observer);
    store.set_epoch_deadline(1);
}

/// Run `call` on a store within its time limit; a trap or a timeout becomes
/// the error that names the guest and the cause. Every guest call, the
/// self-description included, goes through here.
pub async fn run<T>(
    store: &mut Store<GuestState>,
    limits: &Limits,
    guest: &str,
    call: impl AsyncFnOnce(&mut Store<GuestState>) -> wasmtime::Result<T>,
) -> Result<T, GuestError> {
    let result = match tokio::time::timeout(limits.timeout, call(store)).await {
        Err(_) => Err(GuestError::Timeout {
            guest: guest.to_string(),
            limit_ms: limits.timeout.as_millis() as u64,
        }),
        Ok(Err(e)) => Err(classify(e, guest, limits, &store.data().stderr())),
        Ok(Ok(v)) => Ok(v),
    };
    store.data().report_output();
    result
}

/// Turn a wasmtime failure into what the model and the operator are told,
/// naming the guest and the cause (without wasm backtraces).
pub fn classify(err: wasmtime::Error, guest: &str, limits: &Limits, stderr: &str) -> GuestError {
    let root = err.root_cause().to_string();
    let trap = err.downcast_ref::<wasmtime::Trap>().copied();
    match trap {
        Some(wasmtime::Trap::Interrupt) => {
            return GuestError::Timeout {
                guest: guest.to_string(),
                limit_ms: limits.timeout.as_millis() as u64,
            };
        }
        Some(wasmtime::Trap::StackOverflow) => {
            return GuestError::Trap {
                guest: guest.to_string(),
                message: "stack overflow (unbounded recursion?)".into(),
            };
        }
        _ => {}
    }
    if let Some(message) = budget::over_budget(&format!("{err:#}")) {
        return GuestError::OverBudget {
            guest: guest.to_string(),
            message,
        };
    }
    // The store's limiter turns a refused memory.grow into a trap; a Rust
    // guest whose allocation fails aborts with "memory allocation of N bytes failed".
    if root.contains("growing memory") || stderr.contains("memory allocation of") {
        return GuestError::OutOfMemory {
            guest: guest.to_string(),
            limit_mb: (limits.memory_bytes >> 20) as u64,
        };
    }
    let mut message = match trap {
        // A Rust guest's stack lives in its linear memory; overflowing it
        // runs off the bottom of memory rather than hitting the host's guard.
        Some(wasmtime::Trap::MemoryOutOfBounds) => {
            format!(
                "{} (often a stack overflow from unbounded recursion)",
                wasmtime::Trap::MemoryOutOfBounds
            )
        }
        Some(t) => t.to_string(),
        None => root,
    };
    if let Some(why) = guest_output::crash_summary(stderr) {
        message = format!("{why} ({message})");
    }
    if !stderr.is_empty() {
        // The whole of it for the operator; the model gets the one line above.
        tracing::warn!(guest, stderr, "guest crashed: {message}");
    }
    GuestError::Trap {
        guest: guest.to_string(),
        message,
    }
}
