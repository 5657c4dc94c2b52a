//! `warden trust [DIR]`: the operator accepts a project's own `warden.json`
//! whole, as it is now (see `warden_core::config::trust`). Until then the
//! project's config may only tighten the operator's.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use warden_core::config::layers::PROJECT_FILE;
use warden_core::config::trust::{Status, TrustStore};

use crate::{Common, app};

#[derive(clap::Args)]
pub struct TrustArgs {
    /// The project folder whose warden.json to trust (default: the current directory).
    pub dir: Option<PathBuf>,
    /// List the trusted configs, and whether each still holds what was trusted.
    #[arg(long, conflicts_with_all = ["dir", "revoke"])]
    pub list: bool,
    /// Take the project's config off the list instead.
    #[arg(long)]
    pub revoke: bool,
    #[command(flatten)]
    pub common: Common,
}

pub fn trust(args: TrustArgs) -> Result<ExitCode> {
    let data_dir = app::data_dir(&args.common)?;
    warden_runtime::cache::owner_only_dir(&data_dir).map_err(|e| anyhow::anyhow!(e))?;
    let mut store = TrustStore::open(&data_dir).map_err(|e| anyhow::anyhow!(e))?;
    if args.list {
        let entries: Vec<_> = store.entries().collect();
        if entries.is_empty() {
            say!("no project config is trusted");
        }
        for (path, entry) in entries {
            let now = match std::fs::read(path) {
                Ok(bytes) if store.status(path, &bytes) == Status::Trusted => "trusted",
                Ok(_) => "changed since (untrusted until trusted again)",
                Err(_) => "missing",
            };
            say!(
                "{}  {}  sha256 {}",
                path.display(),
                now,
                &entry.sha256[..16]
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let file = dir.join(PROJECT_FILE);
    let real = std::fs::canonicalize(&file)
        .with_context(|| format!("{} cannot be trusted", file.display()))?;
    if args.revoke {
        if store.revoke(&real).map_err(|e| anyhow::anyhow!(e))? {
            say!("{} is no longer trusted", real.display());
        } else {
            say!("{} was not trusted", real.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    // What it may set once trusted: what the untrusted reading leaves out,
    // and every program it starts (that is running its code as you).
    let bytes = std::fs::read(&real).with_context(|| format!("cannot read {}", real.display()))?;
    let project_only = warden_core::config::load_layers(&warden_core::config::Sources {
        explicit: None,
        user: None,
        project_dir: real.parent().unwrap_or(&dir),
        trust: &TrustStore::default(),
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    let whole = warden_core::Config::load(&real).map_err(|e| anyhow::anyhow!(e))?;
    store.trust(&real, &bytes).map_err(|e| anyhow::anyhow!(e))?;
    say!(
        "trusted {} (sha256 {}); it is used whole until it changes",
        real.display(),
        &warden_core::config::trust::digest(&bytes)[..16]
    );
    let ignored: Vec<String> = project_only
        .files
        .iter()
        .flat_map(|r| r.ignored.iter().cloned())
        .collect();
    if !ignored.is_empty() {
        say!("it may now set: {}", ignored.join(", "));
    }
    for (name, server) in &whole.mcp {
        say!(
            "it starts {}",
            crate::mcp_cmd::describe_server(name, server)
        );
    }
    Ok(ExitCode::SUCCESS)
}
