//! Writing plugins: `warden plugin new` (a ready project per language and
//! kind, from templates compiled into the binary) and `warden plugin build`
//! (the project to a component, installing its pinned toolchain on first
//! use). `warden plugin add DIR` takes a built project through
//! [`component_of`], building it only when told to (`--build`).
//!
//! A project is a folder with `warden-plugin.json` (`name`, `lang`, `kind`,
//! and for a tool plugin how the permission rules see each tool); its
//! component is `build/NAME.wasm`.

mod builder;
mod js;
mod python;
mod template;
pub mod toolchain;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use warden_core::config::ToolSettings;

/// The file that marks a folder as a warden plugin project.
pub const MANIFEST: &str = "warden-plugin.json";

/// A guest language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// Rust with the warden-plugin-sdk crate (vendored into the project).
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// What a project exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Tools the model calls (world `tool-plugin`).
    Tool,
    /// `tool.execute.before` / `after` hooks (world `hook-plugin`).
    Hook,
}

/// `warden-plugin.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// The plugin's name: the default name `plugin add` installs it under.
    pub name: String,
    pub lang: Lang,
    pub kind: Kind,
    /// How the rules see each tool (its permission and which argument is its
    /// path or URL), installed with it by `plugin add DIR`; `--tool` flags
    /// override an entry. A tool left out is asked about when its plugin can
    /// reach files or hosts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolSettings>,
}

impl Project {
    /// Read `DIR/warden-plugin.json`.
    pub fn load(dir: &Path) -> Result<Project> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a warden plugin project: cannot read {}: {e}; create one with `warden plugin new NAME --lang rust|python|js`",
                dir.display(),
                path.display()
            )
        })?;
        let project: Project = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}; expected {{\"name\": \"…\", \"lang\": \"rust|python|js\", \"kind\": \"tool|hook\"}}",
                path.display()
            )
        })?;
        // The name becomes a file name (build/NAME.wasm) and a plugin name.
        if let Some(why) = bad_name(&project.name) {
            bail!("{}: {why}", path.display());
        }
        // The project's author names permissions: one literal name each.
        warden_core::config::check_tool_settings(&project.tools)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(project)
    }

    /// Where `plugin build` writes the component.
    pub fn component(&self, dir: &Path) -> PathBuf {
        dir.join("build").join(format!("{}.wasm", self.name))
    }
}

#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name (lowercase letters, digits, `-`, `_`); also its folder and its tool's id.
    pub name: String,
    /// The language of the project.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// A hook plugin (tool.execute.before) instead of a tool plugin.
    #[arg(long)]
    pub hook: bool,
    /// Where to create the project (default: ./NAME).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The project folder (default: the current directory).
    pub dir: Option<PathBuf>,
}

/// Why a name cannot be a plugin's, or `None` when it can.
fn bad_name(name: &str) -> Option<String> {
    let ok_first = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    let ok_rest = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    (!ok_first || !ok_rest || name.len() > 64).then(|| {
        format!(
            "{name:?} cannot be a plugin name: use 1 to 64 lowercase letters, digits, `-` and `_`, starting with a letter (e.g. wordcount)"
        )
    })
}

/// `warden plugin new`.
pub fn new(args: NewArgs) -> Result<ExitCode> {
    if let Some(why) = bad_name(&args.name) {
        bail!("{why}");
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} already exists and is not empty; choose another name or --dir",
            dir.display()
        );
    }
    let kind = if args.hook { Kind::Hook } else { Kind::Tool };
    create(&dir, &args.name, args.lang, kind)?;
    let what = match kind {
        Kind::Tool => format!("tool {}", args.name),
        Kind::Hook => "before hook".to_string(),
    };
    let test = match args.lang {
        Lang::Rust => "cargo test",
        Lang::Python => "python3 -m unittest",
        Lang::Js => "node --test",
    };
    let grants = match kind {
        Kind::Tool => " --dir .:ro --env WARDEN_EXAMPLE_LABEL",
        Kind::Hook => "",
    };
    say!(
        "created {} ({:?} {what}) in {}",
        args.name,
        args.lang,
        dir.display()
    );
    say!("next:");
    say!("  cd {}", dir.display());
    say!("  {test}                  # its own tests, natively");
    say!(
        "  warden plugin build          # → build/{}.wasm",
        args.name
    );
    say!("  warden plugin add .{grants}");
    Ok(ExitCode::SUCCESS)
}

/// Write a new project of `lang` and `kind` named `name` into `dir`.
pub fn create(dir: &Path, name: &str, lang: Lang, kind: Kind) -> Result<()> {
    let sdk_features = match kind {
        Kind::Tool => "",
        Kind::Hook => ", default-features = false, features = [\"hook\"]",
    };
    // The example tool is a permission of its own name, so an operator's
    // rule naming it holds (`"wc": "deny"`, `"wc": {"*.env": "deny"}`: its
    // `path` argument is the pattern). Mapping it to `read` instead makes
    // the operator's `read` rules apply to it.
    let tools = match kind {
        Kind::Tool => BTreeMap::from([(
            name.to_string(),
            ToolSettings {
                permission: Some(name.to_string()),
                path_arg: Some("path".into()),
                url_arg: None,
            },
        )]),
        Kind::Hook => BTreeMap::new(),
    };
    let project = Project {
        name: name.to_string(),
        lang,
        kind,
        tools,
    };
    for file in template::files(lang, kind) {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let text = template::render(file.text, name, name, sdk_features);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let manifest = dir.join(MANIFEST);
    std::fs::write(&manifest, serde_json::to_string_pretty(&project)? + "\n")
        .with_context(|| format!("cannot write {}", manifest.display()))?;
    Ok(())
}

/// `warden plugin build`.
pub fn build(args: BuildArgs, data_dir: &Path) -> Result<ExitCode> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("."));
    let out = build_dir(&dir, data_dir)?;
    // Said as the author spelled the folder.
    let shown = std::path::absolute(&dir)
        .ok()
        .and_then(|abs| out.strip_prefix(abs).ok().map(|rest| dir.join(rest)))
        .unwrap_or(out);
    say!("built {}", shown.display());
    Ok(ExitCode::SUCCESS)
}

/// Build the project in `dir`; the component's path.
///
/// The build tools run in the project's folder, so every path handed to
/// them is absolute: a relative `dir` (or data dir) would otherwise be read
/// again from inside the project.
pub fn build_dir(dir: &Path, data_dir: &Path) -> Result<PathBuf> {
    let absolute = |p: &Path| {
        std::path::absolute(p).with_context(|| format!("cannot resolve the path {}", p.display()))
    };
    let (dir, data_dir) = (absolute(dir)?, absolute(data_dir)?);
    let project = Project::load(&dir)?;
    let out = project.component(&dir);
    builder::build(&project, &dir, &out, &toolchain::root(&data_dir))?;
    Ok(out)
}

/// For `plugin add`: the component of `path`, and the project it was built
/// from (its name and tool mappings). A project folder is built first; a
/// file is taken as it is.
pub fn component_of(
    path: &Path,
    data_dir: &Path,
    build: bool,
) -> Result<(PathBuf, Option<Project>)> {
    if !path.is_dir() {
        return Ok((path.to_path_buf(), None));
    }
    let project = Project::load(path)?;
    let out = project.component(path);
    if build {
        // Building someone's project is running their code: say so.
        eprintln!(
            "warden: building {} ({}): this runs the project's own build steps (build.rs, npm or Python) as you, outside any sandbox",
            project.name,
            path.display()
        );
        let out = build_dir(path, data_dir)?;
        return Ok((out, Some(project)));
    }
    if !out.exists() {
        bail!(
            "{} has no built component ({}); building it runs the project's own code as you, so warden does not do it unasked: pass --build, or run `warden plugin build {}` first",
            path.display(),
            out.display(),
            path.display()
        );
    }
    if !up_to_date(path, &out) {
        bail!(
            "{} is older than the project's sources; pass --build to build it again (this runs the project's own build steps as you), or add the component file itself",
            out.display()
        );
    }
    Ok((out, Some(project)))
}

/// Whether `out` exists and is newer than every source file of the project.
fn up_to_date(dir: &Path, out: &Path) -> bool {
    let Ok(built) = std::fs::metadata(out).and_then(|m| m.modified()) else {
        return false;
    };
    sources(dir)
        .iter()
        .all(|s| s.modified.is_some_and(|t| t <= built))
}

/// Whether a file or folder of that name is one a build reads: not the
/// build's outputs (`build`, `target`), installed packages
/// (`node_modules`, a `venv`), caches, hidden files and folders (`.git`,
/// `.venv`, `.pytest_cache`, an editor's `.#lock`) or an editor's swap and
/// backup files.
fn is_source(name: &str) -> bool {
    !(name.starts_with('.')
        || matches!(
            name,
            "build" | "target" | "node_modules" | "__pycache__" | "venv" | "4913"
        )
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".pyc"))
}

/// One source file of a project, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    /// `None` when it could not be read (counts as changed).
    pub modified: Option<std::time::SystemTime>,
    pub len: u64,
}

/// Every source file of the project in `dir`, in path order: what a build
/// reads ([`is_source`]).
pub fn sources(dir: &Path) -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<Source>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push(Source {
                path: dir.to_path_buf(),
                modified: None,
                len: 0,
            });
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !is_source(&name.to_string_lossy()) {
                continue;
            }
            match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path(), out),
                Ok(m) => out.push(Source {
                    path: e.path(),
                    modified: m.modified().ok(),
                    len: m.len(),
                }),
                Err(_) => out.push(Source {
                    path: e.path(),
                    modified: None,
                    len: 0,
                }),
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_caches_hidden_and_editor_files_are_not_sources() {
        for name in [
            "app.py",
            "src",
            "Cargo.toml",
            "package.json",
            "requirements.txt",
        ] {
            assert!(is_source(name), "{name}");
        }
        for name in [
            "build",
            "target",
            "node_modules",
            ".git",
            ".venv",
            "venv",
            ".pytest_cache",
            "__pycache__",
            ".#app.py",
            "app.py~",
            ".app.py.swp",
            "4913",
            "x.pyc",
        ] {
            assert!(!is_source(name), "{name}");
        }
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(bad_name("wordcount"), None);
        assert_eq!(bad_name("word-count_2"), None);
        assert!(bad_name("WordCount").is_some());
        assert!(bad_name("2count").is_some());
        assert!(bad_name("").is_some());
        assert!(bad_name("a/b").is_some());
    }

    #[test]
    fn a_manifest_name_cannot_leave_the_project() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MANIFEST),
            r#"{"name": "../../x", "lang": "python", "kind": "tool"}"#,
        )
        .unwrap();
        let err = Project::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("cannot be a plugin name"), "{err}");
    }

    #[test]
    fn every_template_has_its_placeholders_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for kind in [Kind::Tool, Kind::Hook] {
                for file in template::files(lang, kind) {
                    let text = template::render(file.text, "demo", "demo", "");
                    for p in ["{{name}}", "{{tool_id}}", "{{sdk_features}}"] {
                        assert!(
                            !text.contains(p),
                            "{lang:?} {kind:?} {} keeps {p}",
                            file.path
                        );
                    }
                }
            }
        }
    }
}
