//! A Python project to a component: its `requirements.txt` installed into
//! the build (pure-Python wheels only, since nothing native runs in a
//! component), the whole standard library imported at build time so that
//! every module is there at call time, then componentize-py.
//!
//! What goes into `build/python/`:
//! - `deps/`: the requirements, installed by pip for CPython 3.14 on any
//!   platform (the interpreter componentize-py embeds), reinstalled only
//!   when `requirements.txt` changes;
//! - `stage/`: `_warden_preload.py` (imports the standard library, and
//!   every module of the packages it is given) and `_warden_main.py`, the
//!   module componentize-py wraps: it preloads the requirements' modules
//!   and the project's, then imports the project's `app`.
//!
//! Everything is imported at build time because componentize-py snapshots
//! the interpreter then, and at call time no module's files are there: a
//! module first imported inside a function would be missing (see
//! `templates/python/preload.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{Kind, Project, toolchain};

/// The Python version componentize-py embeds: what wheels are chosen for.
pub const PYTHON_VERSION: &str = "3.14";

const PRELOAD: &str = include_str!("../../templates/python/preload.py");

/// Build the Python `project` in `dir` to `out`.
pub fn build(project: &Project, dir: &Path, out: &Path, toolchains: &Path) -> Result<()> {
    let tool = toolchain::componentize_py(toolchains)?;
    let work = dir.join("build").join("python");
    let deps = requirements(dir, &work, &tool)?;
    let stage = work.join("stage");
    std::fs::create_dir_all(&stage)
        .with_context(|| format!("cannot create {}", stage.display()))?;
    let (world, export) = match project.kind {
        Kind::Tool => ("tool-plugin", "Tool"),
        Kind::Hook => ("hook-plugin", "Hooks"),
    };
    write(&stage.join("_warden_preload.py"), PRELOAD)?;
    let mut main =
        String::from("# Written by `warden plugin build`; do not edit.\nimport _warden_preload\n");
    if let Some(deps) = &deps {
        main.push_str(&format!(
            "_warden_preload.load_all({}, \"the requirement\")\n",
            python_list(&modules(deps, false))
        ));
    }
    main.push_str(&format!(
        "_warden_preload.load_all({}, \"the project's module\")\nfrom app import {export}  # noqa: F401\n",
        python_list(&modules(dir, true))
    ));
    write(&stage.join("_warden_main.py"), &main)?;
    eprintln!(
        "warden: componentize-py {} → {}",
        toolchain::COMPONENTIZE_PY,
        out.display()
    );
    let mut cmd = Command::new(&tool);
    cmd.args(["-d", "wit", "-w", world, "componentize", "-p", "."]);
    if let Some(deps) = &deps {
        cmd.arg("-p").arg(deps);
    }
    cmd.arg("-p")
        .arg(&stage)
        .arg("_warden_main")
        .arg("-o")
        .arg(out)
        .current_dir(dir)
        // The project's requirements are its dependencies, not whatever
        // virtual environment the author's shell has active.
        .env_remove("VIRTUAL_ENV");
    super::builder::run(&mut cmd, "componentize-py")
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Install `requirements.txt` (when there is one) into `work/deps`; that
/// folder, or `None` when the project has no requirements.
fn requirements(dir: &Path, work: &Path, componentize_py: &Path) -> Result<Option<PathBuf>> {
    let file = dir.join("requirements.txt");
    let deps = work.join("deps");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("pyproject.toml").exists() {
                eprintln!(
                    "warden: pyproject.toml's dependencies are not read; list them in requirements.txt (name==version, one a line)"
                );
            }
            return Ok(None);
        }
        Err(e) => bail!("cannot read {}: {e}", file.display()),
    };
    let unpinned = unpinned(&text);
    if !unpinned.is_empty() {
        eprintln!(
            "warden: requirements.txt leaves {} unpinned; pin each (name==version) so every build gets the same code",
            unpinned.join(", ")
        );
    }
    let marker = deps.join(".warden-requirements");
    // What they were installed for: the same requirements (pinned), for
    // the same interpreter, need nothing done.
    let installed_for = format!(
        "componentize-py {} · CPython {PYTHON_VERSION}\n{text}",
        toolchain::COMPONENTIZE_PY
    );
    if unpinned.is_empty() && std::fs::read_to_string(&marker).is_ok_and(|t| t == installed_for) {
        return Ok(Some(deps));
    }
    if deps.exists() {
        std::fs::remove_dir_all(&deps)
            .with_context(|| format!("cannot clear {}", deps.display()))?;
    }
    // pip lives beside componentize-py, in the toolchain's venv.
    let pip = componentize_py.with_file_name("pip");
    eprintln!(
        "warden: pip install -r requirements.txt (pure-Python wheels for CPython {PYTHON_VERSION})"
    );
    toolchain::run(
        Command::new(&pip)
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--progress-bar",
                "off",
                "--no-compile",
                "--only-binary=:all:",
                "--implementation",
                "py",
                "--abi",
                "none",
                "--platform",
                "any",
                "--python-version",
                PYTHON_VERSION,
                "--target",
            ])
            .arg(&deps)
            .arg("-r")
            .arg(&file)
            .current_dir(dir)
            .env_remove("VIRTUAL_ENV"),
        "pip install -r requirements.txt",
        "a component runs only pure-Python code: a package with native code (or with no wheel, only a source archive) cannot be used, and \"no matching distribution\" usually means that",
    )?;
    let installed = installed(&deps);
    eprintln!(
        "warden: Python dependencies: {}",
        if installed.is_empty() {
            "none".to_string()
        } else {
            installed.join(", ")
        }
    );
    write(&marker, &installed_for)?;
    Ok(Some(deps))
}

/// The modules at the top of `dir`: its `.py` files and its packages. Of
/// a project (`project`), not its tests, `app` (imported last) nor the
/// build's own folders.
fn modules(dir: &Path, project: bool) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().ok()?.is_dir();
            let stem = if is_dir {
                if project && !e.path().join("__init__.py").exists() {
                    return None;
                }
                name.clone()
            } else {
                name.strip_suffix(".py")?.to_string()
            };
            let identifier = stem
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && stem.chars().all(|c| c.is_alphanumeric() || c == '_');
            let own = matches!(
                stem.as_str(),
                "app" | "setup" | "conftest" | "build" | "bin" | "test" | "tests"
            ) || stem.starts_with("test_")
                || stem.ends_with("_test");
            (identifier && !(project && own) && stem != "__pycache__" && stem != "bin")
                .then_some(stem)
        })
        .collect();
    out.sort();
    out
}

/// `["a", "b"]`, for the generated module.
fn python_list(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".into())
}

/// The requirement lines that do not pin one version (`name==version`).
fn unpinned(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with('-'))
        .filter(|l| {
            let spec = l.split(';').next().unwrap_or(l);
            !(spec.contains("==") && !spec.contains(',') && !spec.contains('*'))
        })
        .map(str::to_string)
        .collect()
}

/// `name version` of each distribution pip installed into `deps`.
fn installed(deps: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(deps)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".dist-info")?;
            let (dist, version) = stem.rsplit_once('-')?;
            Some(format!("{dist} {version}"))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_pins_count_as_pinned() {
        let text = "# tools\ntabulate==0.9.0\nrequests>=2\nsix\nattrs==23.*\n-r other.txt\nidna==3.7 ; python_version > '3'\nx==1,<2\n";
        assert_eq!(
            unpinned(text),
            ["requests>=2", "six", "attrs==23.*", "x==1,<2"]
        );
    }
}
