//! The engine's settings and their fingerprint, in one file shared by the
//! runtime (`engine.rs`, `builtin.rs`) and by `build.rs`, which precompiles
//! the built-in plugins with exactly these settings. Sharing the file is what
//! keeps the two from drifting apart; should they differ anyway, the
//! fingerprints differ and the runtime compiles instead of loading the
//! embedded artifact. Only `wasmtime`, `sha2` and `hex` may be used here:
//! `build.rs` has nothing else.

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

/// Guest instances that may be alive at once with the pooling allocator.
pub const POOL_INSTANCES: u32 = 1000;

/// How much of a pool slot's linear memory may stay resident between
/// instances when the kernel reports dirty pages (see [`config`]): only the
/// pages a call wrote are reset, up to this much.
const KEEP_RESIDENT_MEMORY: usize = 32 << 20;
/// The same for a slot's tables (the funcref tables of big guests run to
/// hundreds of KB).
const KEEP_RESIDENT_TABLE: usize = 4 << 20;

/// The default linear-memory limit of a guest (the config's `memory_mb`);
/// the built-ins are precompiled for it (by build.rs).
#[cfg_attr(not(test), allow(dead_code))]
pub const DEFAULT_MEMORY_MB: u64 = 64;

/// The engine's settings: with the pooling allocator when `pool_memory`
/// (the largest linear memory, in bytes) is given, on demand otherwise.
pub fn config(pool_memory: Option<usize>) -> Config {
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
        // A fresh instance of a big interpreted guest (CPython, a JS engine)
        // writes a few MB of its memory image before it does anything; a pool
        // slot normally gives those pages back and faults them in again on
        // the next instance. Where the kernel reports which pages an instance
        // dirtied (PAGEMAP_SCAN, Linux 6.7+), the slot keeps its pages and
        // only the dirtied ones are copied back from the image. Without it,
        // keeping pages resident would mean resetting the whole kept size on
        // every call, so the small default stays.
        // What stays resident is bounded by the busiest moment: a free slot
        // another guest last used is taken before an untouched one (no
        // unused warm slots kept), so only as many slots hold pages as there
        // were instances alive at once.
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
                .table_keep_resident(KEEP_RESIDENT_TABLE)
                .max_unused_warm_slots(0);
        }
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // Guard pages stay, but the reservation per memory is just what the grant allows.
        c.memory_reservation(max_memory as u64)
            .memory_guard_size(64 << 20);
    }
    c
}

/// A `Hasher` over sha256, so the fingerprint is the same in every process.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The fingerprint of an engine's settings, as the embedded artifacts
/// record it: artifacts load only into an engine with the same one.
pub fn fingerprint(engine: &wasmtime::Engine) -> String {
    let mut h = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(h.0.finalize())
}
