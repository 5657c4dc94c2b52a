//! The file-system gate: every path a guest opens, removes, renames or
//! links inside its granted directories is resolved on the host first.
//!
//! - Only regular files and directories may be opened. A FIFO, device or
//!   socket could block the opening thread for ever (a FIFO's `open` waits
//!   for a writer), and wasmtime runs file calls on the async worker; refusing
//!   them at open means no guest can park a runtime worker, so every call's
//!   time limit keeps firing.
//! - warden's own files (the ledger, the compiled cache, the installed
//!   plugins, the config) are refused wherever they lie, even inside a
//!   granted directory (e.g. running in `$HOME` with the default data dir).
//!
//! The check resolves the path the way the kernel will (symlinks followed
//! from the descriptor's real location, found through `/proc/self/fd`), so a
//! link inside a grant is judged by where it leads. The wrappers shadow
//! wasmtime-wasi's own functions and then call them.

use std::path::{Path, PathBuf};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self as fs, DescriptorFlags, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};

use crate::sandbox::GuestState;

const TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replace the path-taking functions that could reach a non-regular file or
/// warden's own files with gated ones.
pub fn add_to_linker(l: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    l.allow_shadowing(true);
    let mut i = l.instance(TYPES)?;
    i.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s.fs_check(&fd, &path, Use::Open, path_flags) {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::open_at(&mut v, fd, path_flags, path, oflags, flags).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    i.func_wrap_async(
        "[method]descriptor.unlink-file-at",
        |mut store: StoreContextMut<'_, GuestState>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s.fs_check(&fd, &path, Use::Change, PathFlags::empty()) {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::unlink_file_at(&mut v, fd, path).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    i.func_wrap_async(
        "[method]descriptor.remove-directory-at",
        |mut store: StoreContextMut<'_, GuestState>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s.fs_check(&fd, &path, Use::Change, PathFlags::empty()) {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::remove_directory_at(&mut v, fd, path).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    i.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s
                    .fs_check(&fd, &old, Use::Change, PathFlags::empty())
                    .and_then(|()| s.fs_check(&new_fd, &new, Use::Change, PathFlags::empty()))
                {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::rename_at(&mut v, fd, old, new_fd, new).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    i.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (fd, flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s
                    .fs_check(&fd, &old, Use::Change, flags)
                    .and_then(|()| s.fs_check(&new_fd, &new, Use::Change, PathFlags::empty()))
                {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::link_at(&mut v, fd, flags, old, new_fd, new).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    // Creating a directory or a link makes something new; only an instance
    // made ahead of its call is refused these (see `fs_check`).
    i.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, GuestState>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s.fs_check(&fd, &path, Use::Create, PathFlags::empty()) {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::create_directory_at(&mut v, fd, path).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    i.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let s = store.data_mut();
                if let Err(code) = s.fs_check(&fd, &new, Use::Create, PathFlags::empty()) {
                    return Ok((Err(code),));
                }
                let mut v = s.filesystem();
                let r = HostDescriptor::symlink_at(&mut v, fd, old, new).await;
                Ok((lower(&mut v, r)?,))
            })
        },
    )?;
    l.allow_shadowing(false);
    Ok(())
}

/// A wasmtime-wasi result as the guest receives it: its error code, or a
/// trap for what is not one.
fn lower<T>(
    v: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    r: Result<T, wasmtime_wasi::TrappableError<ErrorCode>>,
) -> wasmtime::Result<Result<T, ErrorCode>> {
    match r {
        Ok(t) => Ok(Ok(t)),
        Err(e) => Ok(Err(fs::Host::convert_error_code(v, e)?)),
    }
}

/// What the guest does with the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Open,
    Change,
    /// Make a new directory or link (checked only while made ahead).
    Create,
}

impl GuestState {
    /// Whether the guest may use `path` under the directory `fd`; a refusal
    /// is logged with its reason and answered with `access`.
    fn fs_check(
        &mut self,
        fd: &Resource<Descriptor>,
        path: &str,
        what: Use,
        flags: PathFlags,
    ) -> Result<(), ErrorCode> {
        if self.preparing {
            self.tripped = true;
            return Err(self.refuse(
                path,
                "the instance is being made ahead of its call, and no call has been allowed yet",
            ));
        }
        if what == Use::Create || (what == Use::Change && self.protected.is_empty()) {
            return Ok(());
        }
        // A descriptor that is not a directory is refused by wasmtime itself.
        let Ok(Descriptor::Dir(dir)) = self.table.get(fd) else {
            return Ok(());
        };
        let base = match dir_path(&dir.dir) {
            Some(b) => b,
            None => return Err(self.refuse(path, "its directory cannot be resolved")),
        };
        let follow = what == Use::Open && flags.contains(PathFlags::SYMLINK_FOLLOW);
        let target = resolve(&base.join(path), follow);
        if let Some(own) = self.protected.iter().find(|p| target.starts_with(p)) {
            let why = format!("{} is warden's own file", own.display());
            return Err(self.refuse(path, &why));
        }
        if what == Use::Open
            && let Ok(meta) = std::fs::metadata(&target)
            && !(meta.is_file() || meta.is_dir())
        {
            return Err(self.refuse(
                path,
                "it is not a regular file or directory (FIFOs, devices and sockets are never opened)",
            ));
        }
        Ok(())
    }

    fn refuse(&mut self, path: &str, why: &str) -> ErrorCode {
        let line = format!("refused to open {path:?}: {why}");
        tracing::warn!(plugin = &*self.plugin, "{line}");
        if self.fs_refusals.len() < 8 {
            self.fs_refusals.push(line);
        }
        ErrorCode::Access
    }
}

/// The real path of an open directory.
fn dir_path(dir: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()
}

/// Where `path` (absolute) leads, resolved component by component as the
/// kernel does: a symlink is replaced by its target before a following `..`
/// applies (the last component is followed only when `follow`); what does
/// not exist yet is kept as given.
fn resolve(path: &Path, follow: bool) -> PathBuf {
    use std::path::Component;
    let parts: Vec<Component> = path.components().collect();
    let mut cur = PathBuf::new();
    for (n, c) in parts.iter().enumerate() {
        match c {
            Component::ParentDir => {
                cur.pop();
            }
            Component::CurDir => {}
            Component::Normal(name) => {
                cur.push(name);
                let last = n + 1 == parts.len();
                let is_link = std::fs::symlink_metadata(&cur)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                if is_link
                    && (!last || follow)
                    && let Ok(real) = std::fs::canonicalize(&cur)
                {
                    cur = real;
                }
            }
            other => cur.push(other.as_os_str()),
        }
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_resolved_before_dot_dot() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(root.join("own/sub")).unwrap();
        std::fs::create_dir_all(root.join("grant")).unwrap();
        std::os::unix::fs::symlink(root.join("own/sub"), root.join("grant/link")).unwrap();
        assert_eq!(
            resolve(&root.join("grant/link/../ledger.db"), false),
            root.join("own/ledger.db")
        );
        assert_eq!(
            resolve(&root.join("grant/link"), false),
            root.join("grant/link")
        );
        assert_eq!(
            resolve(&root.join("grant/link"), true),
            root.join("own/sub")
        );
        assert_eq!(
            resolve(&root.join("grant/new/file"), true),
            root.join("grant/new/file")
        );
    }
}
