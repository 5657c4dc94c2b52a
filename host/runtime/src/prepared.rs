//! Instances made ahead of their call.
//!
//! Every guest call gets an instance nothing has run in: a store and an
//! instance made for it alone, dropped after it. Making one is cheap for a
//! small component (about 10 µs) but not for a big interpreted one: a
//! CPython component places some 5,700 function-table entries across its
//! core modules at every instantiation, about 0.6 ms. So, after a call to
//! such a plugin, the next instance for the same plugin and working
//! directory is made in the background, while the model thinks, and the
//! next call takes it instead of making one.
//!
//! What a prepared instance may not change is what a call gets:
//! - it is made exactly as the call would make it, from the same grants,
//!   and nothing but the component's own instantiation has run in it;
//! - it serves one call, then is dropped like any other;
//! - a call takes it only if its grants resolve now as they did when it was
//!   made (the same directories through the same links, the same
//!   environment values); otherwise it is dropped and the call makes its
//!   own;
//! - its time limit and its observer (progress, questions, HTTP verdicts)
//!   are the call's, set when the call takes it ([`sandbox::arm`]);
//! - while it is made, no call has been allowed yet, so it may not reach
//!   anything: every file it opens, removes, renames or links, every
//!   directory or link it creates and every HTTP request is refused. One
//!   whose instantiation tries is dropped, and its plugin is not made
//!   ahead again: its calls make their own, after their permission check.
//!
//! Each holds a pool slot and the memory its instantiation wrote, so there
//! are at most [`MAX_PREPARED`], one per plugin and directory, each dropped
//! after [`IDLE`] unused; when that many are kept, no more are made (see
//! [`Spares::after_call`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use warden_tool::config::PrepareInstances;
use wasmtime::{Engine, Store};

use crate::bindings::Instance;
use crate::plugin::LoadedPlugin;
use crate::sandbox::{self, GuestState, Resolved};

/// The most instances kept ready at once.
pub const MAX_PREPARED: usize = 8;
/// How long a prepared instance waits for its call before it is dropped.
pub const IDLE: Duration = Duration::from_secs(60);
/// Under `auto`, a plugin whose last instantiation took longer than this
/// gets its next instance made ahead (small components take ~10 µs, a
/// JavaScript one ~30 µs, a Python one ~600 µs).
pub const SLOW_INSTANTIATION_US: u64 = 150;

/// A store with a fresh instance in it, made for one call.
pub struct Prepared {
    pub store: Store<GuestState>,
    pub instance: Instance,
    resolved: Resolved,
}

enum Slot {
    /// Being made by the background task with this id.
    Making(u64),
    Ready {
        prepared: Box<Prepared>,
        id: u64,
    },
}

type Key = (Arc<str>, String);

/// How many prepared instances were made, taken by a call, and dropped
/// unused (grants resolved differently, idle too long, or its
/// instantiation reached for a file or the network).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreparedStats {
    pub made: u64,
    pub taken: u64,
    pub dropped: u64,
}

/// The instances kept ready, by plugin and working directory.
pub struct Spares {
    policy: PrepareInstances,
    slots: Mutex<HashMap<Key, Slot>>,
    /// Plugins whose instantiation reached for a file or the network.
    unpreparable: Mutex<Vec<Arc<str>>>,
    next_id: AtomicU64,
    made: AtomicU64,
    taken: AtomicU64,
    dropped: AtomicU64,
}

impl Spares {
    pub fn new(policy: PrepareInstances) -> Spares {
        Spares {
            policy,
            slots: Mutex::new(HashMap::new()),
            unpreparable: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            made: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> PreparedStats {
        PreparedStats {
            made: self.made.load(Ordering::Relaxed),
            taken: self.taken.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// Drop every prepared instance (the host's protected paths changed).
    pub fn clear(&self) {
        let old = std::mem::take(&mut *self.slots());
        let ready = old
            .into_values()
            .filter(|s| matches!(s, Slot::Ready { .. }))
            .count();
        self.dropped.fetch_add(ready as u64, Ordering::Relaxed);
    }

    /// The instance made ahead for a call of `plugin` in `directory`, if
    /// one is ready and its grants resolved as `resolved` did now.
    pub fn take(
        &self,
        plugin: &Arc<str>,
        directory: &str,
        resolved: &Resolved,
    ) -> Option<Prepared> {
        let prepared = {
            let mut slots = self.slots();
            if slots.is_empty() {
                return None;
            }
            let key = (plugin.clone(), directory.to_string());
            match slots.get(&key) {
                Some(Slot::Ready { .. }) => match slots.remove(&key) {
                    Some(Slot::Ready { prepared, .. }) => prepared,
                    _ => return None,
                },
                _ => return None,
            }
        };
        if prepared.resolved != *resolved {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            drop_off_path(prepared.store);
            return None;
        }
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(*prepared)
    }

    /// Whether `plugin`'s next instance should be made ahead.
    fn wanted(&self, plugin: &LoadedPlugin) -> bool {
        let by_policy = match self.policy {
            PrepareInstances::Never => false,
            PrepareInstances::Always => true,
            PrepareInstances::Auto => plugin.instantiation_us() > SLOW_INSTANTIATION_US,
        };
        by_policy
            && !self
                .unpreparable
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&plugin.name)
    }

    /// After a call of `plugin` in `directory`: start making the next
    /// instance for the same, unless one is ready or being made, the policy
    /// says no, or [`MAX_PREPARED`] are already kept. None is dropped to make
    /// room: with more directories in play than that (many sessions at
    /// once), each would be dropped before its call, and making it would be
    /// wasted work.
    pub fn after_call(
        self: &Arc<Self>,
        plugin: &Arc<LoadedPlugin>,
        directory: &str,
        engine: &Engine,
        protected: &Arc<[PathBuf]>,
    ) {
        if !self.wanted(plugin) {
            return;
        }
        let key: Key = (plugin.name.clone(), directory.to_string());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut slots = self.slots();
            if slots.contains_key(&key) || slots.len() >= MAX_PREPARED {
                return;
            }
            slots.insert(key.clone(), Slot::Making(id));
        }
        let (spares, plugin, engine, protected) = (
            self.clone(),
            plugin.clone(),
            engine.clone(),
            protected.clone(),
        );
        tokio::spawn(async move {
            let made = match make(&plugin, &key.1, &engine, &protected).await {
                Made::Ready(prepared) => Some(prepared),
                Made::Tripped(store) => {
                    // Its instantiation reached for a file or the network
                    // before any call was allowed: never made ahead again.
                    spares
                        .unpreparable
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(plugin.name.clone());
                    spares.dropped.fetch_add(1, Ordering::Relaxed);
                    drop_off_path(store);
                    None
                }
                Made::Failed => None,
            };
            let unwanted = {
                let mut slots = spares.slots();
                // Cleared meanwhile, or another task's slot now: not wanted.
                if !matches!(slots.get(&key), Some(Slot::Making(i)) if *i == id) {
                    made
                } else if let Some(prepared) = made {
                    spares.made.fetch_add(1, Ordering::Relaxed);
                    slots.insert(
                        key.clone(),
                        Slot::Ready {
                            prepared: Box::new(prepared),
                            id,
                        },
                    );
                    None
                } else {
                    slots.remove(&key);
                    return;
                }
            };
            if let Some(p) = unwanted {
                drop_off_path(p.store);
                return;
            }
            tokio::time::sleep(IDLE).await;
            let expired = {
                let mut slots = spares.slots();
                if matches!(slots.get(&key), Some(Slot::Ready { id: i, .. }) if *i == id) {
                    slots.remove(&key)
                } else {
                    None
                }
            };
            if let Some(Slot::Ready { prepared, .. }) = expired {
                spares.dropped.fetch_add(1, Ordering::Relaxed);
                drop_off_path(prepared.store);
            }
        });
    }
}

/// Drop a store on a blocking thread: taking a big instance down resets
/// the pages it wrote, which is no work for an async worker.
pub fn drop_off_path(store: Store<GuestState>) {
    tokio::task::spawn_blocking(move || drop(store));
}

/// What making an instance ahead came to.
enum Made {
    Ready(Prepared),
    /// Its instantiation reached for a file or the network (and was
    /// refused), whether it then failed or not.
    Tripped(Store<GuestState>),
    /// It failed otherwise: the call makes its own and reports why.
    Failed,
}

/// Make an instance of `plugin` for a call in `directory`, as the call
/// itself would (within the plugin's time limit), with files and network
/// refused until a call takes it.
async fn make(
    plugin: &LoadedPlugin,
    directory: &str,
    engine: &Engine,
    protected: &Arc<[PathBuf]>,
) -> Made {
    let Ok(resolved) = sandbox::resolve(&plugin.name, &plugin.grants, Some(directory), protected)
    else {
        return Made::Failed;
    };
    let Ok(mut store) = sandbox::store(
        engine,
        &plugin.name,
        &resolved,
        &plugin.limits,
        None,
        protected,
    ) else {
        return Made::Failed;
    };
    sandbox::preparing(&mut store);
    let guest = plugin.guest().to_string();
    let instance = sandbox::run(&mut store, &plugin.limits, &guest, async |store| {
        plugin.instantiate(store).await
    })
    .await;
    match instance {
        _ if store.data().tripped() => Made::Tripped(store),
        Ok(instance) => Made::Ready(Prepared {
            store,
            instance,
            resolved,
        }),
        Err(_) => Made::Failed,
    }
}
