//! The built-in `glob` tool: the files under a directory of the working
//! directory whose path matches a glob, most recently modified first (the
//! files a model is most likely after), names breaking ties so the order is
//! stable.

use std::time::SystemTime;

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json};
use warden_toolkit::fsx;
use warden_toolkit::pathglob::PathGlob;
use warden_toolkit::text::{Capped, MAX_OUTPUT_BYTES};
use warden_toolkit::walk::{self, Flow, HEAVY_DIRS, Kind, Order};

/// Files listed at most.
const LIMIT: usize = 100;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
}

struct Glob;

impl Tool for Glob {
    type Args = Args;
    const ID: &'static str = "glob";
    const DESCRIPTION: &'static str = "Find files by name or path with a glob, under a directory of \
        the working directory: `*.rs` matches file names at any depth, `src/**/*.ts` matches paths \
        from the searched directory, `*.{ts,tsx}` either. `*` stays within one folder, `**` spans \
        folders. Returns up to 100 paths relative to the working directory, most recently modified \
        first. Dependency and build folders (node_modules, .git, target, ...) are not searched \
        unless the glob or path names them. To search file contents use `grep`.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The glob, e.g. `**/*.rs`, `src/**/*.test.ts` or `Cargo.toml`."
                },
                "path": {
                    "type": "string",
                    "description": "The directory to search, relative to the working directory or absolute inside it (default: the working directory)."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        let glob = PathGlob::new(&args.pattern).map_err(Error::InvalidArguments)?;
        let root = fsx::search_root(ctx, args.path.as_deref())?;
        match std::fs::metadata(&root.abs) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::failed(format!(
                    "{} is a file, not a directory; pass a directory as path",
                    root.shown
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(fsx::io_error(Self::ID, "search", &root.shown, &e)),
        }
        let enter_heavy = HEAVY_DIRS
            .iter()
            .any(|d| PathGlob::names_dir(&args.pattern, d));

        let mut found: Vec<(SystemTime, String)> = Vec::new();
        let summary = walk::walk(
            std::path::Path::new(&root.abs),
            Order::DepthFirst,
            enter_heavy,
            |e| {
                if e.kind == Kind::File && glob.matches(&e.rel, &e.name) {
                    let modified = std::fs::metadata(&e.path)
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    let shown = warden_plugin_sdk::paths::relative_to(
                        &ctx.directory,
                        &e.path.to_string_lossy(),
                    );
                    found.push((modified, shown));
                }
                Flow::Continue
            },
        );
        found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));

        let total = found.len();
        let mut out = Capped::new(MAX_OUTPUT_BYTES);
        for (_, path) in found.iter().take(LIMIT) {
            out.push(path);
        }
        let shown = out.shown();
        let mut text = out.into_string();
        if total == 0 {
            text = format!(
                "No files match {:?} in {}.\n",
                args.pattern,
                root.described()
            );
        } else if shown < total || summary.hit_limit {
            text.push_str(&format!(
                "\n(showing the {shown} most recently modified of {total}{} matching files; use a \
                 more specific pattern or path to see the others)\n",
                if summary.hit_limit { "+" } else { "" }
            ));
        }
        if !summary.skipped.is_empty() {
            text.push_str(&format!(
                "(not searched: {}; name one in the glob or as path to search it)\n",
                summary.skipped_phrase(&root.shown)
            ));
        }
        Ok(Output::text(text)
            .title(format!("{} in {}", args.pattern, root.shown))
            .metadata(json!({
                "pattern": args.pattern,
                "path": root.shown,
                "count": total,
                "shown": shown,
                "truncated": shown < total || summary.hit_limit,
                "skipped": summary.skipped_shown(&root.shown),
            })))
    }
}

warden_plugin_sdk::export_tools!(Glob);
