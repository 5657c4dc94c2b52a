//! Path handling for tools that work on the session's files.
//!
//! The host mounts only what the operator granted, so a path outside the
//! working directory would fail to open anyway; resolving it here first turns
//! that into an error the model can act on, and keeps `..` tricks from even
//! reaching the filesystem.

use std::path::{Component, Path, PathBuf};

/// Resolve `path` (absolute, or relative to `base`) lexically, and return it
/// as an absolute path if it lies inside `base`. The error says why not.
pub fn resolve_within(base: &str, path: &str) -> Result<String, String> {
    if path.trim().is_empty() {
        return Err("the path is empty; give a file path relative to the working directory".into());
    }
    if path.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    let base = normalize(Path::new(base)).ok_or_else(|| format!("bad working directory {base}"))?;
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        base.join(path)
    };
    let resolved = normalize(&joined).ok_or_else(|| outside(path, &base))?;
    if resolved.starts_with(&base) {
        Ok(resolved.to_string_lossy().into_owned())
    } else {
        Err(outside(path, &base))
    }
}

/// The path relative to `base`, for titles; the path itself if not under it.
pub fn relative_to(base: &str, path: &str) -> String {
    match Path::new(path).strip_prefix(base) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string(),
    }
}

fn outside(path: &str, base: &Path) -> String {
    format!(
        "'{path}' is outside the working directory {}; only paths inside it can be used",
        base.display()
    )
}

/// Lexical normalisation: drop `.`, apply `..`. `None` if `..` climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}
