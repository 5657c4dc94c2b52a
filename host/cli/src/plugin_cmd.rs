//! `warden plugin list|inspect|verify|add|remove|disable|enable|new|build`:
//! what each plugin provides, its hash, and what it was granted; installing
//! one, switching it off and on, removing it.

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
    Add(AddArgs),
    /// Create a plugin project (tool or hook) in Rust, Python or JavaScript.
    New(crate::author::NewArgs),
    /// Build a plugin project to a component, installing its toolchain when missing.
    Build(crate::author::BuildArgs),
    /// Delete an installed plugin (its component and its grants).
    Remove { name: String },
    /// Switch an installed plugin off, hooks included: kept with its grants, loaded by no session until `enable`.
    Disable { name: String },
    /// Switch a disabled plugin back on.
    Enable { name: String },
}

#[derive(clap::Args)]
pub struct AddArgs {
    /// The component (.wasm) to install, or a plugin project folder (`warden plugin new`).
    pub path: std::path::PathBuf,
    /// Its name (default: the project's name, or the file name without extension).
    #[arg(long)]
    pub name: Option<String>,
    /// Grant a directory: PATH, PATH:ro or PATH:rw (`.` is the session's working directory). Repeatable.
    #[arg(long = "dir")]
    pub dirs: Vec<String>,
    /// Pass an environment variable through. Repeatable.
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// Allow outgoing HTTP to a host (`api.example.com`, `*.example.com`, `host:port`). Repeatable.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    #[arg(long)]
    pub memory_mb: Option<u64>,
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[arg(long)]
    pub max_output_kb: Option<u64>,
    /// How the permission rules see a tool: `TOOL:PERMISSION`, optionally
    /// with `:path=ARG` or `:url=ARG` naming the argument that holds its
    /// path or URL (e.g. `wordcount:read:path=file`). Repeatable. A tool of a
    /// plugin granted directories or hosts without one is asked about, never
    /// allowed by a `*` rule.
    #[arg(long = "tool")]
    pub tools: Vec<String>,
    /// For hooks: let calls through when the hook fails.
    #[arg(long)]
    pub fail_open: bool,
    /// Replace an installed plugin of the same name.
    #[arg(long)]
    pub replace: bool,
    /// Build the project folder first. Building runs the project's own code
    /// (build.rs, npm or Python steps) as you, so it is never done unasked.
    #[arg(long)]
    pub build: bool,
    /// Install without asking (required when not on a terminal): what the
    /// plugin gets is still printed first.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Check the component loads with these grants, then install it.
async fn add(
    args: AddArgs,
    config: &warden_core::Config,
    data_dir: &std::path::Path,
) -> Result<ExitCode> {
    use warden_core::config::{DirGrant, DirMode, Grants, PluginConfig};
    let project_name = if args.path.is_dir() {
        Some(crate::author::Project::load(&args.path)?.name)
    } else {
        None
    };
    let name = match args.name.clone().or(project_name) {
        Some(n) => n,
        None => args
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().replace(['.', ' '], "-"))
            .unwrap_or_else(|| "plugin".into()),
    };
    // Said before anything is built or compiled.
    let folder = app::plugin_dir(data_dir).join(&name);
    if folder.exists() && !args.replace {
        anyhow::bail!(
            "a plugin named {name} is already installed in {}; pass --replace to update it, or --name to install this one beside it",
            folder.display()
        );
    }
    let (path, project) = crate::author::component_of(&args.path, data_dir, args.build)?;
    let bytes =
        std::fs::read(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut grants = Grants::default();
    for d in &args.dirs {
        let (path, mode) = match d.rsplit_once(':') {
            Some((p, "ro")) => (p, DirMode::ReadOnly),
            Some((p, "rw")) => (p, DirMode::ReadWrite),
            _ => (d.as_str(), DirMode::ReadOnly),
        };
        grants.dirs.push(DirGrant {
            path: path.to_string(),
            mode,
        });
    }
    grants.env = args.env.clone();
    grants.hosts = args.hosts.clone();
    if let Some(m) = args.memory_mb {
        grants.memory_mb = m;
    }
    if let Some(t) = args.timeout_ms {
        grants.timeout_ms = t;
    }
    if let Some(o) = args.max_output_kb {
        grants.max_output_kb = o;
    }
    // The project's own mappings, then the flags over them.
    let mut tools = project.map(|p| p.tools).unwrap_or_default();
    tools.extend(tool_mappings(&args.tools).map_err(|e| anyhow::anyhow!(e))?);
    // Load it once exactly as it will run (integrity, contract, self-description).
    let staged = tempfile_path(&bytes)?;
    let mut trial = config.clone();
    trial.builtins = Some(false);
    trial.plugins = vec![PluginConfig {
        name: name.clone(),
        path: staged.clone(),
        sha256: None,
        grants: grants.clone(),
        tools: tools.clone(),
        fail_open: args.fail_open,
    }];
    // Compiling here, into the cache sessions load from, means no session pays for it.
    let started = std::time::Instant::now();
    eprintln!(
        "warden: compiling {name} ({:.1} MB) for this machine",
        bytes.len() as f64 / 1e6
    );
    let host = WasmHost::load(
        &trial.plugin_set(),
        Some(data_dir.join("cache").join("components")),
        None,
    )
    .await;
    let _ = std::fs::remove_file(&staged);
    let host = host?;
    let stats = host.compile_stats();
    eprintln!(
        "warden: {} in {:.1} s",
        if stats.compiled > 0 {
            "compiled and cached"
        } else {
            "already compiled (cache)"
        },
        started.elapsed().as_secs_f64()
    );
    let Some(loaded) = host.plugins().first() else {
        anyhow::bail!("{} loaded as no plugin", path.display());
    };
    // Installing is consent: the operator sees what the plugin will get.
    say!("{name} will get:");
    for line in consent_lines(loaded) {
        say!("  {line}");
    }
    if !args.yes {
        use std::io::IsTerminal as _;
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            anyhow::bail!(
                "not installed: confirm with --yes to install {name} with what is listed above (nobody is at a terminal to ask)"
            );
        }
        eprint!("install {name}? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("not installed");
            return Ok(ExitCode::from(1));
        }
    }
    let manifest = warden_runtime::plugin_dir::Manifest {
        sha256: None,
        grants,
        tools,
        fail_open: args.fail_open,
        disabled: false,
    };
    let folder = warden_runtime::plugin_dir::install(
        &app::plugin_dir(data_dir),
        &name,
        &bytes,
        manifest,
        args.replace,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    say!("installed {} in {}", name, folder.display());
    let mut shown = describe(loaded);
    shown["path"] = json!(folder.join("plugin.wasm").display().to_string());
    say!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(ExitCode::SUCCESS)
}

/// What a plugin about to be installed will get, one line each: its tools
/// and how the rules see them (or its hook), and every grant.
fn consent_lines(p: &LoadedPlugin) -> Vec<String> {
    let mut out = vec![format!("sha256 {}", p.hash)];
    match p.hook() {
        Some(h) => out.push(format!(
            "hook: before [{}] after [{}]{}",
            h.before.join(", "),
            h.after.join(", "),
            if h.fail_open { ", fails open" } else { "" }
        )),
        None => {
            for t in p.tools() {
                let seen_as = match &t.pattern {
                    warden_core::tool::PatternSource::Path(a) => {
                        format!(" on its path argument {a}")
                    }
                    warden_core::tool::PatternSource::Url(a) => format!(" on its URL argument {a}"),
                    _ => String::new(),
                };
                out.push(format!(
                    "tool {}: permission {}{seen_as}{}",
                    t.id,
                    t.permission,
                    if t.mapped {
                        ""
                    } else {
                        " (unmapped: always asked about)"
                    }
                ));
            }
        }
    }
    let g = &p.grants;
    let cwd = std::env::current_dir().unwrap_or_default();
    let dirs: Vec<String> = g
        .dirs
        .iter()
        .zip(resolved_dirs(p, &cwd))
        .map(|(d, r)| {
            let mode = if d.mode == warden_core::config::DirMode::ReadOnly {
                "ro"
            } else {
                "rw"
            };
            match r["resolved"].as_str() {
                Some(real) if real != d.path => format!("{}:{mode} ({real} here)", d.path),
                _ => format!("{}:{mode}", d.path),
            }
        })
        .collect();
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    out.push(format!("directories: {}", list(&dirs)));
    out.push(format!("environment variables: {}", list(&g.env)));
    out.push(format!("HTTP hosts: {}", list(&g.hosts)));
    out.push(format!(
        "limits: {} MiB memory, {} ms a call, {} KiB output",
        g.memory_mb, g.timeout_ms, g.max_output_kb
    ));
    out
}

/// `--tool TOOL:PERMISSION[:path=ARG|:url=ARG]` flags as tool settings.
fn tool_mappings(
    flags: &[String],
) -> Result<std::collections::BTreeMap<String, warden_core::config::ToolSettings>, String> {
    let mut out = std::collections::BTreeMap::new();
    for flag in flags {
        let bad = || {
            format!(
                "--tool {flag:?}: give TOOL:PERMISSION, optionally with :path=ARG or :url=ARG (e.g. wordcount:read:path=file)"
            )
        };
        let mut parts = flag.splitn(3, ':');
        let (Some(tool), Some(permission)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        if tool.is_empty() || permission.is_empty() {
            return Err(bad());
        }
        warden_core::permission::policy::check_name(permission)
            .map_err(|e| format!("--tool {flag:?}: {e}"))?;
        let mut settings = warden_core::config::ToolSettings {
            permission: Some(permission.to_string()),
            ..Default::default()
        };
        match parts.next().map(|a| a.split_once('=')) {
            None => {}
            Some(Some(("path", arg))) if !arg.is_empty() => settings.path_arg = Some(arg.into()),
            Some(Some(("url", arg))) if !arg.is_empty() => settings.url_arg = Some(arg.into()),
            Some(_) => return Err(bad()),
        }
        if out.insert(tool.to_string(), settings).is_some() {
            return Err(format!("--tool {tool} is given twice"));
        }
    }
    Ok(out)
}

fn tempfile_path(bytes: &[u8]) -> Result<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "warden-plugin-add-{}-{}.wasm",
        std::process::id(),
        warden_core::clock::now_ms()
    ));
    std::fs::write(&path, bytes)?;
    Ok(path)
}

/// Each directory grant as it resolves from `cwd` (through every link), or
/// why it cannot be used.
fn resolved_dirs(p: &LoadedPlugin, cwd: &std::path::Path) -> Vec<Value> {
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
        PluginCommand::Add(args) => return add(args, &config, &data_dir).await,
        other => other,
    };
    let loaded = app::load_host(&config, &data_dir).await;
    match command {
        PluginCommand::Add(args) => add(args, &config, &data_dir).await,
        PluginCommand::New(args) => crate::author::new(args),
        PluginCommand::Build(args) => crate::author::build(args, &data_dir),
        PluginCommand::Remove { .. }
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
