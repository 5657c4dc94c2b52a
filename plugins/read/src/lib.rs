//! The built-in `read` tool: a text file from the session's working
//! directory, line-numbered, from an optional line offset, with a cap on
//! lines, line length and total size so one call can never flood the model's
//! context.
//!
//! It sees only what the host mounted (the working directory, read-only by
//! default); paths are resolved and checked against the working directory
//! before anything is opened.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read};

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json, paths};

/// Lines shown when the model gives no `limit`.
const DEFAULT_LIMIT: u64 = 2000;
/// Characters kept of one line.
const MAX_LINE_CHARS: usize = 2000;
/// Bytes of output, whatever the limit says.
const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// How much of the file's start is inspected to tell text from binary.
const SNIFF_BYTES: usize = 8192;

const BINARY_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "bmp", "ico", "webp", "pdf", "zip", "gz", "tgz", "bz2", "xz",
    "7z", "tar", "jar", "class", "exe", "dll", "so", "dylib", "o", "a", "wasm", "bin", "dat",
    "pyc", "sqlite", "db", "woff", "woff2", "ttf", "otf", "mp3", "mp4", "mov", "avi", "ogg", "wav",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    file_path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

struct Read_;

impl Tool for Read_ {
    type Args = Args;
    const ID: &'static str = "read";
    const DESCRIPTION: &'static str = "Read a text file from the working directory. Returns the lines \
        numbered from 1 (`<number><TAB><line>`). By default up to 2000 lines from the start; use \
        `offset` (first line to show, from 1) and `limit` (how many lines) for long files. Lines longer \
        than 2000 characters are cut, and the whole output is capped at 50 KB. Binary files and \
        directories are refused.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "filePath": {
                    "type": "string",
                    "description": "The file to read: relative to the working directory, or absolute inside it."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The line number to start from (1 is the first line; 0 means 1)."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How many lines to read (default 2000)."
                }
            },
            "required": ["filePath"],
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        let path = ctx.resolve(&args.file_path)?;
        let shown = paths::relative_to(&ctx.directory, &path);
        let start = args.offset.unwrap_or(1).max(1);
        let limit = match args.limit {
            Some(0) => return Err(Error::InvalidArguments("limit must be at least 1".into())),
            Some(n) => n,
            None => DEFAULT_LIMIT,
        };

        let meta = std::fs::metadata(&path).map_err(|e| open_error(ctx, &path, &shown, e))?;
        if meta.is_dir() {
            return Err(Error::failed(format!(
                "{shown} is a directory, not a file; give read the path of a file inside it"
            )));
        }
        // Opening a pipe would wait for a writer that may never come.
        if !meta.is_file() {
            return Err(Error::failed(format!(
                "{shown} is not a regular file (a pipe, socket or device); read only reads files"
            )));
        }
        if let Some(ext) = std::path::Path::new(&path)
            .extension()
            .and_then(|e| e.to_str())
            && BINARY_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
        {
            return Err(binary(&shown, meta.len()));
        }

        let mut file = File::open(&path).map_err(|e| open_error(ctx, &path, &shown, e))?;
        let mut head = vec![0u8; SNIFF_BYTES];
        let n = read_up_to(&mut file, &mut head)
            .map_err(|e| Error::failed(format!("cannot read {shown}: {e}")))?;
        head.truncate(n);
        if looks_binary(&head) {
            return Err(binary(&shown, meta.len()));
        }

        let reader = BufReader::new(std::io::Cursor::new(head).chain(file));
        render(reader, &shown, start, limit)
    }
}

warden_plugin_sdk::export_tools!(Read_);

fn render(mut reader: impl BufRead, shown: &str, start: u64, limit: u64) -> Result<Output, Error> {
    let mut out = String::new();
    let mut total: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut capped = false;
    let mut cut_lines = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::failed(format!("cannot read {shown}: {e}")))?;
        if n == 0 {
            break;
        }
        total += 1;
        if total < start || total >= start.saturating_add(limit) || capped {
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        let mut rendered = if line.chars().count() > MAX_LINE_CHARS {
            cut_lines += 1;
            let kept: String = line.chars().take(MAX_LINE_CHARS).collect();
            format!("{total:>6}\t{kept}… (line cut at {MAX_LINE_CHARS} characters)\n")
        } else {
            format!("{total:>6}\t{line}\n")
        };
        if out.len() + rendered.len() > MAX_OUTPUT_BYTES {
            capped = true;
            rendered.clear();
        }
        out.push_str(&rendered);
        if !capped {
            last_shown = total;
        }
    }

    if total == 0 {
        return Ok(Output::text(format!("({shown} is empty)"))
            .title(shown)
            .metadata(json!({"path": shown, "totalLines": 0, "truncated": false})));
    }
    if start > total {
        return Err(Error::InvalidArguments(format!(
            "offset {start} is past the end of {shown}, which has {total} lines"
        )));
    }
    let more = last_shown < total;
    if more {
        let why = if capped {
            "output capped at 50 KB; "
        } else {
            ""
        };
        out.push_str(&format!(
            "\n({why}showing lines {start}-{last_shown} of {total}; use offset={} to read on)\n",
            last_shown + 1
        ));
    }
    Ok(Output::text(out).title(shown).metadata(json!({
        "path": shown,
        "startLine": start,
        "endLine": last_shown,
        "totalLines": total,
        "truncated": more,
        "linesCut": cut_lines,
    })))
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// NUL anywhere in the sniffed head, or mostly control bytes: not text.
fn looks_binary(head: &[u8]) -> bool {
    if head.contains(&0) {
        return true;
    }
    if head.is_empty() {
        return false;
    }
    let control = head
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0c | 0x1b))
        .count();
    control * 10 > head.len() * 3
}

fn binary(shown: &str, size: u64) -> Error {
    Error::failed(format!(
        "{shown} is a binary file ({size} bytes); read only shows text files"
    ))
}

fn open_error(ctx: &Context, path: &str, shown: &str, e: std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::NotFound => {
            let hint = suggestions(ctx, path);
            Error::failed(format!("file not found: {shown}{hint}"))
        }
        // The sandbox refusing a path (e.g. a symlink out of the working
        // directory) is a failure of this call, not a permission question.
        ErrorKind::PermissionDenied => Error::failed(format!(
            "{shown} cannot be opened: it leads outside what this tool was granted"
        )),
        _ => Error::failed(format!("cannot open {shown}: {e}")),
    }
}

/// Names in the same directory that look like what was meant.
fn suggestions(ctx: &Context, path: &str) -> String {
    let p = std::path::Path::new(path);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return String::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let wanted = name.to_lowercase();
    let stem = wanted.split('.').next().unwrap_or(&wanted).to_string();
    let mut close: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            let l = n.to_lowercase();
            let their_stem = l.split('.').next().unwrap_or("");
            !stem.is_empty()
                && !their_stem.is_empty()
                && (l.contains(&stem) || wanted.contains(their_stem))
        })
        .collect();
    close.sort();
    close.truncate(3);
    if close.is_empty() {
        return String::new();
    }
    let base = paths::relative_to(&ctx.directory, &dir.to_string_lossy());
    let shown: Vec<String> = close
        .iter()
        .map(|n| {
            if base == "." {
                n.clone()
            } else {
                format!("{base}/{n}")
            }
        })
        .collect();
    format!(". Did you mean: {}?", shown.join(", "))
}
