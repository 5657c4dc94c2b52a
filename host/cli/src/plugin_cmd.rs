//! `warden plugin list|inspect|verify|add|dev|remove|disable|enable|new|build|call`:
//! what each plugin provides, its hash, and what it was granted; installing
//! one, switching it off and on, removing it.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};
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
    /// Load every plugin (integrity, contract, self-description) and flag
    /// what would quietly not work: dead rules, tools without a permission
    /// mapping, plugins not pinned by sha256, grants covering warden's own files.
    Verify {
        /// Exit with status 1 when anything is flagged (for CI).
        #[arg(long)]
        strict: bool,
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// Install a component (.wasm) or a plugin project folder (built first) with its grants, pinned by sha256.
    Add(crate::plugin_add::AddArgs),
    /// Create a plugin project (tool or hook) in Rust, Python or JavaScript.
    New(crate::author::NewArgs),
    /// Build a plugin project to a component, installing its toolchain when missing.
    Build(crate::author::BuildArgs),
    /// Build and install a plugin project, then rebuild and reinstall it on every change to its sources (keeping its grants) until Ctrl-C.
    Dev(crate::plugin_dev::DevArgs),
    /// Call one tool of a plugin through the same boundary as a session (rules, hooks, grants, limits, audit), printing its output.
    Call(crate::plugin_call::CallArgs),
    /// Delete an installed plugin (its component and its grants).
    Remove { name: String },
    /// Switch an installed plugin off, hooks included: kept with its grants, loaded by no session until `enable`.
    Disable { name: String },
    /// Switch a disabled plugin back on.
    Enable { name: String },
}

/// Each directory grant as it resolves from `cwd` (through every link), or
/// why it cannot be used.
pub(crate) fn resolved_dirs(p: &LoadedPlugin, cwd: &std::path::Path) -> Vec<Value> {
    p.grants
        .dirs
        .iter()
        .map(
            |d| match warden_runtime::sandbox::resolve_dir(&d.path, cwd.to_str(), &[]) {
                Ok(real) => json!({"path": d.path, "resolved": real.display().to_string()}),
                Err(e) => json!({"path": d.path, "error": e}),
            },
        )
        .collect()
}

pub fn describe(p: &LoadedPlugin) -> Value {
    let cwd = std::env::current_dir().unwrap_or_default();
    json!({
        "name": &*p.name,
        "builtin": p.builtin,
        "path": p.path.as_ref().map(|p| p.display().to_string()),
        "sha256": p.hash,
        "size": p.size,
        "contract": p.contract,
        "tools": p.tools().iter().map(|t| json!({
            "id": t.id, "description": t.description, "parameters": t.parameters,
            "permission": t.permission, "pattern": t.pattern, "mapped": t.mapped,
        })).collect::<Vec<_>>(),
        "hooks": p.hook().map(|h| json!({"before": h.before, "after": h.after, "fail_open": h.fail_open})),
        "grants": p.grants,
        "dirs_resolved": resolved_dirs(p, &cwd),
    })
}

pub async fn plugin(command: PluginCommand, common: Common) -> Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let data_dir = app::data_dir(&common)?;
    let installed = app::plugin_dir(&data_dir);
    let command = match command {
        PluginCommand::New(args) => return crate::author::new(args),
        PluginCommand::Build(args) => return crate::author::build(args, &data_dir),
        PluginCommand::Call(args) => return crate::plugin_call::call(args, common).await,
        PluginCommand::Remove { name } => {
            let folder = warden_runtime::plugin_dir::remove(&installed, &name)
                .map_err(|e| anyhow::anyhow!(e))?;
            say!("removed {name} ({})", folder.display());
            return Ok(ExitCode::SUCCESS);
        }
        PluginCommand::Disable { ref name } | PluginCommand::Enable { ref name } => {
            let off = matches!(command, PluginCommand::Disable { .. });
            let changed = warden_runtime::plugin_dir::set_disabled(&installed, name, off)
                .map_err(|e| anyhow::anyhow!(e))?;
            let state = if off { "disabled" } else { "enabled" };
            match changed {
                true => say!("{name}: {state}; it applies from each process's next start"),
                false => say!("{name} was already {state}"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        other => other,
    };
    let loaded = app::config(&common, &cwd)?;
    let config_path = app::config_path(&loaded);
    let config = loaded.config;
    let command = match command {
        PluginCommand::Add(args) => return crate::plugin_add::add(args, &config, &data_dir).await,
        PluginCommand::Dev(args) => return crate::plugin_dev::dev(args, &config, &data_dir).await,
        other => other,
    };
    let loaded = app::load_host(&config, &data_dir).await;
    match command {
        PluginCommand::Add(args) => crate::plugin_add::add(args, &config, &data_dir).await,
        PluginCommand::New(args) => crate::author::new(args),
        PluginCommand::Build(args) => crate::author::build(args, &data_dir),
        PluginCommand::Call(_)
        | PluginCommand::Dev(_)
        | PluginCommand::Remove { .. }
        | PluginCommand::Disable { .. }
        | PluginCommand::Enable { .. } => {
            unreachable!("answered above")
        }
        PluginCommand::Verify { strict, format } => match loaded {
            Ok(host) => {
                let found = crate::plugin_verify::findings(
                    &config,
                    &host,
                    &data_dir,
                    config_path.as_deref(),
                    &cwd,
                );
                let s = host.compile_stats();
                if format == Format::Json {
                    say!(
                        "{}",
                        serde_json::to_string_pretty(&json!({
                            "plugins": host.plugins().iter().map(|p| json!({
                                "name": &*p.name, "sha256": p.hash, "contract": p.contract,
                                "findings": found.iter().filter(|f| f.plugin.as_deref() == Some(&*p.name)).map(|f| f.kind).collect::<Vec<_>>(),
                            })).collect::<Vec<_>>(),
                            "findings": found,
                            "compiled": s.compiled,
                            "from_cache": s.cache_hits,
                        }))?
                    );
                } else {
                    let mut t = crate::table::table(&["status", "plugin", "sha256", "contract"]);
                    for p in host.plugins() {
                        let kinds: Vec<&str> = found
                            .iter()
                            .filter(|f| f.plugin.as_deref() == Some(&*p.name))
                            .map(|f| f.kind)
                            .collect::<std::collections::BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        let status = if kinds.is_empty() {
                            "ok".to_string()
                        } else {
                            kinds.join(",")
                        };
                        t.add_row(vec![
                            status,
                            p.name.to_string(),
                            p.hash.clone(),
                            p.contract.to_string(),
                        ]);
                    }
                    say!("{t}");
                    for f in &found {
                        say!("warning: {}: {}", f.kind, f.message);
                    }
                    say!(
                        "{} plugins verified ({} compiled, {} from the cache){}{}",
                        host.plugins().len(),
                        s.compiled,
                        s.cache_hits,
                        config_path.map_or(String::new(), |p| format!("; config {}", p.display())),
                        if found.is_empty() {
                            String::new()
                        } else {
                            format!("; {} warnings", found.len())
                        }
                    );
                }
                Ok(if strict && !found.is_empty() {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                })
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
                let resolved = resolved_dirs(p, &cwd);
                let dirs: Vec<String> = p
                    .grants
                    .dirs
                    .iter()
                    .zip(&resolved)
                    .map(|(d, r)| {
                        format!(
                            "{}:{} → {}",
                            d.path,
                            if d.mode == warden_core::config::DirMode::ReadOnly {
                                "ro"
                            } else {
                                "rw"
                            },
                            r["resolved"].as_str().map_or_else(
                                || format!("unusable: {}", r["error"]),
                                str::to_string
                            )
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
            for (name, why) in host.skipped() {
                say!("{name} (built-in, not loaded)  {why}");
            }
            for (p, m) in warden_runtime::plugin_dir::installed(&installed)? {
                if m.disabled {
                    say!(
                        "{} (disabled, not loaded)  `warden plugin enable {}` switches it back on",
                        p.name,
                        p.name
                    );
                }
            }
            for (name, server) in &config.mcp {
                say!("{}", crate::mcp_cmd::describe_server(name, server));
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
