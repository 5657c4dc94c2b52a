//! What a plugin's grants resolve to on this host for one call: its limits
//! ([`Limits`]), and each granted directory and environment variable read
//! at that moment ([`Resolved`]), every directory checked to be what the
//! grant says and none of warden's own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use warden_tool::GuestError;
use warden_tool::config::{DirMode, Grants};

use crate::net::HostPattern;

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
    pub(super) dirs: Vec<(PathBuf, DirMode, (u64, u64))>,
    pub(super) env: Vec<(String, String)>,
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
