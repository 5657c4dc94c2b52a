//! The built-in `edit` tool: replace an exact piece of a text file.
//!
//! The replacement must be unambiguous: `oldString` has to occur exactly
//! once, unless the model asks for every occurrence with `replaceAll`. Zero
//! or several matches are errors that say which, and where, so the model can
//! re-read the file and give more context instead of changing the wrong spot.
//! The file keeps its line endings: a model writes `\n`, and in a CRLF file
//! that is taken to mean `\r\n`.
//!
//! The file is rewritten in place (see the `write` tool for why not through
//! a rename).

use std::io::ErrorKind;

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json};
use warden_toolkit::fsx::{self, Target};
use warden_toolkit::text;

/// Files larger than this are refused: the tool holds the old and the new
/// content in memory at once, inside the plugin's memory grant.
const MAX_FILE_BYTES: u64 = 8 << 20;
/// Line numbers listed in a message or in the metadata.
const MAX_LINES_LISTED: usize = 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

struct Edit;

impl Tool for Edit {
    type Args = Args;
    const ID: &'static str = "edit";
    const DESCRIPTION: &'static str = "Replace text in a file of the working directory. `oldString` \
        must match the file exactly (whitespace and indentation included; read the file first) and \
        occur exactly once; add surrounding lines to make it unique, or set `replaceAll` to replace \
        every occurrence. Line endings follow the file's. An empty `oldString` creates a new file \
        with `newString` as its content. To replace a whole file, use `write`.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "filePath": {
                    "type": "string",
                    "description": "The file to change: relative to the working directory, or absolute inside it."
                },
                "oldString": {
                    "type": "string",
                    "description": "The exact text to replace."
                },
                "newString": {
                    "type": "string",
                    "description": "The text to put in its place (must differ from oldString)."
                },
                "replaceAll": {
                    "type": "boolean",
                    "description": "Replace every occurrence of oldString (default false: it must occur once)."
                }
            },
            "required": ["filePath", "oldString", "newString"],
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
        if args.old_string == args.new_string {
            return Err(Error::InvalidArguments(
                "oldString and newString are identical, so nothing would change; put the text to \
                 replace in oldString and what it should become in newString"
                    .into(),
            ));
        }
        let content = match load(&t)? {
            Some(content) => content,
            None if args.old_string.is_empty() => return create(ctx, &t, &args.new_string),
            None => {
                return Err(Error::failed(format!(
                    "file not found: {}. To create a new file, use write (or edit with an empty \
                     oldString)",
                    t.shown
                )));
            }
        };
        if args.old_string.is_empty() {
            if content.is_empty() {
                return finish(&t, &content, args.new_string.clone(), 1, vec![1], "lf");
            }
            return Err(Error::InvalidArguments(format!(
                "oldString is empty, but {} already has content; give the exact text to replace, \
                 or use write to replace the whole file",
                t.shown
            )));
        }

        let crlf = is_crlf(&content);
        let (old, new) = match_line_endings(&content, &args.old_string, &args.new_string, crlf);
        let at: Vec<usize> = content
            .match_indices(old.as_str())
            .map(|(i, _)| i)
            .collect();
        let lines: Vec<usize> = at.iter().map(|&i| line_of(&content, i)).collect();
        match at.len() {
            0 => return Err(not_found(&t.shown, &content, &args.old_string)),
            1 => {}
            n if !args.replace_all => {
                return Err(Error::failed(format!(
                    "oldString occurs {n} times in {} (at lines {}); include more of the \
                     surrounding lines so it matches exactly one place, or set replaceAll to true \
                     to replace all {n}",
                    t.shown,
                    listed(&lines)
                )));
            }
            _ => {}
        }
        let updated = if args.replace_all {
            content.replace(old.as_str(), &new)
        } else {
            content.replacen(old.as_str(), &new, 1)
        };
        let ending = if crlf { "crlf" } else { "lf" };
        finish(&t, &content, updated, at.len(), lines, ending)
    }
}

warden_plugin_sdk::export_tools!(Edit);

/// The file's text, or `None` if it does not exist.
fn load(t: &Target) -> Result<Option<String>, Error> {
    let meta = match std::fs::metadata(&t.abs) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fsx::io_error(Edit::ID, "open", &t.shown, &e)),
    };
    if meta.is_dir() {
        return Err(Error::failed(format!(
            "{} is a directory, not a file; give edit the path of a file inside it",
            t.shown
        )));
    }
    if !meta.is_file() {
        return Err(Error::failed(format!(
            "{} is not a regular file (a pipe, socket or device); edit only edits files",
            t.shown
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(Error::failed(format!(
            "{} is {} bytes; edit works on files up to {MAX_FILE_BYTES} bytes",
            t.shown,
            meta.len()
        )));
    }
    let bytes = std::fs::read(&t.abs).map_err(|e| fsx::io_error(Edit::ID, "read", &t.shown, &e))?;
    let head = &bytes[..bytes.len().min(text::SNIFF_BYTES)];
    if text::looks_binary(head) {
        return Err(Error::failed(format!(
            "{} is a binary file ({} bytes); edit only changes text files",
            t.shown,
            bytes.len()
        )));
    }
    String::from_utf8(bytes).map(Some).map_err(|_| {
        Error::failed(format!(
            "{} is not UTF-8 text; edit only changes UTF-8 text files",
            t.shown
        ))
    })
}

/// Create a missing file (and its folders) holding `content`.
fn create(ctx: &Context, t: &Target, content: &str) -> Result<Output, Error> {
    if let Some(parent) = std::path::Path::new(&t.abs).parent()
        && !parent.exists()
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            let shown =
                warden_plugin_sdk::paths::relative_to(&ctx.directory, &parent.to_string_lossy());
            fsx::io_error(Edit::ID, "create the folder", &shown, &e)
        })?;
    }
    std::fs::write(&t.abs, content).map_err(|e| fsx::io_error(Edit::ID, "write", &t.shown, &e))?;
    Ok(Output::text(format!(
        "Created {} ({}).",
        t.shown,
        text::count(content.len(), "byte", "bytes")
    ))
    .title(t.shown.clone())
    .metadata(json!({
        "path": t.shown,
        "created": true,
        "replacements": 0,
        "bytesBefore": 0,
        "bytesAfter": content.len(),
    })))
}

/// Write the new content and say what changed.
fn finish(
    t: &Target,
    before: &str,
    after: String,
    count: usize,
    lines: Vec<usize>,
    ending: &str,
) -> Result<Output, Error> {
    std::fs::write(&t.abs, after.as_bytes())
        .map_err(|e| fsx::io_error(Edit::ID, "write", &t.shown, &e))?;
    let what = if count == 1 {
        format!(
            "replaced 1 occurrence (line {})",
            lines.first().copied().unwrap_or(1)
        )
    } else {
        format!("replaced {count} occurrences (lines {})", listed(&lines))
    };
    let mut shown_lines = lines;
    shown_lines.truncate(MAX_LINES_LISTED);
    Ok(Output::text(format!("Edited {}: {what}.", t.shown))
        .title(t.shown.clone())
        .metadata(json!({
            "path": t.shown,
            "created": false,
            "replacements": count,
            "lines": shown_lines,
            "bytesBefore": before.len(),
            "bytesAfter": after.len(),
            "lineEnding": ending,
        })))
}

/// Most line breaks are CRLF.
fn is_crlf(content: &str) -> bool {
    let crlf = content.matches("\r\n").count();
    crlf > 0 && crlf * 2 >= content.matches('\n').count()
}

/// The strings to search for and put in: as given if that matches the file,
/// else with their line breaks converted to the file's.
fn match_line_endings(content: &str, old: &str, new: &str, crlf: bool) -> (String, String) {
    if content.contains(old) {
        return (old.to_string(), new.to_string());
    }
    let to_lf = |s: &str| s.replace("\r\n", "\n");
    let convert = |s: &str| {
        if crlf {
            to_lf(s).replace('\n', "\r\n")
        } else {
            to_lf(s)
        }
    };
    (convert(old), convert(new))
}

/// 1-based line number of byte offset `at`.
fn line_of(content: &str, at: usize) -> usize {
    content.as_bytes()[..at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn listed(lines: &[usize]) -> String {
    let mut s: Vec<String> = lines
        .iter()
        .take(MAX_LINES_LISTED)
        .map(|l| l.to_string())
        .collect();
    if lines.len() > MAX_LINES_LISTED {
        s.push(format!("… {} more", lines.len() - MAX_LINES_LISTED));
    }
    s.join(", ")
}

/// oldString is not in the file: say so, and point at lines that hold its
/// first line (whitespace aside), since a near miss is the usual cause.
fn not_found(shown: &str, content: &str, old: &str) -> Error {
    let first = old.lines().map(str::trim).find(|l| !l.is_empty());
    let near: Vec<usize> = match first {
        Some(first) => content
            .lines()
            .enumerate()
            .filter(|(_, l)| squash(l).contains(&squash(first)))
            .map(|(i, _)| i + 1)
            .take(5)
            .collect(),
        None => Vec::new(),
    };
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(
            " Its first line appears, perhaps with other whitespace, at line {}; read the file \
             there and copy the text exactly.",
            listed(&near)
        )
    };
    Error::failed(format!(
        "oldString was not found in {shown}. It must match the file exactly, including \
         whitespace, indentation and line breaks; read the file and copy the text to replace.{hint}"
    ))
}

/// A line with all whitespace runs removed, for the near-miss hint.
fn squash(line: &str) -> String {
    line.split_whitespace().collect()
}
