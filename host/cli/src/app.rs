//! Building the pieces a command needs from the data dir and the config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use warden_core::boundary::Protected;
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

/// The config: `--config`, `WARDEN_CONFIG`, `warden.json` in `dir`, or the defaults.
pub fn config(common: &Common, dir: &Path) -> Result<(Config, Option<PathBuf>)> {
    let path = match &common.config {
        Some(p) => Some(p.clone()),
        None => {
            let p = dir.join("warden.json");
            p.exists().then_some(p)
        }
    };
    match path {
        Some(p) => {
            let c = Config::load(&p).map_err(|e| anyhow::anyhow!(e))?;
            Ok((c, Some(p)))
        }
        None => Ok((Config::default(), None)),
    }
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
    let (config, _) = config(common, &cwd)?;
    open_ledger(&ledger_location(common, &config, &data_dir), &data_dir).await
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
}

/// Load the plugins and build the core.
pub async fn build(common: &Common, dir: &Path) -> Result<App> {
    let data_dir = data_dir(common)?;
    let (config, config_path) = config(common, dir)?;
    let location = ledger_location(common, &config, &data_dir);
    let ledger = open_ledger(&location, &data_dir).await?;
    let mut host = load_host(&config, &data_dir)
        .await
        .context("cannot load the plugins")?;
    for note in host.cache_rejections() {
        eprintln!("warning: {note}");
    }
    let mut options = CoreOptions::default();
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
    if let Some(path) = config_path.and_then(|p| std::fs::canonicalize(p).ok()) {
        options.protected.push(Protected {
            path,
            writes_only: true,
        });
    }
    if let Ok(data) = std::fs::canonicalize(&data_dir) {
        for name in ["cache", "plugins"] {
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
    let tools: Arc<dyn warden_core::tool::ToolHost> = if config.mcp.is_empty() {
        host.clone()
    } else {
        Arc::new(
            warden_mcp::McpTools::connect(host.clone(), &config)
                .await
                .context("cannot start the MCP servers")?,
        )
    };
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
    })
}

/// Load the built-ins, the config's plugins and the plugins directory, with
/// the compiled cache in the data dir.
pub async fn load_host(
    config: &Config,
    data_dir: &Path,
) -> Result<WasmHost, warden_runtime::RuntimeError> {
    WasmHost::load(
        config,
        Some(data_dir.join("cache").join("components")),
        Some(&plugin_dir(data_dir)),
    )
    .await
}

/// Where dropped-in plugins live.
pub fn plugin_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("plugins")
}
