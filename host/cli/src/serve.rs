//! `warden serve`: the HTTP API on loopback by default; any other address
//! needs a token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use warden_server::ServerOptions;

use crate::{Common, app, plugin_cmd};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The address to listen on. Anything but loopback requires --token.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0 picks a free one; the chosen address is printed).
    #[arg(long, default_value_t = 4096)]
    pub port: u16,
    /// A token every request must carry: HTTP Basic with user `opencode`
    /// and the token as password (what OpenCode's clients send from
    /// OPENCODE_SERVER_PASSWORD), or Authorization: Bearer TOKEN. Also read
    /// from OPENCODE_SERVER_PASSWORD.
    #[arg(long, env = "WARDEN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The model of prompts that name none: provider/model or scripted:PATH
    /// (default: the agent's, else the config's).
    #[arg(long)]
    pub model: Option<String>,
    /// A browser origin allowed to call the API (CORS); repeat for more.
    #[arg(long = "cors", value_name = "ORIGIN")]
    pub cors: Vec<String>,
    /// The directory sessions work in: the default, and the root every
    /// session's directory must be inside (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Let HTTP clients pick scripted:PATH models (cassettes), for tests and demos.
    #[arg(long)]
    pub allow_scripted: bool,
    #[command(flatten)]
    pub common: Common,
}

pub async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let ip: std::net::IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {:?} is not an IP address", args.host))?;
    let addr = SocketAddr::new(ip, args.port);
    let token = args
        .token
        .or_else(|| std::env::var("OPENCODE_SERVER_PASSWORD").ok())
        .filter(|t| !t.is_empty());
    let username = std::env::var("OPENCODE_SERVER_USERNAME")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "opencode".into());
    let model = match &args.model {
        Some(m) => Some(warden_llm::Models::parse(m)?),
        None => None,
    };
    for origin in &args.cors {
        if !(origin.starts_with("http://") || origin.starts_with("https://")) {
            anyhow::bail!("--cors {origin:?} is not an origin; write it as https://host[:port]");
        }
    }
    if warden_server::needs_token(&addr) && token.is_none() {
        anyhow::bail!(
            "listening on {addr} would expose the API beyond this machine; pass --token (or set WARDEN_TOKEN), or listen on 127.0.0.1"
        );
    }
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir)
        .with_context(|| format!("--dir {}: cannot be used", dir.display()))?;
    let app = app::build(&args.common, &dir).await?;
    // On a ledger shared by hosts, a client of another host may answer this
    // host's questions (the relay carries the answer; see permission/ask.rs).
    app.core.permissions().answer_from_other_hosts();
    if let Some(m) = &model {
        app.core
            .choose_model(Some(m), None, None)
            .await
            .with_context(|| format!("--model {m}"))?;
    }
    let config_path = app::config(&args.common, &dir)?.1;
    let plugins = app
        .host
        .plugins()
        .iter()
        .map(|p| plugin_cmd::describe(p))
        .collect();
    let router = warden_server::router(
        app.core.clone(),
        ServerOptions {
            token,
            username,
            directory: dir,
            data_dir: app.data_dir.clone(),
            config_path,
            model,
            plugins,
            cors: args.cors,
            allow_scripted: args.allow_scripted,
            ..ServerOptions::default()
        },
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    say!(
        "warden listening on http://{local} (ledger {})",
        app.core.ledger().path()
    );

    // Take over sessions whose runner died with its process (a lease that
    // outlived it), here or in another server sharing the ledger, and
    // prompts queued by a process that stopped before running them.
    let core = app.core.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match core.orphaned().await {
                Ok(sessions) => {
                    for s in sessions {
                        let core = core.clone();
                        tokio::spawn(async move {
                            tracing::info!(session = %s, "taking over a session whose runner died");
                            match core.run(&s).await {
                                // Another host was quicker: it runs the session.
                                Ok(_) | Err(warden_core::CoreError::SessionBusy { .. }) => {}
                                Err(e) => {
                                    tracing::warn!(session = %s, error = %e, "could not take over")
                                }
                            }
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not read the runner leases"),
            }
        }
    });

    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("the server stopped")?;
    Ok(ExitCode::SUCCESS)
}
