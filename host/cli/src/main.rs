//! The `warden` command line. Front end only: it builds the core and the
//! plugin runtime from the config, then renders bus events.

/// `println!` that ignores a closed stdout (e.g. piped into `head`)
/// instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod app;
mod audit_cmd;
mod author;
mod demo;
mod ledger_cmd;
mod mcp_cmd;
mod plugin_cmd;
mod plugin_verify;
mod render;
mod run;
mod serve;
mod session_cmd;
mod spinner;
mod table;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// warden: an agent host whose tools and hooks are sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "warden", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every command that opens the ledger takes.
#[derive(clap::Args, Clone, Debug)]
pub struct Common {
    /// Where the ledger and the compiled-plugin cache live.
    #[arg(long, env = "WARDEN_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// The config file (default: warden.json in the working directory, if present).
    #[arg(long, env = "WARDEN_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Where the ledger lives: a SQLite file (PATH or sqlite:PATH) or a
    /// PostgreSQL database (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE).
    /// Default: the config's `ledger`, else ledger.db in the data dir.
    #[arg(long, env = "WARDEN_LEDGER", global = true)]
    pub ledger: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people: live tool states and the answer.
    #[default]
    Text,
    /// JSON: for `run` and `session resume`, one event per line; for the
    /// other commands, one document.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Send one prompt and run the session until the model has answered.
    Run(run::RunArgs),
    /// The offline demo: a scripted model reads package.json in a scratch project.
    Demo {
        #[command(flatten)]
        common: Common,
    },
    /// List, show, export or resume sessions.
    Session {
        #[command(subcommand)]
        command: session_cmd::SessionCommand,
        #[command(flatten)]
        common: Common,
    },
    /// Where a session's time went: its phases and every tool call's states (text, json, or an svg timeline).
    Trace(trace::TraceArgs),
    /// The audit trail across sessions: filter by plugin, decision and time.
    Audit(audit_cmd::AuditArgs),
    /// Serve the HTTP API and the live event stream.
    Serve(serve::ServeArgs),
    /// Serve every loaded tool to MCP clients over stdio (each call checked like a session's).
    Mcp(mcp_cmd::McpArgs),
    /// Check a ledger file for damage, or move a ledger to another backend.
    Ledger {
        #[command(subcommand)]
        command: ledger_cmd::LedgerCommand,
        #[command(flatten)]
        common: Common,
    },
    /// Inspect the plugins the config loads.
    Plugin {
        #[command(subcommand)]
        command: plugin_cmd::PluginCommand,
        #[command(flatten)]
        common: Common,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| "error".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Demo { common } => demo::demo(common).await,
            Command::Session { command, common } => session_cmd::session(command, common).await,
            Command::Trace(args) => trace::trace(args).await,
            Command::Audit(args) => audit_cmd::audit(args).await,
            Command::Ledger { command, common } => ledger_cmd::ledger(command, common).await,
            Command::Plugin { command, common } => plugin_cmd::plugin(command, common).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Mcp(args) => mcp_cmd::mcp(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
