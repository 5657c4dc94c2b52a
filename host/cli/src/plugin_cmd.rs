//! `warden plugin list|inspect|verify`: what each plugin provides, its
//! hash, and what it was granted.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};
use warden_runtime::WasmHost;
use warden_runtime::plugin::LoadedPlugin;

use crate::{Common, Format, app};

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Every plugin the config loads, with its tools or hooks.
    List {
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// One plugin in full: tools, schemas, hooks, hash, grants.
    Inspect { name: String },
    /// Load every plugin (integrity, contract, self-description) and report.
    Verify,
}

fn describe(p: &LoadedPlugin) -> Value {
    json!({
        "name": &*p.name,
        "builtin": p.builtin,
        "path": p.path.as_ref().map(|p| p.display().to_string()),
        "sha256": p.hash,
        "size": p.size,
        "contract": p.contract,
        "tools": p.tools().iter().map(|t| json!({
            "id": t.id, "description": t.description, "parameters": t.parameters,
            "permission": t.permission, "pattern": t.pattern,
        })).collect::<Vec<_>>(),
        "hooks": p.hook().map(|h| json!({"before": h.before, "after": h.after, "fail_open": h.fail_open})),
        "grants": p.grants,
    })
}

pub async fn plugin(command: PluginCommand, common: Common) -> Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let data_dir = app::data_dir(&common)?;
    let (config, config_path) = app::config(&common, &cwd)?;
    let loaded = WasmHost::load(&config, Some(data_dir.join("cache").join("components"))).await;
    match command {
        PluginCommand::Verify => match loaded {
            Ok(host) => {
                for p in host.plugins() {
                    say!("ok  {}  sha256 {}  {}", p.name, p.hash, p.contract);
                }
                let s = host.compile_stats();
                say!(
                    "{} plugins verified ({} compiled, {} from the cache){}",
                    host.plugins().len(),
                    s.compiled,
                    s.cache_hits,
                    config_path.map_or(String::new(), |p| format!("; config {}", p.display()))
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                say!("failed  {e}");
                Ok(ExitCode::from(1))
            }
        },
        PluginCommand::List { format } => {
            let host = loaded?;
            if format == Format::Json {
                let all: Vec<Value> = host.plugins().iter().map(|p| describe(p)).collect();
                say!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(ExitCode::SUCCESS);
            }
            for p in host.plugins() {
                let what = match p.hook() {
                    Some(h) => format!(
                        "hook before [{}] after [{}]",
                        h.before.join(", "),
                        h.after.join(", ")
                    ),
                    None => format!(
                        "tools {}",
                        p.tools()
                            .iter()
                            .map(|t| t.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let dirs: Vec<String> = p
                    .grants
                    .dirs
                    .iter()
                    .map(|d| {
                        format!(
                            "{}:{}",
                            d.path,
                            if d.mode == warden_core::config::DirMode::ReadOnly {
                                "ro"
                            } else {
                                "rw"
                            }
                        )
                    })
                    .collect();
                say!(
                    "{}{}  {what}  sha256 {}  dirs [{}] env [{}] hosts [{}] memory {} MiB, time {} ms, output {} KiB",
                    p.name,
                    if p.builtin { " (built-in)" } else { "" },
                    &p.hash[..16],
                    dirs.join(", "),
                    p.grants.env.join(", "),
                    p.grants.hosts.join(", "),
                    p.grants.memory_mb,
                    p.grants.timeout_ms,
                    p.grants.max_output_kb,
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Inspect { name } => {
            let host = loaded?;
            match host.plugins().iter().find(|p| *p.name == *name) {
                Some(p) => {
                    say!("{}", serde_json::to_string_pretty(&describe(p))?);
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    let names: Vec<&str> = host.plugins().iter().map(|p| &*p.name).collect();
                    anyhow::bail!("no plugin named {name:?}; loaded: {}", names.join(", "))
                }
            }
        }
    }
}
