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
    /// Without one, the token in the data dir's `server-token` (made on
    /// first start, readable by you alone) is required.
    #[arg(long, env = "WARDEN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve without a token: anyone who can reach the port (every local
    /// user, on loopback) acts with your rights. Loopback only.
    #[arg(long, conflicts_with = "token")]
    pub no_auth: bool,
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
    if warden_server::needs_token(&addr) && args.no_auth {
        anyhow::bail!(
            "listening on {addr} without a token would expose the API beyond this machine; drop --no-auth, or listen on 127.0.0.1"
        );
    }
    let data_dir = app::data_dir(&args.common)?;
    let token = match (token, args.no_auth) {
        (Some(t), _) => Some(Token::given(t)),
        (None, true) => {
            crate::warn(
                "--no-auth: every local user (and any program of theirs) can call this server with your rights; use it only on a machine of your own",
            );
            None
        }
        (None, false) => Some(Token::from_file(&data_dir)?),
    };
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir)
        .with_context(|| format!("--dir {}: cannot be used", dir.display()))?;
    // What this host runs, whichever host accepted the prompt: sessions in
    // its directory, cassettes only its own unless --allow-scripted.
    let admission = app::serving(&dir, model.as_ref(), args.allow_scripted);
    let app = app::build_with(&args.common, &dir, admission).await?;
    // On a ledger shared by hosts, a client of another host may answer this
    // host's questions (the relay carries the answer; see permission/ask.rs).
    app.core.permissions().answer_from_other_hosts();
    if let Some(m) = &model {
        app.core
            .choose_model(Some(m), None, None)
            .await
            .with_context(|| format!("--model {m}"))?;
    }
    let config_path = app.config_files.last().cloned();
    let plugins = app
        .host
        .plugins()
        .iter()
        .map(|p| plugin_cmd::describe(p))
        .collect();
    let router = warden_server::router(
        app.core.clone(),
        ServerOptions {
            token: token.as_ref().map(|t| t.secret.clone()),
            username,
            directory: dir,
            data_dir: app.data_dir.clone(),
            config_path,
            model,
            plugins,
            cors: args.cors,
            ..ServerOptions::default()
        },
    );
    let limits = limits(&app.core.config().server)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    say!(
        "warden listening on http://{local} (ledger {})",
        app.core.ledger().path()
    );
    if let Some(Token {
        file: Some(file), ..
    }) = &token
    {
        say!(
            "every request needs the token in {0}: `Authorization: Bearer $(cat {0})`; OpenCode's clients: OPENCODE_SERVER_PASSWORD=$(cat {0}); MCP clients: http://{local}/warden/mcp with the same Bearer header",
            file.display()
        );
    }

    // Take over sessions whose runner died with its process (a lease that
    // outlived it), here or in another server sharing the ledger, and
    // prompts queued by a process that stopped before running them.
    let core = app.core.clone();
    tokio::spawn(async move { core.take_over_orphans().await });

    warden_server::listen::serve(listener, router, limits, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("the server stopped")?;
    Ok(ExitCode::SUCCESS)
}

/// The connection bounds from the config, the process's file limit raised
/// to its hard limit first, and the connection cap kept below it (with room
/// for the ledger, plugins and MCP servers).
fn limits(settings: &warden_core::config::ServerSettings) -> Result<warden_server::listen::Limits> {
    use warden_server::listen::Limits;
    let d = Limits::default();
    let ms = |v: Option<u64>, name: &str, default: Duration| -> Result<Duration> {
        match v {
            None => Ok(default),
            Some(0) => anyhow::bail!("server.{name} is 0; give it in milliseconds, at least 1"),
            Some(ms) => Ok(Duration::from_millis(ms)),
        }
    };
    let count = |v: Option<usize>, name: &str, default: usize| -> Result<usize> {
        match v {
            None => Ok(default),
            Some(0) => anyhow::bail!("server.{name} is 0; it must be at least 1"),
            Some(n) => Ok(n),
        }
    };
    let mut limits = Limits {
        max_connections: count(
            settings.max_connections,
            "max_connections",
            d.max_connections,
        )?,
        max_connections_per_peer: count(
            settings.max_connections_per_peer,
            "max_connections_per_peer",
            d.max_connections_per_peer,
        )?,
        header_timeout: ms(
            settings.header_timeout_ms,
            "header_timeout_ms",
            d.header_timeout,
        )?,
        body_timeout: ms(settings.body_timeout_ms, "body_timeout_ms", d.body_timeout)?,
        idle_timeout: ms(settings.idle_timeout_ms, "idle_timeout_ms", d.idle_timeout)?,
        max_header_bytes: match settings.max_header_bytes {
            None => d.max_header_bytes,
            Some(n) if n < 8192 => anyhow::bail!(
                "server.max_header_bytes is {n}; it must be at least 8192 (the HTTP parser's smallest buffer)"
            ),
            Some(n) => n,
        },
    };
    let files = raise_file_limit();
    // Each connection is one descriptor; the rest of the process (ledger,
    // plugins' files, MCP servers, the refusals in flight) keeps 256.
    let room = files.saturating_sub(256).max(64) as usize;
    if limits.max_connections > room {
        tracing::warn!(
            "server.max_connections {} is more than the file limit ({files}) leaves room for; using {room}",
            limits.max_connections
        );
        limits.max_connections = room;
    }
    Ok(limits)
}

/// Raise the soft limit on open files to the hard one; the limit in force.
fn raise_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let (Some(soft), hard) = (limit.current, limit.maximum) else {
        return u64::MAX; // unlimited
    };
    let target = hard.unwrap_or(u64::MAX);
    if target <= soft {
        return soft;
    }
    let raised = rustix::process::Rlimit {
        current: Some(target),
        maximum: hard,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => target,
        Err(e) => {
            tracing::warn!("cannot raise the open-file limit from {soft} to {target}: {e}");
            soft
        }
    }
}

/// The secret every request must carry, and where it came from.
struct Token {
    secret: String,
    /// The data dir's token file, when the operator gave none.
    file: Option<PathBuf>,
}

/// The token file in the data dir.
pub const TOKEN_FILE: &str = "server-token";

impl Token {
    fn given(secret: String) -> Token {
        Token { secret, file: None }
    }

    /// The data dir's token, made on first start: 32 random bytes as hex,
    /// in a file only its owner can read (created so, never widened later).
    fn from_file(data_dir: &std::path::Path) -> Result<Token> {
        use std::io::Write as _;
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        warden_runtime::cache::owner_only_dir(data_dir).map_err(|e| anyhow::anyhow!(e))?;
        let file = data_dir.join(TOKEN_FILE);
        let secret: [u8; 32] = rand::random();
        let secret = hex::encode(secret);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
        {
            Ok(mut f) => {
                f.write_all(secret.as_bytes())
                    .and_then(|_| f.sync_all())
                    .with_context(|| format!("cannot write {}", file.display()))?;
                return Ok(Token {
                    secret,
                    file: Some(file),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", file.display())),
        }
        let meta =
            std::fs::metadata(&file).with_context(|| format!("cannot read {}", file.display()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            anyhow::bail!(
                "{} can be read by other users, so it is no secret; remove it (a new one is made) or `chmod 600` it",
                file.display()
            );
        }
        let secret = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?
            .trim()
            .to_string();
        if secret.len() < 16 {
            anyhow::bail!(
                "{} holds no usable token (under 16 characters); remove it and a new one is made",
                file.display()
            );
        }
        Ok(Token {
            secret,
            file: Some(file),
        })
    }
}
