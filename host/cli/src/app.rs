//! Building the pieces a command needs from the data dir and the config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use warden_core::boundary::Protected;
use warden_core::config::trust::TrustStore;
use warden_core::config::{Loaded, Sources};
use warden_core::tool::ToolSource;
use warden_core::{Bus, Config, Core, CoreOptions, Ledger};
use warden_llm::Models;
use warden_runtime::WasmHost;

use crate::Common;

/// The data dir: `--data-dir`, `WARDEN_DATA_DIR`, or the platform's data dir.
pub fn data_dir(common: &Common) -> Result<PathBuf> {
    if let Some(d) = &common.data_dir {
        return Ok(d.clone());
    }
    let base = dirs::data_dir().context("no data directory on this platform; pass --data-dir")?;
    Ok(base.join("warden"))
}

/// The user-level config: `warden/warden.json` in the platform's config
/// dir (`$XDG_CONFIG_HOME`, else `~/.config`). Trusted whole, like `--config`.
pub fn user_config() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("warden").join("warden.json"))
}

/// The config: the operator's (`--config`, `WARDEN_CONFIG`, else the
/// user-level config), then `warden.json` in `dir`, whole when the operator
/// trusts it (`warden trust`), else only what tightens. What an untrusted
/// project config could not set is said on stderr, once per command.
pub fn config(common: &Common, dir: &Path) -> Result<Loaded> {
    let data_dir = data_dir(common)?;
    let trust = TrustStore::open(&data_dir).map_err(|e| anyhow::anyhow!(e))?;
    let user = user_config();
    let loaded = warden_core::config::load_layers(&Sources {
        explicit: common.config.as_deref(),
        user: user.as_deref(),
        project_dir: dir,
        trust: &trust,
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    static SAID: std::sync::Once = std::sync::Once::new();
    if let Some(notice) = loaded.notice() {
        SAID.call_once(|| crate::warn(&notice));
    }
    Ok(loaded)
}

/// The file shown as "the config" (the last one read), if any.
pub fn config_path(loaded: &Loaded) -> Option<PathBuf> {
    loaded.paths().last().map(Path::to_path_buf)
}

/// Where the ledger lives: `--ledger` / `WARDEN_LEDGER`, else the config's
/// `ledger`, else `ledger.db` in the data dir.
pub fn ledger_location(common: &Common, config: &Config, data_dir: &Path) -> String {
    common
        .ledger
        .clone()
        .or_else(|| config.ledger.clone())
        .unwrap_or_else(|| data_dir.join("ledger.db").display().to_string())
}

/// The SQLite file a location names, if it names one.
pub fn ledger_file(location: &str) -> Option<PathBuf> {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
        return None;
    }
    let path = location.strip_prefix("sqlite:").unwrap_or(location);
    Some(PathBuf::from(path.strip_prefix("//").unwrap_or(path)))
}

/// Open the ledger for a command that needs nothing else (the config is
/// read only for its `ledger` key).
pub async fn ledger(common: &Common) -> Result<Ledger> {
    let data_dir = data_dir(common)?;
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let loaded = config(common, &cwd)?;
    open_ledger(
        &ledger_location(common, &loaded.config, &data_dir),
        &data_dir,
    )
    .await
}

/// Open the ledger at `location`. The data dir is created (or tightened to
/// be) readable by its owner only: it holds the default ledger file and the
/// compiled code warden runs.
pub async fn open_ledger(location: &str, data_dir: &Path) -> Result<Ledger> {
    warden_runtime::cache::owner_only_dir(data_dir).map_err(|e| anyhow::anyhow!(e))?;
    let store = warden_core::ledger::location::open_store(location)
        .await
        .with_context(|| format!("cannot open the ledger at {}", shown(location)))?;
    Ok(Ledger::new(store, Bus::new()))
}

/// A location as it may be shown: a URL without its password.
pub fn shown(location: &str) -> String {
    warden_core::ledger::postgres::without_password(location)
}

/// Everything a session needs.
pub struct App {
    pub core: Core,
    pub host: Arc<WasmHost>,
    pub data_dir: PathBuf,
    /// The config files read, the operator's first.
    pub config_files: Vec<PathBuf>,
}

/// Load the plugins and build the core.
pub async fn build(common: &Common, dir: &Path) -> Result<App> {
    build_with(
        common,
        dir,
        warden_core::session::admission::Admission::default(),
    )
    .await
}

/// What a host serving clients in `root` runs (`serve`, `acp`): sessions in
/// that directory, and cassettes only the operator's own `--model`, unless
/// `any_scripted` lets clients name them.
pub fn serving(
    root: &Path,
    model: Option<&warden_protocol::ModelRef>,
    any_scripted: bool,
) -> warden_core::session::admission::Admission {
    use warden_core::session::admission::{Admission, Scripted};
    Admission {
        root: Some(root.to_path_buf()),
        scripted: if any_scripted {
            Scripted::Any
        } else {
            Scripted::Operators {
                also: model.cloned(),
            }
        },
    }
}

/// The same, for a host with a policy of its own for what it runs (`serve`).
pub async fn build_with(
    common: &Common,
    dir: &Path,
    admission: warden_core::session::admission::Admission,
) -> Result<App> {
    let data_dir = data_dir(common)?;
    let loaded = config(common, dir)?;
    let config_files: Vec<PathBuf> = loaded.paths().map(Path::to_path_buf).collect();
    let config = loaded.config;
    let location = ledger_location(common, &config, &data_dir);
    let ledger = open_ledger(&location, &data_dir).await?;
    let mut host = load_host(&config, &data_dir)
        .await
        .context("cannot load the plugins")?;
    for note in host.cache_rejections() {
        crate::warn(&note);
    }
    let mut options = CoreOptions {
        admission,
        ..CoreOptions::default()
    };
    if let Some(ms) = std::env::var("WARDEN_LEASE_TTL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        options.lease_ttl = std::time::Duration::from_millis(ms.max(100));
    }
    // warden's own files: the config may be read but never changed by a tool;
    // the ledger (every session's history), the compiled cache and the
    // installed plugins not even read. (The demo's scratch projects, also in
    // the data dir, are ordinary working directories.)
    // Every config file read, the project's included: a tool that rewrote
    // one could grant itself more at the next start.
    for path in config_files
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
    {
        options.protected.push(Protected {
            path,
            writes_only: true,
        });
    }
    if let Ok(data) = std::fs::canonicalize(&data_dir) {
        // The server's token and the trust list too: reading the one is
        // the server's rights, writing the other trusts any project.
        for name in ["cache", "plugins", "server-token", "trust.json"] {
            options.protected.push(Protected {
                path: data.join(name),
                writes_only: false,
            });
        }
    }
    // A SQLite ledger, wherever it is, with its log and shared memory.
    if let Some(file) = ledger_file(&location).and_then(|f| std::fs::canonicalize(f).ok()) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            options.protected.push(Protected {
                path: path.into(),
                writes_only: false,
            });
        }
    }
    // The same files are kept from every guest, whatever its grants.
    host.protect(options.protected.iter().map(|p| p.path.clone()));
    let host = Arc::new(host);
    // The config's MCP servers join the plugins' tools behind the same boundary.
    // Each says so on stderr: a local one is a program running as you,
    // outside every grant.
    for (name, server) in config.mcp.iter().filter(|(_, s)| s.enabled()) {
        let what = match server {
            warden_core::config::McpServerConfig::Local { command, .. } => format!(
                "starting MCP server {name}: `{}` (not sandboxed: it runs as you)",
                command.join(" ")
            ),
            warden_core::config::McpServerConfig::Remote { url, .. } => {
                format!("connecting to MCP server {name} at {url}")
            }
        };
        eprintln!(
            "warden: {}",
            warden_protocol::text::json_terminal_safe(&what)
        );
    }
    // The runtime's tools, then the MCP servers'; hooks only from the runtime.
    let mut tools = warden_core::tool::Registry::of(host.clone());
    if !config.mcp.is_empty() {
        let servers = warden_mcp::McpTools::connect(&host.tools(), &config.mcp)
            .await
            .context("cannot start the MCP servers")?;
        tools = tools.with_source(Arc::new(servers));
    }
    let core = Core::new(
        ledger,
        tools,
        Arc::new(Models::from_providers(&config.provider)),
        config,
        options,
    )?;
    Ok(App {
        core,
        host,
        data_dir,
        config_files,
    })
}

/// Load the built-ins, the config's plugins and the plugins directory, with
/// the compiled cache in the data dir.
pub async fn load_host(
    config: &Config,
    data_dir: &Path,
) -> Result<WasmHost, warden_runtime::RuntimeError> {
    WasmHost::load(
        &config.plugin_set(),
        Some(data_dir.join("cache").join("components")),
        Some(&plugin_dir(data_dir)),
    )
    .await
}

/// Where dropped-in plugins live.
pub fn plugin_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("plugins")
}
