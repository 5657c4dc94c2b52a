//! `warden ledger check [PATH]`: SQLite's integrity and foreign-key checks
//! on a ledger file, reported plainly; the exit code says whether it is sound.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
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
}

pub fn ledger(command: LedgerCommand, common: Common) -> Result<ExitCode> {
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
    }
}
