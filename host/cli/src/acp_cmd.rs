//! `warden acp`: warden as an Agent Client Protocol agent on stdio, for
//! editors (Zed, JetBrains IDEs, Neovim plugins). stdout carries the
//! protocol only; logs go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::{Common, app};

#[derive(clap::Args)]
pub struct AcpArgs {
    /// The directory sessions work in: the editor's project must be it or
    /// inside it (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The model of prompts: provider/model or scripted:PATH (default: the
    /// agent's, else the config's).
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

pub async fn acp(args: AcpArgs) -> Result<ExitCode> {
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let root = std::fs::canonicalize(&dir)
        .with_context(|| format!("--dir {}: cannot be used", dir.display()))?;
    let model = match &args.model {
        Some(m) => Some(warden_llm::Models::parse(m)?),
        None => None,
    };
    // What this host runs: sessions in its directory, and no cassette but
    // the operator's own (an editor cannot name one).
    let admission = app::serving(&root, model.as_ref(), false);
    let app = app::build_with(&args.common, &root, admission).await?;
    if let Some(m) = &model {
        app.core
            .choose_model(Some(m), None, None)
            .await
            .with_context(|| format!("--model {m}"))?;
    }
    warden_acp::serve_stdio(app.core, warden_acp::Options { root, model }).await?;
    // Exit now: when the client stopped reading but keeps stdin open, the
    // runtime's stdin thread stays blocked in a read and would hold the
    // process up at shutdown. What was written is flushed; the ledger is
    // safe to leave at any point.
    std::process::exit(0)
}
