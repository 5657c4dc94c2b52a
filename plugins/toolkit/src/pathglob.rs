//! File globs as the model writes them (`*.rs`, `src/**/*.ts`,
//! `*.{ts,tsx}`), with the rule ripgrep and `.gitignore` use: a glob without
//! a `/` matches a file name at any depth; one with a `/` matches the path
//! relative to the searched directory. The syntax is the SDK's
//! [`glob`](warden_plugin_sdk::glob).

use warden_plugin_sdk::glob::Glob;

/// A compiled file glob.
#[derive(Debug, Clone)]
pub struct PathGlob {
    matcher: Glob,
    by_name: bool,
}

impl PathGlob {
    /// Compile `pattern`; the error says what is wrong with it.
    pub fn new(pattern: &str) -> Result<PathGlob, String> {
        let trimmed = pattern.trim();
        let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
        if trimmed.is_empty() {
            return Err("the glob is empty; give one such as **/*.rs or src/**/*.ts".into());
        }
        if trimmed.starts_with('/') {
            return Err(format!(
                "the glob {pattern:?} is absolute; globs are relative to the searched directory \
                 (pass the directory as `path`)"
            ));
        }
        if trimmed.split('/').any(|c| c == "..") {
            return Err(format!(
                "the glob {pattern:?} climbs out with `..`; pass the directory to search as `path` \
                 instead"
            ));
        }
        let matcher = Glob::new(trimmed).map_err(|e| format!("not a valid glob: {e}"))?;
        Ok(PathGlob {
            matcher,
            by_name: !trimmed.contains('/'),
        })
    }

    /// Whether the file at `rel` (relative to the searched directory,
    /// `/`-separated) whose name is `name` matches.
    pub fn matches(&self, rel: &str, name: &str) -> bool {
        if self.by_name {
            self.matcher.matches(name)
        } else {
            self.matcher.matches(rel)
        }
    }

    /// Whether the glob names `dir` as a literal path component, so a walk
    /// should enter that folder even if it is one normally passed over.
    pub fn names_dir(pattern: &str, dir: &str) -> bool {
        pattern.split('/').any(|c| c == dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_at_any_depth_and_paths_from_the_root() {
        let g = PathGlob::new("*.rs").unwrap();
        assert!(g.matches("src/deep/a.rs", "a.rs"));
        assert!(!g.matches("src/a.ts", "a.ts"));
        let g = PathGlob::new("src/**/*.rs").unwrap();
        assert!(g.matches("src/a.rs", "a.rs"));
        assert!(g.matches("src/x/y/a.rs", "a.rs"));
        assert!(!g.matches("lib/a.rs", "a.rs"));
        let g = PathGlob::new("src/*.rs").unwrap();
        assert!(!g.matches("src/x/a.rs", "a.rs"), "* does not cross /");
        let g = PathGlob::new("*.{ts,tsx}").unwrap();
        assert!(g.matches("a/b.tsx", "b.tsx"));
        let g = PathGlob::new("**/*.md").unwrap();
        assert!(g.matches("README.md", "README.md"));
    }

    #[test]
    fn bad_globs_are_refused_with_a_reason() {
        assert!(PathGlob::new("").unwrap_err().contains("empty"));
        assert!(PathGlob::new("/etc/*").unwrap_err().contains("absolute"));
        assert!(PathGlob::new("../*.rs").unwrap_err().contains(".."));
        assert!(
            PathGlob::new("a[")
                .unwrap_err()
                .contains("not a valid glob")
        );
        assert!(PathGlob::new("./*.rs").unwrap().matches("a.rs", "a.rs"));
    }
}
