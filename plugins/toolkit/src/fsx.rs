//! Paths a call is about, and I/O errors as messages a model can act on.

use std::io::ErrorKind;

use warden_plugin_sdk::{Context, Error, paths};

/// A path resolved inside the working directory, with the form shown to the
/// model (relative to the working directory, `.` for the directory itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Absolute, lexically normalised, inside the working directory.
    pub abs: String,
    /// Relative to the working directory.
    pub shown: String,
}

impl Target {
    /// The target in a sentence: its path, or "the working directory".
    pub fn described(&self) -> String {
        if self.shown == "." {
            "the working directory".into()
        } else {
            self.shown.clone()
        }
    }
}

/// Resolve a file path the model gave.
pub fn target(ctx: &Context, path: &str) -> Result<Target, Error> {
    let abs = ctx.resolve(path)?;
    let shown = paths::relative_to(&ctx.directory, &abs);
    Ok(Target { abs, shown })
}

/// Resolve an optional directory argument: absent, empty or `.` means the
/// working directory itself.
pub fn search_root(ctx: &Context, path: Option<&str>) -> Result<Target, Error> {
    match path.map(str::trim) {
        None | Some("") => target(ctx, "."),
        Some(p) => target(ctx, p),
    }
}

/// What went wrong opening or reading `shown`, said so the model knows what
/// to do next. `tool` names the calling tool in the advice.
pub fn io_error(tool: &str, verb: &str, shown: &str, e: &std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::NotFound => Error::failed(format!("{shown} does not exist")),
        // The sandbox refuses anything outside the tool's grant (a symlink
        // out of the working directory, a directory it was not given, a write
        // to a read-only mount) with EPERM/EACCES/EROFS.
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => Error::failed(format!(
            "cannot {verb} {shown}: it is outside what `{tool}` was granted (a symlink leading \
             out of the working directory, or a directory mounted read-only for this tool)"
        )),
        ErrorKind::NotADirectory => Error::failed(format!(
            "cannot {verb} {shown}: a part of the path is a file, not a directory"
        )),
        ErrorKind::IsADirectory => Error::failed(format!(
            "cannot {verb} {shown}: it is a directory, not a file"
        )),
        _ => Error::failed(format!("cannot {verb} {shown}: {e}")),
    }
}
