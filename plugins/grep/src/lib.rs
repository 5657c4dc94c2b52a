//! The built-in `grep` tool: a regular expression searched line by line in
//! the text files under a directory (or in one file) of the working
//! directory, reported as `path:line: text`.
//!
//! Binary files are skipped, long lines are cut, and the report is capped;
//! the search still runs to the end so the model learns how many matches
//! there are in all and can narrow the search.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json, paths};
use warden_toolkit::fsx::{self, Target};
use warden_toolkit::pathglob::PathGlob;
use warden_toolkit::text::{self, Capped, MAX_OUTPUT_BYTES};
use warden_toolkit::walk::{self, Flow, HEAVY_DIRS, Kind, Order};

/// Matching lines reported at most.
const LIMIT: usize = 100;
/// Characters kept of a matching line.
const MAX_MATCH_CHARS: usize = 500;
/// Compiled-regex budget: a pattern that needs more is refused instead of
/// exhausting the plugin's memory grant.
const REGEX_SIZE_LIMIT: usize = 2 << 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
    include: Option<String>,
}

struct Grep;

impl Tool for Grep {
    type Args = Args;
    const ID: &'static str = "grep";
    const DESCRIPTION: &'static str = "Search file contents with a regular expression (Rust regex \
        syntax: `fn\\s+main`, `(?i)todo`, `log\\.(warn|error)`), line by line, in the text files \
        under a directory of the working directory or in one file. `include` keeps only files whose \
        name or path matches a glob (`*.rs`, `*.{ts,tsx}`, `src/**/*.py`). Returns `path:line: text` \
        for up to 100 matching lines, in directory order, with the total count. Binary files and \
        dependency/build folders (node_modules, .git, target, ...) are skipped. To find files by \
        name use `glob`.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "The directory or file to search, relative to the working directory or absolute inside it (default: the working directory)."
                },
                "include": {
                    "type": "string",
                    "description": "Only search files matching this glob, e.g. `*.rs` or `*.{ts,tsx}`."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        if args.pattern.is_empty() {
            return Err(Error::InvalidArguments(
                "pattern is empty; give a regular expression to search for, e.g. `TODO` or \
                 `fn\\s+\\w+`"
                    .into(),
            ));
        }
        let regex = RegexBuilder::new(&args.pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| {
                Error::InvalidArguments(format!(
                    "pattern is not a valid regular expression: {e}\nTo match characters such as \
                     ( ) [ ] {{ }} . * + ? | \\ literally, put a backslash before each."
                ))
            })?;
        let include = match args.include.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(g) => Some(
                PathGlob::new(g)
                    .map_err(|e| Error::InvalidArguments(format!("in include: {e}")))?,
            ),
        };
        let root = fsx::search_root(ctx, args.path.as_deref())?;
        let meta = std::fs::metadata(&root.abs)
            .map_err(|e| fsx::io_error(Self::ID, "search", &root.shown, &e))?;

        let mut s = Search::new(ctx, &regex);
        let mut skipped_note = String::new();
        let mut skipped = Vec::new();
        if meta.is_dir() {
            let enter_heavy = include
                .as_ref()
                .zip(args.include.as_deref())
                .is_some_and(|(_, g)| HEAVY_DIRS.iter().any(|d| PathGlob::names_dir(g, d)));
            let summary = walk::walk(Path::new(&root.abs), Order::DepthFirst, enter_heavy, |e| {
                if e.kind == Kind::File
                    && include.as_ref().is_none_or(|g| g.matches(&e.rel, &e.name))
                {
                    s.file(&e.path);
                }
                Flow::Continue
            });
            s.hit_walk_limit = summary.hit_limit;
            if !summary.skipped.is_empty() {
                skipped_note = format!(
                    "(not searched: {}; pass one as path to search it)\n",
                    summary.skipped_phrase(&root.shown)
                );
                skipped = summary.skipped_shown(&root.shown);
            }
        } else {
            s.single(&root)?;
        }
        Ok(s.report(&args, &root, &skipped_note, skipped))
    }
}

warden_plugin_sdk::export_tools!(Grep);

/// One search's findings.
struct Search<'a> {
    ctx: &'a Context,
    regex: &'a Regex,
    out: Capped,
    matches: usize,
    files: usize,
    binary: usize,
    unreadable: usize,
    hit_walk_limit: bool,
}

impl<'a> Search<'a> {
    fn new(ctx: &'a Context, regex: &'a Regex) -> Self {
        Search {
            ctx,
            regex,
            out: Capped::new(MAX_OUTPUT_BYTES),
            matches: 0,
            files: 0,
            binary: 0,
            unreadable: 0,
            hit_walk_limit: false,
        }
    }

    /// The path given was a file: search it, and say so if it cannot be.
    fn single(&mut self, t: &Target) -> Result<(), Error> {
        let mut f =
            File::open(&t.abs).map_err(|e| fsx::io_error(Grep::ID, "search", &t.shown, &e))?;
        let mut head = Vec::new();
        (&mut f)
            .take(text::SNIFF_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(|e| fsx::io_error(Grep::ID, "read", &t.shown, &e))?;
        if text::looks_binary(&head) {
            return Err(Error::failed(format!(
                "{} is a binary file; grep searches text files",
                t.shown
            )));
        }
        self.lines(&t.shown, head, f);
        Ok(())
    }

    /// Search one file found by the walk; binary or unreadable files are
    /// counted, not reported one by one.
    fn file(&mut self, path: &Path) {
        let Ok(mut f) = File::open(path) else {
            self.unreadable += 1;
            return;
        };
        let mut head = Vec::new();
        if (&mut f)
            .take(text::SNIFF_BYTES as u64)
            .read_to_end(&mut head)
            .is_err()
        {
            self.unreadable += 1;
            return;
        }
        if text::looks_binary(&head) {
            self.binary += 1;
            return;
        }
        let shown = paths::relative_to(&self.ctx.directory, &path.to_string_lossy());
        self.lines(&shown, head, f);
    }

    fn lines(&mut self, shown: &str, head: Vec<u8>, rest: File) {
        let mut reader = BufReader::new(std::io::Cursor::new(head).chain(rest));
        let mut buf = Vec::new();
        let mut number = 0usize;
        let mut found_here = false;
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    self.unreadable += 1;
                    break;
                }
            }
            number += 1;
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            if !self.regex.is_match(line) {
                continue;
            }
            self.matches += 1;
            found_here = true;
            if self.matches <= LIMIT {
                let text = text::cut_line(line, MAX_MATCH_CHARS);
                self.out.push(&format!("{shown}:{number}: {text}"));
            }
        }
        if found_here {
            self.files += 1;
        }
    }

    fn report(
        self,
        args: &Args,
        root: &Target,
        skipped_note: &str,
        skipped: Vec<String>,
    ) -> Output {
        let shown = self.out.shown();
        let truncated = shown < self.matches || self.hit_walk_limit;
        let mut body = self.out.into_string();
        if self.matches == 0 {
            body = format!(
                "No matches for {:?} in {}.\n",
                args.pattern,
                root.described()
            );
        } else if truncated {
            body.push_str(&format!(
                "\n(showing the first {shown} of {}{} matching lines in {}; narrow the pattern, \
                 path or include to see the rest)\n",
                self.matches,
                if self.hit_walk_limit { "+" } else { "" },
                text::count(self.files, "file", "files")
            ));
        }
        if self.binary > 0 {
            body.push_str(&format!(
                "({} skipped)\n",
                text::count(self.binary, "binary file", "binary files")
            ));
        }
        if self.unreadable > 0 {
            body.push_str(&format!(
                "({} could not be read: outside this tool's grant, or gone)\n",
                text::count(self.unreadable, "file", "files")
            ));
        }
        body.push_str(skipped_note);
        Output::text(body)
            .title(format!("{} in {}", args.pattern, root.shown))
            .metadata(json!({
                "pattern": args.pattern,
                "path": root.shown,
                "include": args.include,
                "matches": self.matches,
                "files": self.files,
                "shown": shown,
                "truncated": truncated,
                "binarySkipped": self.binary,
                "skipped": skipped,
            }))
    }
}
