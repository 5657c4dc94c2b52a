//! The wasmtime engine: its settings, the epoch clock that bounds every
//! guest call in time, and the on-disk cache of compiled components.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::cache::{Cache, Rejected};
use crate::engine_settings;
use crate::error::RuntimeError;

/// How often the epoch advances: the granularity of time limits, and how
/// often a busy guest yields to the async runtime.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Counters a test or `warden plugin list` can read.
#[derive(Debug, Default)]
pub struct Stats {
    /// Components compiled from wasm in this process.
    pub compiled: AtomicU64,
    /// Components loaded from the compiled cache.
    pub cache_hits: AtomicU64,
    /// Cache entries that failed their check and were compiled again, with why.
    pub cache_rejected: Mutex<Vec<String>>,
}

/// The engine and what goes with it.
pub struct Sandbox {
    pub engine: Engine,
    pub pooling: bool,
    cache: Option<Cache>,
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
        let settings = |pool| {
            let mut c = engine_settings::config(pool);
            crate::code_in_place::configure(&mut c);
            c
        };
        let (engine, pooling) = match Engine::new(&settings(Some(max_memory))) {
            Ok(e) => (e, true),
            Err(e) => {
                // Some machines refuse the pool's address-space reservation; on-demand still works.
                tracing::warn!(error = %e, "pooling allocator unavailable, allocating guests on demand");
                (
                    Engine::new(&settings(None))
                        .map_err(|e| RuntimeError::Engine(e.to_string()))?,
                    false,
                )
            }
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let compat = h.finish();
        let cache = match cache_dir {
            Some(dir) => match Cache::open(dir, compat) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "the compiled cache is unusable; compiling every plugin");
                    None
                }
            },
            None => None,
        };

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
            cache,
            stats: Stats::default(),
            ticker: stop,
        })
    }

    /// Compile `bytes` (whose sha256 is `hash`), or load the compiled form
    /// from the cache once it is proven to be this component's, compiled by
    /// this engine (see [`crate::cache`]). An entry that fails the check is
    /// reported and replaced.
    pub fn component(&self, bytes: &[u8], hash: &str) -> Result<Component, RuntimeError> {
        if let Some(cache) = &self.cache {
            match cache.load(&self.engine, hash) {
                Ok(c) => {
                    self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(c);
                }
                Err(Rejected::Missing) => {}
                Err(Rejected::Invalid(why)) => {
                    let note = format!(
                        "the compiled cache entry for component {hash} was not used ({why}); compiled it again"
                    );
                    tracing::warn!("{note}");
                    self.stats
                        .cache_rejected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(note);
                }
            }
        }
        if let Some(why) = not_a_component(bytes) {
            return Err(RuntimeError::Compile(why));
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| RuntimeError::Compile(format!("{e:#}")))?;
        self.stats.compiled.fetch_add(1, Ordering::Relaxed);
        if let Some(cache) = &self.cache
            && let Err(e) = cache.store(&component, hash)
        {
            tracing::warn!(error = %e, "could not write the compiled cache");
        }
        Ok(component)
    }
}

/// Why `bytes` cannot be a component, with what to do, when its header says
/// so before any parsing: not WebAssembly at all, or a core module (an
/// Extism plugin, a `wasm32-wasip1` or `wasm32-unknown-unknown` build).
pub fn not_a_component(bytes: &[u8]) -> Option<String> {
    const MAGIC: &[u8] = b"\0asm";
    const CORE: [u8; 4] = [1, 0, 0, 0];
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Some(
            "the file is not WebAssembly (it does not begin with the `\\0asm` magic); \
             give warden a component built with `warden plugin build` (or for the wasm32-wasip2 target)"
                .into(),
        );
    }
    if bytes[4..8] == CORE {
        return Some(
            "the file is a core WebAssembly module, not a component: warden runs components \
             (the WebAssembly component model, WASI 0.2) that implement its tool-plugin or \
             hook-plugin world. A Rust crate builds one for the wasm32-wasip2 target \
             (`warden plugin new` makes such a project, `warden plugin build` builds it); a \
             wasm32-wasip1 module can be wrapped with `wasm-tools component new MODULE --adapt \
             wasi_snapshot_preview1.reactor.wasm`, but it still has to export warden's world. \
             Extism plugins are core modules written for Extism's host functions and do not run here \
             as they are"
                .into(),
        );
    }
    None
}

/// sha256 of a component, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::not_a_component;

    #[test]
    fn a_core_module_and_a_file_that_is_not_wasm_are_told_apart_from_a_component() {
        // The smallest core module, and a component's preamble.
        let core = b"\0asm\x01\0\0\0";
        let component = b"\0asm\x0d\0\x01\0";
        let why = not_a_component(core).unwrap();
        assert!(
            why.contains("core WebAssembly module") && why.contains("wasm32-wasip2"),
            "{why}"
        );
        assert!(why.contains("Extism"), "{why}");
        let why = not_a_component(b"#!/bin/sh\necho hi\n").unwrap();
        assert!(why.contains("not WebAssembly"), "{why}");
        assert!(not_a_component(b"\0as").is_some());
        assert_eq!(not_a_component(component), None);
    }
}
