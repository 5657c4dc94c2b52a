//! The on-disk cache of compiled components, verified before it is used.
//!
//! Deserializing a compiled artifact maps native code that will run, so an
//! entry is only loaded once it is proven to be what this process wrote for
//! this component on this engine. Each entry is one file:
//!
//! ```text
//! WARDENC1 | sha256 of the component (32) | engine compatibility hash (8) | tag (32) | artifact
//! ```
//!
//! The tag is an HMAC-SHA256 over everything before it and the artifact,
//! keyed by a random key that only this cache's owner can read (`.key`,
//! 0600, in a 0700 directory). An artifact copied over another component's
//! entry names the wrong component; one edited or forged fails the tag. A
//! failed check is reported and the component is compiled again from its
//! (sha256-checked) wasm.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 8] = b"WARDENC1";
const HEADER: usize = 8 + 32 + 8 + 32;
const KEY_FILE: &str = ".key";

/// A cache directory and its key.
pub struct Cache {
    dir: PathBuf,
    key: [u8; 32],
    compat: u64,
}

/// Why a cache entry was not used.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    /// No entry: the normal first run.
    Missing,
    /// An entry exists but fails its check: it is reported, then replaced.
    Invalid(String),
}

impl Cache {
    /// Open (creating, owner-only) the cache in `dir` for an engine whose
    /// compatibility hash is `compat`.
    pub fn open(dir: PathBuf, compat: u64) -> Result<Cache, String> {
        owner_only_dir(&dir)?;
        let key = key(&dir.join(KEY_FILE))?;
        Ok(Cache { dir, key, compat })
    }

    fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(format!("{hash}-{:016x}.cwasm", self.compat))
    }

    /// The compiled component for the wasm whose sha256 is `hash`, if a
    /// verified entry exists.
    pub fn load(&self, engine: &Engine, hash: &str) -> Result<Component, Rejected> {
        let path = self.path(hash);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Rejected::Missing),
            Err(e) => return Err(Rejected::Invalid(format!("cannot read it: {e}"))),
        };
        let artifact = self.verify(&bytes, hash).map_err(Rejected::Invalid)?;
        // SAFETY: `deserialize` trusts its input to be native code this
        // engine produced. `verify` has just proven, with a key only this
        // cache's owner can read, that these bytes are what `store` wrote for
        // this very component (its sha256) and engine (its compatibility
        // hash); wasmtime still checks its own header on top.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, artifact) };
        component.map_err(|e| Rejected::Invalid(format!("wasmtime refused it: {e}")))
    }

    /// Write `component`, compiled from the wasm whose sha256 is `hash`.
    pub fn store(&self, component: &Component, hash: &str) -> Result<(), String> {
        let artifact = component.serialize().map_err(|e| e.to_string())?;
        let digest = hex_digest(hash)?;
        let mut header = Vec::with_capacity(HEADER + artifact.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&digest);
        header.extend_from_slice(&self.compat.to_le_bytes());
        let tag = hmac(&self.key, &[&header, &artifact]);
        header.extend_from_slice(&tag);
        header.extend_from_slice(&artifact);
        let path = self.path(hash);
        // Write then rename, so a reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        write_private(&tmp, &header)?;
        std::fs::rename(&tmp, &path).map_err(|e| e.to_string())
    }

    /// The artifact inside an entry, if the entry is genuine.
    fn verify<'a>(&self, bytes: &'a [u8], hash: &str) -> Result<&'a [u8], String> {
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err("it is not a warden cache entry".into());
        }
        let digest = hex_digest(hash)?;
        if bytes[8..40] != digest {
            return Err(format!(
                "it was compiled from another component (sha256 {}), not {hash}",
                hex::encode(&bytes[8..40])
            ));
        }
        if bytes[40..48] != self.compat.to_le_bytes() {
            return Err("it was compiled by another engine configuration".into());
        }
        let artifact = &bytes[HEADER..];
        let tag = hmac(&self.key, &[&bytes[..48], artifact]);
        if !constant_time_eq(&tag, &bytes[48..80]) {
            return Err(
                "its authentication tag does not match (altered, or not written by this cache)"
                    .into(),
            );
        }
        Ok(artifact)
    }
}

fn hex_digest(hash: &str) -> Result<[u8; 32], String> {
    let v = hex::decode(hash).map_err(|e| format!("bad component hash {hash:?}: {e}"))?;
    v.try_into()
        .map_err(|_| format!("bad component hash {hash:?}: not 32 bytes"))
}

/// Create `dir` (and missing parents) readable by its owner only, and tighten
/// it if it already exists.
pub fn owner_only_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} owner-only: {e}", dir.display()))?;
    }
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The cache's key: read, or made once from the OS's random source.
fn key(path: &Path) -> Result<[u8; 32], String> {
    if let Ok(bytes) = std::fs::read(path)
        && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    let key: [u8; 32] = rand::random();
    // Another process may race to create it: write aside, then link into
    // place without replacing; whoever loses reads the winner's key.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    write_private(&tmp, &key)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(_) => std::fs::read(path)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
            .ok_or_else(|| format!("the cache key {} is unreadable", path.display())),
    }
}

/// HMAC-SHA256 (RFC 2104) over the concatenation of `parts`.
fn hmac(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let mut inner = Sha256::new();
    inner.update(ipad);
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(opad);
    outer.update(inner.finalize());
    outer.finalize().into()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_shape() {
        // Same key and message twice: same tag; one bit changed: another.
        let k = [7u8; 32];
        assert_eq!(hmac(&k, &[b"ab", b"c"]), hmac(&k, &[b"abc"]));
        assert_ne!(hmac(&k, &[b"abc"]), hmac(&k, &[b"abd"]));
        assert_ne!(hmac(&k, &[b"abc"]), hmac(&[8u8; 32], &[b"abc"]));
    }

    #[test]
    fn the_directory_and_key_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        let cache = Cache::open(dir.clone(), 1).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(
            Cache::open(dir.clone(), 1).unwrap().key,
            cache.key,
            "the key is kept"
        );
        let entry = [MAGIC.as_slice(), &[0u8; 72]].concat();
        assert!(
            cache
                .verify(&entry, &"ab".repeat(32))
                .unwrap_err()
                .contains("another component")
        );
    }
}
