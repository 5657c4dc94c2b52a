//! One guest call's sandbox: a fresh store holding only what the plugin was
//! granted, and the linker that decides which imports exist at all.
//!
//! Default is no authority. The WASI context starts empty (no files, no
//! environment, no stdin, no network); each grant is an explicit builder
//! call. `wasi:sockets` is never linked, so no raw TCP/UDP/DNS path exists;
//! any import the host does not provide is defined to trap.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_tool::config::{DirMode, Grants};
use warden_tool::{CallObserver, GuestError};
use wasmtime::component::{Component, HasData, Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::Contract;
use crate::budget::{self, Meter};
use crate::guest_output::{self, GuestOutput};
use crate::net::{HostPattern, HttpGate};

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

struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

pub use crate::bindings::World;

/// A linker for one component: the WASI interfaces a sandbox may offer (not
/// sockets; wasi:http only when `http`, i.e. the plugin was granted hosts),
/// the warden host interface, and traps for everything else.
pub fn linker(
    engine: &Engine,
    component: &Component,
    contract: &dyn Contract,
    world: World,
    http: bool,
) -> wasmtime::Result<Linker<GuestState>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};

    let mut l = Linker::<GuestState>::new(engine);
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<GuestState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::poll::add_to_linker::<GuestState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::streams::add_to_linker::<GuestState, HasIo>(
        &mut l,
        |t| &mut t.table,
    )?;
    clocks::wall_clock::add_to_linker::<GuestState, WasiClocks>(&mut l, GuestState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<GuestState, WasiClocks>(&mut l, GuestState::clocks)?;
    filesystem::types::add_to_linker::<GuestState, WasiFilesystem>(&mut l, GuestState::filesystem)?;
    filesystem::preopens::add_to_linker::<GuestState, WasiFilesystem>(
        &mut l,
        GuestState::filesystem,
    )?;
    crate::fs_gate::add_to_linker(&mut l)?;
    random::random::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    random::insecure::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    random::insecure_seed::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    cli::exit::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::environment::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stdin::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stdout::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stderr::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_input::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_output::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stdin::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stdout::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stderr::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    // Outgoing HTTP exists only for a plugin granted hosts (the gate then
    // refuses what is not granted); for any other, wasi:http traps on use.
    if http {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async::<GuestState>(&mut l)?;
    }
    contract.add_to_linker(&mut l, world)?;
    stub_missing(&mut l, engine, component, http)?;
    Ok(l)
}

/// The interfaces [`linker`] provides to a plugin granted hosts, besides [`PROVIDED`].
const PROVIDED_HTTP: &[&str] = &["wasi:http/outgoing-handler", "wasi:http/types"];

/// The interfaces [`linker`] provides, by name without version (the linker
/// matches versions semver-compatibly: a guest built against wasi 0.2.6 is
/// served by the host's 0.2.x).
const PROVIDED: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "warden:plugin/host",
    "warden:plugin/types",
];

/// Define every import the host does not provide (wasi:sockets above all) as
/// functions that trap with a message naming the import, so such a guest
/// still loads and fails only if it really uses one.
fn stub_missing(
    l: &mut Linker<GuestState>,
    engine: &Engine,
    component: &Component,
    http: bool,
) -> wasmtime::Result<()> {
    use wasmtime::component::types::ComponentItem;
    for (name, item) in component.component_type().imports(engine) {
        let unversioned = name.split('@').next().unwrap_or(name);
        if PROVIDED.contains(&unversioned) || (http && PROVIDED_HTTP.contains(&unversioned)) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            anyhow_bail(format!(
                "the component imports {name}, which is not an interface warden can provide"
            ))?;
            continue;
        };
        let mut li = l.instance(name)?;
        for (export, ty) in instance.exports(engine) {
            let qualified = format!("{name}#{export}");
            match ty.ty {
                ComponentItem::ComponentFunc(_) => li.func_new(export, move |_, _, _, _| {
                    Err(wasmtime::format_err!(
                        "the plugin called `{qualified}`, which warden does not provide to plugins{}",
                        if qualified.starts_with("wasi:sockets") {
                            " (raw sockets are never available; outgoing HTTP goes through wasi:http and the plugin's host grants)"
                        } else if qualified.starts_with("wasi:http") {
                            " (the plugin was granted no hosts, so it has no wasi:http at all; grant hosts to use it)"
                        } else {
                            ""
                        }
                    ))
                })?,
                // A stubbed interface may re-export resources of interfaces the
                // host does provide (a socket's `pollable`, `input-stream`...);
                // those must keep the host's own type. Its own resources get a
                // placeholder type: nothing can ever create one.
                ComponentItem::Resource(_) => {
                    use wasmtime::component::ResourceType;
                    let ty = match export {
                        "pollable" => ResourceType::host::<wasmtime_wasi_io::poll::DynPollable>(),
                        "input-stream" => ResourceType::host::<wasmtime_wasi_io::streams::DynInputStream>(),
                        "output-stream" => ResourceType::host::<wasmtime_wasi_io::streams::DynOutputStream>(),
                        "error" => ResourceType::host::<wasmtime_wasi_io::streams::Error>(),
                        _ => ResourceType::host::<()>(),
                    };
                    li.resource(export, ty, |_, _| Ok(()))?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn anyhow_bail(message: String) -> wasmtime::Result<()> {
    Err(wasmtime::format_err!("{message}"))
}

/// The limits a store is built with.
#[derive(Debug, Clone)]
pub struct Limits {
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub max_output: usize,
    /// Where outgoing HTTP may go.
    pub hosts: Arc<[HostPattern]>,
}

impl Limits {
    /// The limits of a grant; a malformed host entry is refused with the reason.
    pub fn of(grants: &Grants) -> Result<Limits, String> {
        Ok(Limits {
            memory_bytes: (grants.memory_mb.max(1) << 20) as usize,
            timeout: Duration::from_millis(grants.timeout_ms.max(1)),
            max_output: (grants.max_output_kb.max(1) * 1024) as usize,
            hosts: grants
                .hosts
                .iter()
                .map(|h| HostPattern::parse(h))
                .collect::<Result<Vec<_>, _>>()?
                .into(),
        })
    }
}

/// What a call's WASI context is made of, read from the host at one moment:
/// each granted directory resolved to a host path (see [`resolve_dir`]) and
/// each granted environment variable's value. Two calls that resolve alike
/// may use stores made for one another (see `crate::prepared`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Host path, mode, and the directory's identity (device, inode): a
    /// directory removed and made again, or moved away and replaced, under
    /// the same path is not the one a store made earlier holds open.
    dirs: Vec<(PathBuf, DirMode, (u64, u64))>,
    env: Vec<(String, String)>,
}

impl Resolved {
    /// No directory and no environment (a plugin describing itself).
    pub fn nothing() -> Resolved {
        Resolved {
            dirs: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// Resolve `grants` for a call in `directory` (the session's working
/// directory, `.` in a directory grant).
pub fn resolve(
    plugin: &str,
    grants: &Grants,
    directory: Option<&str>,
    protected: &[PathBuf],
) -> Result<Resolved, GuestError> {
    let env = grants
        .env
        .iter()
        .filter_map(|var| std::env::var(var).ok().map(|value| (var.clone(), value)))
        .collect();
    let dirs =
        grants
            .dirs
            .iter()
            .map(|dir| {
                use std::os::unix::fs::MetadataExt;
                let (host, meta) = resolve_dir_with_metadata(&dir.path, directory, protected)
                    .map_err(|message| GuestError::Unavailable {
                        guest: format!("plugin {plugin}"),
                        message,
                    })?;
                Ok((host, dir.mode, (meta.dev(), meta.ino())))
            })
            .collect::<Result<_, _>>()?;
    Ok(Resolved { dirs, env })
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

/// A granted directory as a host path, resolved through every link before
/// it is preopened: absolute, or relative to the session's working directory,
/// in which case it must still lie inside that directory once resolved (a
/// project's `build -> ../outside` does not widen a grant of `build`). It
/// must exist, be a directory, and not be one of warden's own.
pub fn resolve_dir(
    path: &str,
    directory: Option<&str>,
    protected: &[PathBuf],
) -> Result<PathBuf, String> {
    resolve_dir_with_metadata(path, directory, protected).map(|(dir, _)| dir)
}

/// [`resolve_dir`], with the directory's metadata from the same check.
fn resolve_dir_with_metadata(
    path: &str,
    directory: Option<&str>,
    protected: &[PathBuf],
) -> Result<(PathBuf, std::fs::Metadata), String> {
    let p = Path::new(path);
    let (joined, base) = if p.is_absolute() {
        (p.to_path_buf(), None)
    } else {
        match directory {
            Some(d) => (Path::new(d).join(p), Some(d)),
            None => {
                return Err(format!(
                    "the directory grant {path:?} is relative, and this call has no working directory"
                ));
            }
        }
    };
    let canonical = std::fs::canonicalize(&joined).map_err(|e| {
        format!(
            "the granted directory {} cannot be used: {e}",
            joined.display()
        )
    })?;
    if let Some(base) = base {
        let base = std::fs::canonicalize(base)
            .map_err(|e| format!("the working directory {base} cannot be used: {e}"))?;
        if !canonical.starts_with(&base) {
            return Err(format!(
                "the directory grant {path:?} leads to {}, outside the working directory {} (through a link); a relative grant must stay inside it",
                canonical.display(),
                base.display()
            ));
        }
    }
    let meta = std::fs::metadata(&canonical).map_err(|e| {
        format!(
            "the granted directory {} cannot be used: {e}",
            canonical.display()
        )
    })?;
    if !meta.is_dir() {
        return Err(format!(
            "the granted path {} is not a directory",
            canonical.display()
        ));
    }
    if let Some(own) = protected.iter().find(|o| canonical.starts_with(o)) {
        return Err(format!(
            "the granted directory {} is inside warden's own {}; no plugin may be granted it",
            canonical.display(),
            own.display()
        ));
    }
    Ok((canonical, meta))
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
