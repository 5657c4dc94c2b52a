//! The built-in `list` tool: the tree under a directory of the working
//! directory, level by level, so that when the tree is bigger than the cap
//! the model still sees its top whole and knows which folders hold more.
//!
//! Dependency and build folders (`node_modules`, `.git`, `target`, ...) are
//! shown but not entered; listing one by path shows what is inside.

use std::collections::BTreeMap;

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json};
use warden_toolkit::fsx;
use warden_toolkit::pathglob::PathGlob;
use warden_toolkit::text::{Capped, MAX_OUTPUT_BYTES};
use warden_toolkit::walk::{self, Entry, Flow, Kind, Order};

/// Entries shown at most.
const LIMIT: usize = 200;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    path: Option<String>,
    #[serde(default)]
    ignore: Vec<String>,
}

struct List;

impl Tool for List {
    type Args = Args;
    const ID: &'static str = "list";
    const DESCRIPTION: &'static str = "List the files and folders under a directory of the working \
        directory as a tree, folders first, names sorted. Shows up to 200 entries, level by level; \
        folders with more inside are marked. Dependency and build folders (node_modules, .git, \
        target, dist, ...) are shown but not entered: list one by its path to see inside. Use \
        `ignore` to leave out names or paths (globs such as `*.log` or `docs/**`). To find files by \
        name use `glob`; to search contents use `grep`.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to list, relative to the working directory or absolute inside it (default: the working directory)."
                },
                "ignore": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Globs of names or paths (relative to the listed directory) to leave out."
                }
            },
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        let root = fsx::search_root(ctx, args.path.as_deref())?;
        let ignore = ignore_set(&args.ignore)?;
        match std::fs::metadata(&root.abs) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::failed(format!(
                    "{} is a file, not a directory; use read to see its content",
                    root.shown
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(fsx::io_error(Self::ID, "list", &root.shown, &e)),
        }

        let mut shown: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        let mut count = 0usize;
        let mut more: BTreeMap<String, usize> = BTreeMap::new();
        let summary = walk::walk(
            std::path::Path::new(&root.abs),
            Order::BreadthFirst,
            false,
            |e| {
                if ignore.iter().any(|g| g.matches(&e.rel, &e.name)) {
                    return Flow::Skip;
                }
                let parent = parent_of(&e.rel);
                if count >= LIMIT {
                    // Counted under its parent, which is shown: the model
                    // learns where the rest is without a second walk.
                    *more.entry(parent).or_default() += 1;
                    return Flow::Skip;
                }
                count += 1;
                shown.entry(parent).or_default().push(e.clone());
                Flow::Continue
            },
        );
        if !summary.unreadable.is_empty() && summary.visited == 0 {
            return Err(Error::failed(format!(
                "cannot list {}: it is outside what `list` was granted",
                root.shown
            )));
        }

        let header = if root.shown == "." {
            "./".to_string()
        } else {
            format!("{}/", root.shown)
        };
        let mut out = Capped::new(MAX_OUTPUT_BYTES);
        out.push(&header);
        render("", 1, &shown, &more, &mut out);
        let hidden: usize = more.values().sum();
        let mut text = out.into_string();
        if count == 0 {
            text = format!(
                "{header}\n({} is empty{})\n",
                root.shown,
                if args.ignore.is_empty() {
                    ""
                } else {
                    " once ignored names are left out"
                }
            );
        }
        if hidden > 0 || summary.hit_limit {
            text.push_str(&format!(
                "\n(showing {count} entries; {hidden}{} more are in the folders marked \"…\". List a \
                 folder by its path, or pass ignore patterns, to see the rest)\n",
                if summary.hit_limit { "+" } else { "" }
            ));
        }
        Ok(Output::text(text)
            .title(root.shown.clone())
            .metadata(json!({
                "path": root.shown,
                "entries": count,
                "more": hidden,
                "truncated": hidden > 0 || summary.hit_limit,
                "skipped": summary.skipped_shown(&root.shown),
            })))
    }
}

warden_plugin_sdk::export_tools!(List);

fn ignore_set(globs: &[String]) -> Result<Vec<PathGlob>, Error> {
    globs
        .iter()
        .map(|g| PathGlob::new(g).map_err(|e| Error::InvalidArguments(format!("in ignore: {e}"))))
        .collect()
}

fn parent_of(rel: &str) -> String {
    rel.rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

/// The children of `rel` (relative to the listed root), folders first, at
/// indent `depth`, with their own children below them.
fn render(
    rel: &str,
    depth: usize,
    shown: &BTreeMap<String, Vec<Entry>>,
    more: &BTreeMap<String, usize>,
    out: &mut Capped,
) {
    let indent = "  ".repeat(depth);
    let mut children: Vec<&Entry> = shown
        .get(rel)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    children.sort_by_key(|e| (e.kind != Kind::Dir, e.name.as_str()));
    for e in children {
        let line = match e.kind {
            Kind::Dir if e.heavy => format!("{indent}{}/ (not entered)", e.name),
            Kind::Dir => format!("{indent}{}/", e.name),
            Kind::Symlink => match std::fs::read_link(&e.path) {
                Ok(to) => format!("{indent}{} -> {}", e.name, to.display()),
                Err(_) => format!("{indent}{} (symlink)", e.name),
            },
            Kind::File | Kind::Other => format!("{indent}{}", e.name),
        };
        if !out.push(&line) {
            return;
        }
        if e.kind == Kind::Dir && !e.heavy {
            render(&e.rel, depth + 1, shown, more, out);
        }
    }
    if let Some(n) = more.get(rel) {
        out.push(&format!("{indent}… {n} more"));
    }
}
