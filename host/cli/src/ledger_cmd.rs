//! `warden ledger check [PATH]`: SQLite's integrity and foreign-key checks
//! on a ledger file, reported plainly; the exit code says whether it is sound.
//! `warden ledger migrate --from LOC --to LOC`: every session moved whole
//! from one ledger to another (SQLite to PostgreSQL, or back).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;

use crate::Common;

#[derive(Subcommand)]
pub enum LedgerCommand {
    /// Check a ledger file for damage (default: the data dir's ledger.db).
    /// Exits 0 when it is sound, 2 when it is damaged.
    Check {
        /// The ledger file.
        path: Option<PathBuf>,
    },
    /// Copy every session of one ledger into another, whole (ids, times,
    /// timelines, audit trails, phases). A session already at the target is
    /// compared, not written, so a cut-short run can be run again. Run it
    /// with no warden using either ledger.
    Migrate {
        /// The ledger to copy: a SQLite file (PATH or sqlite:PATH) or a
        /// postgres:// URL.
        #[arg(long)]
        from: String,
        /// The ledger to copy into (created if it is a new SQLite file; a
        /// PostgreSQL database must exist).
        #[arg(long)]
        to: String,
    },
}

pub async fn ledger(command: LedgerCommand, common: Common) -> Result<ExitCode> {
    match command {
        LedgerCommand::Check { path } => {
            let path = match path {
                Some(p) => p,
                None => crate::app::data_dir(&common)?.join("ledger.db"),
            };
            let report = warden_core::ledger::check_file(&path)?;
            if report.is_ok() {
                say!("{}: ok (integrity and foreign keys check out)", report.path);
                return Ok(ExitCode::SUCCESS);
            }
            say!("{}: damaged", report.path);
            for problem in &report.problems {
                say!("  {problem}");
            }
            say!(
                "restore it from a backup, or move it aside and warden starts a new one (SQLite's `.recover` may save what is readable)"
            );
            Ok(ExitCode::from(2))
        }
        LedgerCommand::Migrate { from, to } => migrate(&from, &to).await,
    }
}

async fn migrate(from: &str, to: &str) -> Result<ExitCode> {
    use warden_core::ledger::location::open_store;
    use warden_core::ledger::migrate::{Step, migrate};
    let (from_shown, to_shown) = (crate::app::shown(from), crate::app::shown(to));
    if from.trim() == to.trim() {
        anyhow::bail!(
            "--from and --to are the same ledger ({from_shown}): give two different ones"
        );
    }
    let source = open_store(from)
        .await
        .with_context(|| format!("cannot open the ledger to copy ({from_shown})"))?;
    let target = open_store(to)
        .await
        .with_context(|| format!("cannot open the ledger to copy into ({to_shown})"))?;
    say!("moving {from_shown} → {to_shown}");
    let done = migrate(&*source, &*target, &mut |p| {
        let (what, session) = match &p.step {
            Step::Copied { session } => ("copied", session),
            Step::Verified { session } => ("already there, same", session),
            Step::Vanished { session } => ("deleted meanwhile, skipped", session),
        };
        eprintln!("[{}/{}] {session}: {what}", p.done, p.total);
    })
    .await
    .with_context(|| {
        format!("the move stopped; what was copied stays at {to_shown}, and running it again goes on from there")
    })?;
    say!(
        "{} copied, {} already there and the same, {} deleted meanwhile",
        done.copied,
        done.verified,
        done.vanished
    );
    Ok(ExitCode::SUCCESS)
}
