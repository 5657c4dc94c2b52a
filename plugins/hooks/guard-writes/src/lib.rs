//! Example hook `guard-writes`: a `tool.execute.before` hook on `write` and
//! `edit` that lets a call through only if its `filePath` is one the
//! operator allows.
//!
//! The allowed paths come from the environment variable
//! `WARDEN_GUARD_ALLOW`, which the operator grants the plugin
//! (`"grants": {"env": ["WARDEN_GUARD_ALLOW"]}`): comma-separated globs
//! relative to the working directory, e.g. `src/**,docs/**,*.md`. A glob
//! without a `/` matches a file name at any depth (`*.md`); one with a `/`
//! matches the path from the working directory (`src/**`).
//!
//! - Set: only matching paths may be written. Set but empty: nothing may be.
//! - Not set (or not granted): every path inside the working directory may
//!   be written except [`PROTECTED`] — version-control internals, `.env`
//!   files and warden's own config, which an agent should not change on its
//!   own and which would let it loosen its own rules.
//!
//! Paths outside the working directory are always blocked (the tools refuse
//! them too; the hook does not rely on that). A glob that does not parse
//! blocks every call and names the glob: a guard that cannot read its rules
//! fails closed.

use warden_plugin_sdk::glob::Glob;
use warden_plugin_sdk::{Before, Context, Hook, Value, paths};

/// The variable holding the allowed globs.
pub const ALLOW_VAR: &str = "WARDEN_GUARD_ALLOW";

/// Blocked when [`ALLOW_VAR`] is not set: globs over the path from the
/// working directory.
pub const PROTECTED: &[&str] = &[
    ".git/**",
    "**/.git/**",
    ".env",
    ".env.*",
    "**/.env",
    "**/.env.*",
    "warden.json",
];

struct GuardWrites;

impl Hook for GuardWrites {
    fn before_tools() -> Vec<String> {
        vec!["write".into(), "edit".into()]
    }

    fn before(ctx: &Context, tool: &str, args: Value) -> Before {
        // A missing or mistyped path is the tool's to refuse, with its own
        // message about its parameters.
        let Some(path) = args.get("filePath").and_then(Value::as_str) else {
            return Before::Allow;
        };
        let abs = match paths::resolve_within(&ctx.directory, path) {
            Ok(abs) => abs,
            Err(why) => return Before::Block(why),
        };
        let rel = paths::relative_to(&ctx.directory, &abs);
        match std::env::var(ALLOW_VAR) {
            Ok(list) => allow_listed(tool, &rel, &list),
            Err(_) => not_protected(tool, &rel),
        }
    }
}

warden_plugin_sdk::export_hook!(GuardWrites);

/// Only what the operator's list matches.
fn allow_listed(tool: &str, rel: &str, list: &str) -> Before {
    let globs: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    if globs.is_empty() {
        return Before::Block(format!(
            "{ALLOW_VAR} is set and empty, so no file may be changed; `{tool}` on {rel} was not run"
        ));
    }
    for g in &globs {
        match matches(g, rel) {
            Ok(true) => return Before::Allow,
            Ok(false) => {}
            Err(e) => {
                return Before::Block(format!(
                    "{ALLOW_VAR} holds a glob that cannot be used ({e}); the operator must fix it \
                     before any file can be changed"
                ));
            }
        }
    }
    Before::Block(format!(
        "{rel} may not be changed: files may be written only where {} match; choose a path there",
        globs.join(", ")
    ))
}

/// Everything but the protected paths (globs over the whole relative path,
/// so `warden.json` is only the one at the top).
fn not_protected(tool: &str, rel: &str) -> Before {
    for g in PROTECTED {
        if Glob::new(g).map_or(true, |g| g.matches(rel)) {
            return Before::Block(format!(
                "{rel} is protected (it matches {g}); `{tool}` may not change version-control \
                 data, .env files or warden's config"
            ));
        }
    }
    Before::Allow
}

/// A glob without `/` matches the file name at any depth; one with `/`,
/// the whole relative path.
fn matches(glob: &str, rel: &str) -> Result<bool, String> {
    let glob = glob.strip_prefix("./").unwrap_or(glob);
    let g = Glob::new(glob)?;
    Ok(if glob.contains('/') {
        g.matches(rel)
    } else {
        g.matches(rel.rsplit('/').next().unwrap_or(rel))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_without_a_slash_match_names_at_any_depth() {
        assert_eq!(matches("*.md", "docs/a/b.md"), Ok(true));
        assert_eq!(matches("src/**", "src/a/b.rs"), Ok(true));
        assert_eq!(matches("./src/**", "src/a.rs"), Ok(true));
        assert_eq!(matches("src/**", "lib/a.rs"), Ok(false));
        assert!(matches("src/[", "src/a").is_err());
    }

    #[test]
    fn an_allow_list_lets_through_only_what_it_matches() {
        assert_eq!(
            allow_listed("write", "src/a.rs", "src/**, docs/**"),
            Before::Allow
        );
        let Before::Block(why) = allow_listed("write", "build.rs", "src/**,docs/**") else {
            panic!("not blocked");
        };
        assert_eq!(
            why,
            "build.rs may not be changed: files may be written only where src/**, docs/** match; \
             choose a path there"
        );
        assert!(
            matches!(allow_listed("edit", "src/a.rs", " , "), Before::Block(w) if w.contains("set and empty"))
        );
        assert!(
            matches!(allow_listed("edit", "src/a.rs", "src/{"), Before::Block(w) if w.contains("cannot be used"))
        );
    }

    #[test]
    fn without_a_list_only_protected_paths_are_blocked() {
        assert_eq!(not_protected("write", "src/main.rs"), Before::Allow);
        for p in [
            ".git/config",
            "sub/.git/HEAD",
            ".env",
            "app/.env.local",
            "warden.json",
        ] {
            assert!(matches!(not_protected("write", p), Before::Block(_)), "{p}");
        }
        assert_eq!(not_protected("write", "docs/warden.json"), Before::Allow);
    }
}
