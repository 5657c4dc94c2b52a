//! The wasmtime engine: its settings, the epoch clock that bounds every
//! guest call in time, and the on-disk cache of compiled components.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::error::RuntimeError;

/// How often the epoch advances: the granularity of time limits, and how
/// often a busy guest yields to the async runtime.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Guest instances that may be alive at once with the pooling allocator.
const POOL_INSTANCES: u32 = 1000;

/// Counters a test or `warden plugin list` can read.
#[derive(Debug, Default)]
pub struct Stats {
    /// Components compiled from wasm in this process.
    pub compiled: AtomicU64,
    /// Components loaded from the compiled cache.
    pub cache_hits: AtomicU64,
}

/// The engine and what goes with it.
pub struct Sandbox {
    pub engine: Engine,
    pub pooling: bool,
    cache_dir: Option<PathBuf>,
    compat: String,
    pub stats: Stats,
    ticker: Arc<AtomicBool>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker.store(true, Ordering::Relaxed);
    }
}

impl Sandbox {
    /// An engine whose linear memories may grow to `max_memory_mb`, with the
    /// compiled cache in `cache_dir` (none when `None`).
    pub fn new(max_memory_mb: u64, cache_dir: Option<PathBuf>) -> Result<Sandbox, RuntimeError> {
        let max_memory = (max_memory_mb.max(1) << 20) as usize;
        let (engine, pooling) = match Engine::new(&config(Some(max_memory))) {
            Ok(e) => (e, true),
            Err(e) => {
                // Some machines refuse the pool's address-space reservation; on-demand still works.
                tracing::warn!(error = %e, "pooling allocator unavailable, allocating guests on demand");
                (
                    Engine::new(&config(None)).map_err(|e| RuntimeError::Engine(e.to_string()))?,
                    false,
                )
            }
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let compat = format!("{:016x}", h.finish());

        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("warden-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch thread: {e}")))?;

        Ok(Sandbox {
            engine,
            pooling,
            cache_dir,
            compat,
            stats: Stats::default(),
            ticker: stop,
        })
    }

    /// Compile `bytes` (whose sha256 is `hash`), or load the compiled form
    /// from the cache. A cache entry is keyed by the content hash and the
    /// engine's compatibility hash, so a changed engine never loads a stale one.
    pub fn component(&self, bytes: &[u8], hash: &str) -> Result<Component, RuntimeError> {
        let cached = self.cache_path(hash);
        if let Some(path) = &cached
            && path.exists()
        {
            match load_cached(&self.engine, path) {
                Ok(c) => {
                    self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(c);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "compiled cache entry unusable, recompiling")
                }
            }
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| RuntimeError::Compile(format!("{e:#}")))?;
        self.stats.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = cached
            && let Err(e) = store_cached(&component, &path)
        {
            tracing::warn!(path = %path.display(), error = %e, "could not write the compiled cache");
        }
        Ok(component)
    }

    fn cache_path(&self, hash: &str) -> Option<PathBuf> {
        self.cache_dir
            .as_ref()
            .map(|d| d.join(format!("{hash}-{}.cwasm", self.compat)))
    }
}

fn config(pool_memory: Option<usize>) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        .max_wasm_stack(512 * 1024);
    if let Some(max_memory) = pool_memory {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_INSTANCES)
            .total_core_instances(POOL_INSTANCES * 4)
            .total_memories(POOL_INSTANCES * 2)
            .total_tables(POOL_INSTANCES * 4)
            .total_stacks(POOL_INSTANCES)
            .max_memory_size(max_memory)
            .max_core_instances_per_component(16)
            .max_memories_per_component(4)
            .max_tables_per_component(8)
            .linear_memory_keep_resident(64 * 1024);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // Guard pages stay, but the reservation per memory is just what the grant allows.
        c.memory_reservation(max_memory as u64)
            .memory_guard_size(64 << 20);
    }
    c
}

/// sha256 of a component, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn store_cached(component: &Component, path: &Path) -> Result<(), String> {
    let bytes = component.serialize().map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    // Write then rename, so a reader never sees half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

#[allow(unsafe_code)]
fn load_cached(engine: &Engine, path: &Path) -> Result<Component, String> {
    // SAFETY: `deserialize_file` trusts the file to be native code that this
    // engine produced. The cache lives in the operator's data directory and
    // is written only by `store_cached` (atomically, keyed by the content hash
    // and the engine's compatibility hash); wasmtime still checks the header
    // and refuses artifacts from another version or configuration. Someone
    // who can write to the data directory could equally replace the ledger or
    // the configuration, so the cache adds no new trust boundary.
    unsafe { Component::deserialize_file(engine, path) }.map_err(|e| e.to_string())
}
