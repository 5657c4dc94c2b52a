//! The `warden` command line. Front end only: it builds the core and the
//! plugin runtime from the config, then renders bus events.

/// `println!` that ignores a closed stdout (e.g. piped into `head`)
/// instead of panicking, and never lets untrusted text act on the terminal:
/// every line goes through the one sanitiser
/// ([`warden_protocol::text::json_terminal_safe`], which leaves a JSON
/// document the same value).
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($t)*);
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            warden_protocol::text::json_terminal_safe(&line)
        );
    }};
}

mod acp_cmd;
mod app;
mod audit_cmd;
mod author;
mod demo;
mod ledger_cmd;
mod mcp_cmd;
mod plugin_add;
mod plugin_call;
mod plugin_cmd;
mod plugin_dev;
mod plugin_upgrade;
mod plugin_verify;
mod render;
mod run;
mod serve;
mod session_cmd;
mod spinner;
mod table;
mod trace;
mod trust_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use warden_protocol::text::json_terminal_safe;

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
    /// Be an Agent Client Protocol agent on stdio, for editors (Zed, JetBrains, Neovim).
    Acp(acp_cmd::AcpArgs),
    /// Check a ledger file for damage, or move a ledger to another backend.
    Ledger {
        #[command(subcommand)]
        command: ledger_cmd::LedgerCommand,
        #[command(flatten)]
        common: Common,
    },
    /// Trust a project's own warden.json (until it changes); untrusted, it may only tighten the operator's config.
    Trust(trust_cmd::TrustArgs),
    /// Inspect the plugins the config loads.
    Plugin {
        #[command(subcommand)]
        command: plugin_cmd::PluginCommand,
        #[command(flatten)]
        common: Common,
    },
}

/// A `warning: …` line on standard error, made safe for the terminal.
pub fn warn(message: &str) {
    eprintln!("warning: {}", json_terminal_safe(message));
}

/// Standard error for log lines: a guest's log, an MCP server's name or a
/// model's error can carry escape sequences, so each write is sanitised.
struct SafeStderr;

impl std::io::Write for SafeStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(json_terminal_safe(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A server's operator reads its log: refused connections, takeovers and
    // failed writes are warnings there. Elsewhere only errors are shown.
    // An author calling their tool reads what it logged, every level, as
    // lines of their own: no timestamps, no module path.
    let calling = matches!(
        &cli.command,
        Command::Plugin {
            command: plugin_cmd::PluginCommand::Call(_),
            ..
        }
    );
    let default_log = match &cli.command {
        Command::Serve(_) => "warn",
        _ if calling => "error,warden_runtime::host_calls=debug",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| default_log.into());
    let log = tracing_subscriber::fmt()
        .with_writer(|| SafeStderr)
        .with_ansi(false)
        .with_env_filter(filter);
    if calling {
        log.without_time().with_target(false).init();
    } else {
        log.init();
    }
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
            Command::Acp(args) => acp_cmd::acp(args).await,
            Command::Trust(args) => trust_cmd::trust(args),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", json_terminal_safe(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}
