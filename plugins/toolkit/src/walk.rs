//! Walking a directory tree inside the working directory.
//!
//! Symlinks are reported, never followed: a link may lead out of the working
//! directory (the sandbox would refuse it anyway) or into a loop. Folders
//! that hold dependencies, build output or version-control data are reported
//! once and not entered unless the caller asks, because one `node_modules`
//! can hold more files than a model could ever read.

use std::collections::VecDeque;
use std::fs::FileType;
use std::path::{Path, PathBuf};

/// Folder names not entered by default.
pub const HEAVY_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "target",
    "dist",
    "build",
    "vendor",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".next",
    ".nuxt",
    ".cache",
    ".gradle",
    ".idea",
    ".vscode",
    "coverage",
    "zig-out",
    ".zig-cache",
];

/// Entries visited at most by one walk, whatever the caller does with them:
/// a bound on time and memory for huge trees.
pub const MAX_VISITS: usize = 100_000;

/// What an entry is, without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Kind {
    fn of(t: FileType) -> Kind {
        if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        }
    }
}

/// One entry under the walked root.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Absolute path.
    pub path: PathBuf,
    /// Path relative to the walked root, `/`-separated.
    pub rel: String,
    /// The file name.
    pub name: String,
    pub kind: Kind,
    /// 1 for the root's children.
    pub depth: usize,
    /// A heavy folder (see [`HEAVY_DIRS`]) that will not be entered.
    pub heavy: bool,
}

/// What the visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on (and enter this entry if it is a directory).
    Continue,
    /// Go on, but do not enter this directory.
    Skip,
    /// Stop the walk.
    Stop,
}

/// The order entries are visited in. Both sort names within a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Each directory's contents right after it (like `find`).
    DepthFirst,
    /// Level by level, so a cap keeps the top of the tree whole.
    BreadthFirst,
}

/// How a walk went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Entries visited.
    pub visited: usize,
    /// Heavy folders passed over, relative to the root.
    pub skipped: Vec<String>,
    /// Directories that could not be read.
    pub unreadable: Vec<String>,
    /// The walk hit [`MAX_VISITS`].
    pub hit_limit: bool,
}

/// Walk `root` in `order`, calling `visit` for every entry below it (not for
/// the root itself). `enter_heavy` enters heavy folders too.
pub fn walk(
    root: &Path,
    order: Order,
    enter_heavy: bool,
    mut visit: impl FnMut(&Entry) -> Flow,
) -> Summary {
    let mut summary = Summary::default();
    let mut pending: VecDeque<Entry> = VecDeque::new();
    if !read_children(root, "", 0, enter_heavy, order, &mut pending, &mut summary) {
        return summary;
    }
    while let Some(entry) = pending.pop_front() {
        if summary.visited >= MAX_VISITS {
            summary.hit_limit = true;
            break;
        }
        summary.visited += 1;
        match visit(&entry) {
            Flow::Stop => break,
            Flow::Skip => continue,
            Flow::Continue => {}
        }
        if entry.kind != Kind::Dir {
            continue;
        }
        if entry.heavy {
            summary.skipped.push(entry.rel.clone());
            continue;
        }
        read_children(
            &entry.path,
            &entry.rel,
            entry.depth,
            enter_heavy,
            order,
            &mut pending,
            &mut summary,
        );
    }
    summary
}

/// Queue the sorted children of `dir`; false if it could not be read.
fn read_children(
    dir: &Path,
    rel: &str,
    depth: usize,
    enter_heavy: bool,
    order: Order,
    pending: &mut VecDeque<Entry>,
    summary: &mut Summary,
) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        summary.unreadable.push(if rel.is_empty() {
            ".".into()
        } else {
            rel.into()
        });
        return false;
    };
    let mut children: Vec<Entry> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let kind = e.file_type().map(Kind::of).unwrap_or(Kind::Other);
            let heavy = kind == Kind::Dir && !enter_heavy && HEAVY_DIRS.contains(&name.as_str());
            Some(Entry {
                path: e.path(),
                rel: if rel.is_empty() {
                    name.clone()
                } else {
                    format!("{rel}/{name}")
                },
                name,
                kind,
                depth: depth + 1,
                heavy,
            })
        })
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    match order {
        Order::BreadthFirst => pending.extend(children),
        Order::DepthFirst => {
            for c in children.into_iter().rev() {
                pending.push_front(c);
            }
        }
    }
    true
}

impl Summary {
    /// The heavy folders passed over, relative to the working directory
    /// (`root_shown` is the walked root as shown to the model), at most ten.
    pub fn skipped_shown(&self, root_shown: &str) -> Vec<String> {
        self.skipped
            .iter()
            .take(10)
            .map(|s| {
                if root_shown == "." {
                    s.clone()
                } else {
                    format!("{root_shown}/{s}")
                }
            })
            .collect()
    }

    /// The same as one phrase: `a, b and 3 more`.
    pub fn skipped_phrase(&self, root_shown: &str) -> String {
        let shown = self.skipped_shown(root_shown);
        let rest = self.skipped.len().saturating_sub(shown.len());
        if rest == 0 {
            shown.join(", ")
        } else {
            format!("{} and {rest} more", shown.join(", "))
        }
    }
}
