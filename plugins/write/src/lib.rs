//! The built-in `write` tool: create a file, or replace one's whole content,
//! inside the session's working directory, creating missing parent folders.
//!
//! The file is written in place rather than through a temporary file and a
//! rename: WASI has no way to carry a file's mode over, so a rename would
//! silently drop the executable bit of a script. A symlink inside the
//! working directory is written through; one that leads out of it is
//! refused by the sandbox, which mounts only the working directory.

use std::io::ErrorKind;
use std::path::Path;

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json};
use warden_toolkit::{fsx, text};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    file_path: String,
    content: String,
}

struct Write;

impl Tool for Write {
    type Args = Args;
    const ID: &'static str = "write";
    const DESCRIPTION: &'static str = "Write a file in the working directory: create it, or replace \
        its whole content if it exists. Missing parent folders are created. To change part of an \
        existing file, prefer `edit`, which keeps the rest untouched. Paths are relative to the \
        working directory (or absolute inside it).";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "filePath": {
                    "type": "string",
                    "description": "The file to write: relative to the working directory, or absolute inside it."
                },
                "content": {
                    "type": "string",
                    "description": "The file's whole new content."
                }
            },
            "required": ["filePath", "content"],
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        let t = fsx::target(ctx, &args.file_path)?;
        if t.shown == "." {
            return Err(Error::InvalidArguments(
                "filePath is the working directory itself; give the path of a file inside it"
                    .into(),
            ));
        }
        let previous = match std::fs::metadata(&t.abs) {
            Ok(m) if m.is_dir() => {
                return Err(Error::failed(format!(
                    "{} is a directory; give write the path of a file (e.g. {}/name.ext)",
                    t.shown, t.shown
                )));
            }
            // A pipe or device would block or do something other than store text.
            Ok(m) if !m.is_file() => {
                return Err(Error::failed(format!(
                    "{} is not a regular file (a pipe, socket or device); write only writes files",
                    t.shown
                )));
            }
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(fsx::io_error(Self::ID, "write", &t.shown, &e)),
        };
        let mut created_dirs = false;
        if previous.is_none()
            && let Some(parent) = Path::new(&t.abs).parent()
            && !parent.exists()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                let shown_parent = warden_plugin_sdk::paths::relative_to(
                    &ctx.directory,
                    &parent.to_string_lossy(),
                );
                match e.kind() {
                    ErrorKind::AlreadyExists | ErrorKind::NotADirectory => Error::failed(format!(
                        "cannot create the folder {shown_parent}: a part of that path is an \
                         existing file; choose another path"
                    )),
                    _ => fsx::io_error(Self::ID, "create the folder", &shown_parent, &e),
                }
            })?;
            created_dirs = true;
        }
        std::fs::write(&t.abs, args.content.as_bytes())
            .map_err(|e| fsx::io_error(Self::ID, "write", &t.shown, &e))?;

        let bytes = args.content.len();
        let lines = count_lines(&args.content);
        let size = format!(
            "{}, {}",
            text::count(bytes, "byte", "bytes"),
            text::count(lines, "line", "lines")
        );
        let output = match previous {
            None => format!("Created {} ({size}).", t.shown),
            Some(before) => format!(
                "Overwrote {} ({size}; it had {}).",
                t.shown,
                text::count(before as usize, "byte", "bytes")
            ),
        };
        Ok(Output::text(output).title(t.shown.clone()).metadata(json!({
            "path": t.shown,
            "created": previous.is_none(),
            "bytes": bytes,
            "lines": lines,
            "previousBytes": previous,
            "createdDirs": created_dirs,
        })))
    }
}

warden_plugin_sdk::export_tools!(Write);

/// Lines as an editor counts them: a last line without a newline counts.
fn count_lines(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        s.matches('\n').count() + usize::from(!s.ends_with('\n'))
    }
}
