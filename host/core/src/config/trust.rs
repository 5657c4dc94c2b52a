//! Workspace trust: which project configs the operator has read and
//! accepted whole.
//!
//! A `warden.json` found in a working directory came with the project, and
//! whoever wrote the project may not be the operator (a cloned repository,
//! a pull request). Until the operator trusts it, it may only tighten what
//! the operator's own config allows ([`super::layers`]). `warden trust DIR`
//! records the file's real path and the sha256 of its bytes in the data
//! dir (`trust.json`, owner-only); a file whose bytes changed since is
//! untrusted again, so a later commit cannot ride on an earlier consent.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The file in the data dir.
pub const FILE: &str = "trust.json";

/// One trusted config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The sha256 of the file's bytes when it was trusted.
    pub sha256: String,
    /// When (ms since the epoch).
    pub trusted_at: i64,
}

/// What the trust list says of one file's current bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Trusted, with exactly these bytes.
    Trusted,
    /// Trusted once, but its bytes changed since.
    Changed,
    /// Never trusted.
    Unknown,
}

/// The trust list of one data dir.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    path: PathBuf,
    entries: BTreeMap<PathBuf, Entry>,
}

/// The sha256 of a file's bytes, as hex.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    trusted: BTreeMap<PathBuf, Entry>,
}

impl TrustStore {
    /// The trust list of `data_dir` (empty when it has none yet).
    pub fn open(data_dir: &Path) -> Result<TrustStore, String> {
        let path = data_dir.join(FILE);
        let entries = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<OnDisk>(&bytes)
                    .map_err(|e| {
                        format!(
                            "the trust list {} cannot be read ({e}); remove it and trust your projects again with `warden trust DIR`",
                            path.display()
                        )
                    })?
                    .trusted
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read the trust list {}: {e}", path.display())),
        };
        Ok(TrustStore { path, entries })
    }

    /// What the list says of `file` (its real path) holding `bytes`.
    pub fn status(&self, file: &Path, bytes: &[u8]) -> Status {
        match self.entries.get(file) {
            Some(e) if e.sha256 == digest(bytes) => Status::Trusted,
            Some(_) => Status::Changed,
            None => Status::Unknown,
        }
    }

    /// Trust `file` (its real path) as it holds `bytes` now, and save.
    pub fn trust(&mut self, file: &Path, bytes: &[u8]) -> Result<(), String> {
        self.entries.insert(
            file.to_path_buf(),
            Entry {
                sha256: digest(bytes),
                trusted_at: crate::clock::now_ms(),
            },
        );
        self.save()
    }

    /// Take `file` off the list, and save; whether it was on it.
    pub fn revoke(&mut self, file: &Path) -> Result<bool, String> {
        let was = self.entries.remove(file).is_some();
        if was {
            self.save()?;
        }
        Ok(was)
    }

    /// Every trusted file, by path.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_path(), e))
    }

    /// Written whole to a temporary file beside it, then renamed: a reader
    /// never sees half a list, and the file is the owner's alone.
    fn save(&self) -> Result<(), String> {
        let failed =
            |e: std::io::Error| format!("cannot write the trust list {}: {e}", self.path.display());
        let dir = self.path.parent().unwrap_or(Path::new("."));
        // The data dir is owner-only; made here first, it is made so here.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(failed)?;
        let text = serde_json::to_vec_pretty(&OnDisk {
            trusted: self.entries.clone(),
        })
        .map_err(|e| e.to_string())?;
        let tmp = dir.join(format!(".{FILE}.{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp).map_err(failed)?;
        f.write_all(&text)
            .and_then(|_| f.sync_all())
            .map_err(failed)?;
        std::fs::rename(&tmp, &self.path).map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_untrusted_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("warden.json");
        let mut store = TrustStore::open(dir.path()).unwrap();
        assert_eq!(store.status(&file, b"{}"), Status::Unknown);
        store.trust(&file, b"{}").unwrap();
        let store = TrustStore::open(dir.path()).unwrap();
        assert_eq!(store.status(&file, b"{}"), Status::Trusted);
        assert_eq!(store.status(&file, b"{\"mcp\": {}}"), Status::Changed);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let mut store = store;
        assert!(store.revoke(&file).unwrap());
        assert_eq!(
            TrustStore::open(dir.path()).unwrap().status(&file, b"{}"),
            Status::Unknown
        );
    }

    #[test]
    fn a_damaged_list_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "not json").unwrap();
        let e = TrustStore::open(dir.path()).unwrap_err();
        assert!(
            e.contains("trust.json") && e.contains("warden trust"),
            "{e}"
        );
    }
}
