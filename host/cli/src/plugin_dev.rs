//! `warden plugin dev [DIR]`: the author's inner loop. Build the project,
//! install it (the first time with the operator's consent, as `plugin add`
//! asks), then watch its sources and, on each change, build and reinstall
//! it, keeping what was granted. A build that fails leaves the installed
//! plugin as it was and the watch goes on.
//!
//! The sources are those `plugin add` compares the component against
//! ([`crate::author::sources`]); they are polled ([`POLL`]), which works on
//! every file system (network mounts and containers' bind mounts included)
//! and costs a directory walk of a small project. A change is acted on once
//! the files have stopped changing for one poll, so an editor's save (or a
//! `git checkout`) of several files is one rebuild.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::author::{self, Project, Source};
use crate::plugin_add::{AddArgs, GrantFlags};

/// How often the sources are looked at.
pub const POLL: Duration = Duration::from_millis(300);

#[derive(clap::Args)]
pub struct DevArgs {
    /// The project folder (default: the current directory).
    pub dir: Option<PathBuf>,
    /// Install under this name (default: the project's).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub grant: GrantFlags,
    /// Replace an installed plugin of the same name (its grants kept), as
    /// `plugin add --replace` does.
    #[arg(long)]
    pub replace: bool,
    /// Install the first time without asking (required when not on a
    /// terminal). Reinstalls after a change never ask: they keep what was
    /// granted and print what changed.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Build and install, then rebuild and reinstall on every change until
/// interrupted.
pub async fn dev(args: DevArgs, config: &warden_core::Config, data_dir: &Path) -> Result<ExitCode> {
    let dir = std::path::absolute(args.dir.clone().unwrap_or_else(|| PathBuf::from(".")))
        .context("cannot resolve the project folder")?;
    let project = Project::load(&dir)?;
    let name = args.name.clone().unwrap_or_else(|| project.name.clone());
    let mut seen = author::sources(&dir);
    // The first install is the operator's consent to the grants.
    let installed = crate::app::plugin_dir(data_dir).join(&name).exists();
    if installed && !args.replace {
        anyhow::bail!(
            "a plugin named {name} is already installed; pass --replace to reinstall it from {} (its grants are kept), or --name to install this one beside it",
            dir.display()
        );
    }
    // Ctrl-C is heard during a rebuild too: the loop stops after it.
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    let first = AddArgs {
        path: dir.clone(),
        name: Some(name.clone()),
        grant: args.grant.clone(),
        fail_open: false,
        replace: installed,
        build: true,
        yes: args.yes,
        quiet: true,
    };
    let code = crate::plugin_add::add(first, config, data_dir).await?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    seen = absorb(&seen, author::sources(&dir));
    watching(&name);
    loop {
        let changed = tokio::select! {
            changed = next_change(&dir, &seen) => changed,
            _ = stop.cancelled() => return Ok(stopped(&name)),
        };
        eprintln!(
            "warden: {} changed; rebuilding {name}",
            shown(&dir, &changed.1)
        );
        let started = Instant::now();
        let again = AddArgs {
            path: dir.clone(),
            name: Some(name.clone()),
            // Kept from the install; the tool mappings given apply again.
            grant: GrantFlags {
                tools: args.grant.tools.clone(),
                ..GrantFlags::default()
            },
            fail_open: false,
            replace: true,
            build: true,
            yes: true,
            quiet: true,
        };
        let result = crate::plugin_add::add(again, config, data_dir).await;
        if stop.is_cancelled() {
            return Ok(stopped(&name));
        }
        match result {
            Ok(code) if code == ExitCode::SUCCESS => eprintln!(
                "warden: reinstalled {name} in {:.1} s",
                started.elapsed().as_secs_f64()
            ),
            Ok(_) => {
                eprintln!("warden: {name} was not reinstalled; the installed one is unchanged")
            }
            Err(e) => {
                eprintln!("warden: the build failed, so the installed {name} is unchanged: {e:#}")
            }
        }
        // A file saved while the build ran is still a change (the next
        // round builds it); a lock file the build wrote is not.
        seen = absorb(&changed.0, author::sources(&dir));
        watching(&name);
    }
}

fn stopped(name: &str) -> ExitCode {
    eprintln!("warden: stopped watching; {name} stays installed as last built");
    ExitCode::SUCCESS
}

fn watching(name: &str) {
    eprintln!("warden: watching {name}'s sources for changes (Ctrl-C to stop)");
}

/// The listing to compare with from now on: `before` (what was built),
/// except for the lock files a build writes itself, taken from `after`.
fn absorb(before: &[Source], after: Vec<Source>) -> Vec<Source> {
    let written_by_build = |p: &Path| {
        matches!(
            p.file_name().and_then(|n| n.to_str()),
            Some("Cargo.lock" | "package-lock.json")
        )
    };
    let mut out: Vec<Source> = before
        .iter()
        .filter(|s| !written_by_build(&s.path))
        .cloned()
        .collect();
    out.extend(after.into_iter().filter(|s| written_by_build(&s.path)));
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Wait until the sources differ from `seen` and have then stayed the same
/// for one poll; the new listing and the files that changed.
async fn next_change(dir: &Path, seen: &[Source]) -> (Vec<Source>, Vec<PathBuf>) {
    loop {
        tokio::time::sleep(POLL).await;
        let now = author::sources(dir);
        if now == seen {
            continue;
        }
        let mut settled = now;
        loop {
            tokio::time::sleep(POLL).await;
            let again = author::sources(dir);
            if again == settled {
                break;
            }
            settled = again;
        }
        let changed = differences(seen, &settled);
        if !changed.is_empty() {
            return (settled, changed);
        }
    }
}

/// The paths added, removed or changed between two listings.
fn differences(before: &[Source], after: &[Source]) -> Vec<PathBuf> {
    let old: std::collections::BTreeMap<&Path, &Source> =
        before.iter().map(|s| (s.path.as_path(), s)).collect();
    let new: std::collections::BTreeMap<&Path, &Source> =
        after.iter().map(|s| (s.path.as_path(), s)).collect();
    let mut out: Vec<PathBuf> = new
        .iter()
        .filter(|(p, s)| old.get(*p) != Some(*s))
        .map(|(p, _)| p.to_path_buf())
        .chain(
            old.keys()
                .filter(|p| !new.contains_key(*p))
                .map(|p| p.to_path_buf()),
        )
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The changed files, relative to the project, at most three named.
fn shown(dir: &Path, changed: &[PathBuf]) -> String {
    let names: Vec<String> = changed
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap_or(p).display().to_string())
        .collect();
    match names.len() {
        0..=3 => names.join(", "),
        n => format!("{} and {} more", names[..3].join(", "), n - 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, len: u64) -> Source {
        Source {
            path: PathBuf::from(path),
            modified: None,
            len,
        }
    }

    #[test]
    fn a_lock_file_the_build_wrote_is_no_change_but_a_file_saved_meanwhile_is() {
        let before = [src("/p/src/lib.rs", 1)];
        let after = vec![src("/p/Cargo.lock", 9), src("/p/src/lib.rs", 2)];
        let seen = absorb(&before, after.clone());
        assert_eq!(differences(&seen, &after), [PathBuf::from("/p/src/lib.rs")]);
    }

    #[test]
    fn changes_are_files_added_removed_or_changed() {
        let before = [src("/p/a", 1), src("/p/b", 1), src("/p/c", 1)];
        let after = [src("/p/a", 1), src("/p/b", 2), src("/p/d", 1)];
        assert_eq!(
            differences(&before, &after),
            [
                PathBuf::from("/p/b"),
                PathBuf::from("/p/c"),
                PathBuf::from("/p/d")
            ]
        );
        assert_eq!(
            shown(Path::new("/p"), &differences(&before, &after)),
            "b, c, d"
        );
        let many: Vec<PathBuf> = (0..5).map(|i| PathBuf::from(format!("/p/{i}"))).collect();
        assert_eq!(shown(Path::new("/p"), &many), "0, 1, 2 and 2 more");
    }
}
