//! `warden plugin add`: check a component loads with the grants given,
//! show the operator what it will get (and, for an upgrade, what changes),
//! then install it in the plugins directory, pinned by its sha256.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use warden_runtime::WasmHost;
use warden_runtime::plugin::LoadedPlugin;

use crate::app;
use crate::plugin_cmd::{describe, resolved_dirs};

/// What the operator grants a plugin on the command line (`plugin add`,
/// `plugin dev`): each flag adds to what it gets.
#[derive(clap::Args, Clone, Default)]
pub struct GrantFlags {
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
}

#[derive(clap::Args)]
pub struct AddArgs {
    /// The component (.wasm) to install, or a plugin project folder (`warden plugin new`).
    pub path: std::path::PathBuf,
    /// Its name (default: the project's name, or the file name without extension).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub grant: GrantFlags,
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
    /// Leave out the installed plugin's description (`plugin dev`, which
    /// reinstalls on every change).
    #[arg(skip)]
    pub quiet: bool,
}

/// Check the component loads with these grants, then install it.
pub async fn add(
    args: AddArgs,
    config: &warden_core::Config,
    data_dir: &std::path::Path,
) -> Result<ExitCode> {
    use warden_core::config::{DirGrant, DirMode, Grants, PluginConfig, ToolSettings};
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
    // An upgrade keeps what the operator granted the installed one.
    let previous = match args.replace {
        true => crate::plugin_upgrade::installed(data_dir, &name)?,
        false => None,
    };
    let (path, project) = crate::author::component_of(&args.path, data_dir, args.build)?;
    let bytes =
        std::fs::read(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut grants = Grants::default();
    for d in &args.grant.dirs {
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
    grants.env = args.grant.env.clone();
    grants.hosts = args.grant.hosts.clone();
    if let Some(m) = args.grant.memory_mb {
        grants.memory_mb = m;
    }
    if let Some(t) = args.grant.timeout_ms {
        grants.timeout_ms = t;
    }
    if let Some(o) = args.grant.max_output_kb {
        grants.max_output_kb = o;
    }
    // The project's own mappings, then the installed ones over them (an
    // upgrade: those of tools it still provides), then the flags.
    let flags = tool_mappings(&args.grant.tools).map_err(|e| anyhow::anyhow!(e))?;
    let project_tools = project.map(|p| p.tools).unwrap_or_default();
    let none = Default::default();
    let (grants, old_tools, fail_open, disabled) = match &previous {
        Some((_, old)) => (
            crate::plugin_upgrade::grants(
                &old.grants,
                &grants,
                [
                    args.grant.memory_mb,
                    args.grant.timeout_ms,
                    args.grant.max_output_kb,
                ],
            ),
            &old.tools,
            args.fail_open || old.fail_open,
            old.disabled,
        ),
        None => (grants, &none, args.fail_open, false),
    };
    let mut tools = crate::plugin_upgrade::tools(project_tools.clone(), &none, flags.clone());
    // Load it exactly as it will run (integrity, contract, self-description).
    let staged = tempfile_path(&bytes)?;
    let trial = |tools: &std::collections::BTreeMap<String, ToolSettings>| {
        let mut trial = config.clone();
        trial.builtins = Some(false);
        trial.plugins = vec![PluginConfig {
            name: name.clone(),
            path: staged.clone(),
            sha256: None,
            grants: grants.clone(),
            tools: tools.clone(),
            fail_open,
        }];
        trial
    };
    let cache = data_dir.join("cache").join("components");
    // Compiling here, into the cache sessions load from, means no session pays for it.
    let started = std::time::Instant::now();
    eprintln!(
        "warden: compiling {name} ({:.1} MB) for this machine",
        bytes.len() as f64 / 1e6
    );
    let mut host = WasmHost::load(&trial(&tools).plugin_set(), Some(cache.clone()), None).await;
    if let Ok(h) = &host
        && !old_tools.is_empty()
    {
        // Now that its tools are known: the installed mappings of those it
        // still provides (loading again hits the compiled cache).
        let provided: Vec<String> = h
            .plugins()
            .first()
            .map(|p| p.tools().iter().map(|t| t.id.clone()).collect())
            .unwrap_or_default();
        let kept = old_tools
            .iter()
            .filter(|(id, _)| provided.contains(id))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let upgraded = crate::plugin_upgrade::tools(project_tools, &kept, flags);
        if upgraded != tools {
            tools = upgraded;
            host = WasmHost::load(&trial(&tools).plugin_set(), Some(cache), None).await;
        }
    }
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
    // Installing is consent: the operator sees what the plugin will get,
    // and for an upgrade what changes.
    let lines = consent_lines(loaded);
    say!("{name} will get:");
    for line in &lines {
        say!("  {line}");
    }
    if let Some((installed, _)) = &previous {
        let changes = crate::plugin_upgrade::changes(installed, &lines, data_dir).await;
        match changes.is_empty() {
            true => say!("against the installed {name}: no change"),
            false => {
                say!("against the installed {name} (its grants kept):");
                for line in changes {
                    say!("  {line}");
                }
            }
        }
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
        fail_open,
        disabled,
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
    if args.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let mut shown = describe(loaded);
    shown["path"] = json!(folder.join("plugin.wasm").display().to_string());
    say!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(ExitCode::SUCCESS)
}

/// What a plugin about to be installed will get, one line each: its tools
/// and how the rules see them (or its hook), and every grant.
pub(crate) fn consent_lines(p: &LoadedPlugin) -> Vec<String> {
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
