//! The tool-id patterns of a hook, compiled once. The patterns are globs
//! (`*`, `?`, `[abc]`, `{write,edit}`), as `wit/v0.1.0/plugin.wit` promises; one
//! that is not a valid glob matches nothing and is logged when the hook is
//! loaded, not at every call.

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A hook stage's tool-id globs, as the hook gave them (the slice it
/// derefs to), with their matcher.
#[derive(Clone)]
pub struct ToolGlobs {
    patterns: Vec<String>,
    matcher: Arc<GlobSet>,
}

impl ToolGlobs {
    pub fn new(patterns: Vec<String>) -> ToolGlobs {
        let mut set = GlobSetBuilder::new();
        for p in &patterns {
            match Glob::new(p) {
                Ok(glob) => {
                    set.add(glob);
                }
                Err(e) => {
                    tracing::warn!(pattern = %p, "a hook's tool pattern is not a valid glob: {e}")
                }
            }
        }
        // Every glob in the set was already parsed; building cannot fail on
        // them, but an empty set is the safe answer if it ever does.
        let matcher = set.build().unwrap_or_else(|_| GlobSet::empty());
        ToolGlobs {
            patterns,
            matcher: Arc::new(matcher),
        }
    }

    /// Whether `tool` matches one of the patterns.
    pub fn matches(&self, tool: &str) -> bool {
        self.matcher.is_match(tool)
    }
}

impl From<Vec<String>> for ToolGlobs {
    fn from(patterns: Vec<String>) -> Self {
        ToolGlobs::new(patterns)
    }
}

impl std::ops::Deref for ToolGlobs {
    type Target = [String];
    fn deref(&self) -> &[String] {
        &self.patterns
    }
}

impl std::fmt::Debug for ToolGlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.patterns.fmt(f)
    }
}

impl PartialEq for ToolGlobs {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl Serialize for ToolGlobs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.patterns.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolGlobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(ToolGlobs::new)
    }
}

#[cfg(test)]
mod tests {
    use super::ToolGlobs;

    fn globs(p: &[&str]) -> ToolGlobs {
        ToolGlobs::new(p.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn hook_patterns_are_globs_with_alternatives_and_classes() {
        assert!(globs(&["{write,edit}"]).matches("write"));
        assert!(globs(&["{write,edit}"]).matches("edit"));
        assert!(!globs(&["{write,edit}"]).matches("read"));
        assert!(globs(&["*"]).matches("anything"));
        assert!(globs(&["re?d"]).matches("read"));
        assert!(globs(&["[rw]*"]).matches("write"));
        assert!(!globs(&["[rw]*"]).matches("edit"));
        assert!(!globs(&[]).matches("read"));
    }

    #[test]
    fn an_invalid_pattern_matches_nothing_and_leaves_the_others_working() {
        let g = globs(&["{unclosed", "read"]);
        assert!(!g.matches("unclosed"));
        assert!(!g.matches("{unclosed"));
        assert!(g.matches("read"));
        assert_eq!(&*g, ["{unclosed", "read"]);
    }

    #[test]
    fn globs_serialize_as_the_patterns_given() {
        let g = globs(&["write", "{a,b}"]);
        let text = serde_json::to_string(&g).unwrap();
        assert_eq!(text, r#"["write","{a,b}"]"#);
        let back: ToolGlobs = serde_json::from_str(&text).unwrap();
        assert_eq!(back, g);
        assert!(back.matches("b"));
    }
}
