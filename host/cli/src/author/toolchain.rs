//! The pinned toolchains `warden plugin build` uses, installed on first use
//! into a warden-managed folder (`WARDEN_TOOLCHAINS`, else
//! `<data dir>/toolchains`) and reused afterwards: componentize-py from PyPI
//! in a venv of its own, componentize-js from npm in a folder of its own,
//! esbuild from npm the same way, and the `wasm32-wasip2` target through
//! rustup.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// componentize-py, from PyPI.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// componentize-js, from npm. (`jco componentize` 1.35.0 cannot read WIT
/// files, so warden runs componentize-js itself.)
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// esbuild, from npm: bundles a JS project and its npm dependencies into
/// one module before componentize-js.
pub const ESBUILD: &str = "0.28.2";
/// The Rust target a guest builds for.
pub const RUST_TARGET: &str = "wasm32-wasip2";

/// Where toolchains live.
pub fn root(data_dir: &Path) -> PathBuf {
    let root = match std::env::var_os("WARDEN_TOOLCHAINS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => data_dir.join("toolchains"),
    };
    // The tools run from the project's folder: a relative root would be
    // read from there.
    std::path::absolute(&root).unwrap_or(root)
}

/// Run a command that installs something (a toolchain, or a project's
/// dependencies). Its output is kept, not shown:
/// the install is one line of progress, and the output is printed (its
/// last lines) only when the command fails, to say why.
pub(super) fn run(cmd: &mut Command, what: &str, needs: &str) -> Result<()> {
    let out = cmd.output().map_err(|e| {
        anyhow::anyhow!("cannot run {:?} to {what}: {e}; {needs}", cmd.get_program())
    })?;
    if !out.status.success() {
        let mut said = String::from_utf8_lossy(&out.stdout).into_owned();
        said.push_str(&String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = said.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        eprintln!("{}", tail.join("\n"));
        bail!(
            "{what} failed ({}); its last output is above; {needs}",
            out.status
        );
    }
    Ok(())
}

/// Install into `dir` once: under a lock (two builds at once wait for each
/// other), with a marker written last so a half-finished install is redone.
fn install_once(dir: &Path, label: &str, install: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let marker = dir.join(".warden-installed");
    if marker.exists() {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create the toolchain folder {}", parent.display()))?;
    let lock_path = dir.with_extension("lock");
    let lock = File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if marker.exists() {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("cannot clear the unfinished install {}", dir.display()))?;
    }
    eprintln!(
        "warden: installing {label} into {} (once, often a minute; later builds reuse it)…",
        dir.display()
    );
    let started = std::time::Instant::now();
    install(dir)?;
    std::fs::write(&marker, label).with_context(|| format!("cannot write {}", marker.display()))?;
    eprintln!(
        "warden: installed {label} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `componentize-py` executable, installed from PyPI when missing.
pub fn componentize_py(root: &Path) -> Result<PathBuf> {
    let dir = root.join(format!("componentize-py-{COMPONENTIZE_PY}"));
    install_once(
        &dir,
        &format!("componentize-py {COMPONENTIZE_PY} (PyPI)"),
        |dir| {
            let python = std::env::var("WARDEN_PYTHON").unwrap_or_else(|_| "python3".into());
            run(
                Command::new(&python).arg("-m").arg("venv").arg(dir),
                "create a Python venv for componentize-py",
                "install Python 3 (with its venv module), or set WARDEN_PYTHON to one",
            )?;
            run(
                Command::new(dir.join("bin").join("pip"))
                    .args([
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        "--progress-bar",
                        "off",
                    ])
                    .arg(format!("componentize-py=={COMPONENTIZE_PY}")),
                &format!("pip install componentize-py=={COMPONENTIZE_PY}"),
                "check that PyPI is reachable",
            )
        },
    )?;
    Ok(dir.join("bin").join("componentize-py"))
}

/// The `componentize-js` executable, installed from npm when missing.
pub fn componentize_js(root: &Path) -> Result<PathBuf> {
    npm_tool(
        root,
        "@bytecodealliance/componentize-js",
        COMPONENTIZE_JS,
        "componentize-js",
    )
}

/// The `esbuild` executable (it bundles a JS project's npm dependencies),
/// installed from npm when missing.
pub fn esbuild(root: &Path) -> Result<PathBuf> {
    npm_tool(root, "esbuild", ESBUILD, "esbuild")
}

/// `package@version` installed from npm into a folder of its own under
/// `root`; its executable `bin`.
fn npm_tool(root: &Path, package: &str, version: &str, bin: &str) -> Result<PathBuf> {
    let short = package.rsplit('/').next().unwrap_or(package);
    let dir = root.join(format!("{short}-{version}"));
    install_once(&dir, &format!("{short} {version} (npm)"), |dir| {
        std::fs::create_dir_all(dir)?;
        run(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel",
                    "error",
                    "--prefix",
                ])
                .arg(dir)
                .arg(format!("{package}@{version}")),
            &format!("npm install {package}@{version}"),
            "install Node.js 18 or later (with npm) and check that the npm registry is reachable",
        )
    })?;
    Ok(dir.join("node_modules").join(".bin").join(bin))
}

/// Make sure the toolchain that builds `project` has the wasm target,
/// adding it with rustup when it is missing.
pub fn rust_target(project: &Path) -> Result<()> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .current_dir(project)
        .output()
        .map_err(|e| {
            anyhow::anyhow!("cannot run rustc: {e}; install Rust with rustup (https://rustup.rs)")
        })?;
    if !sysroot.status.success() {
        bail!(
            "rustc --print sysroot failed: {}",
            String::from_utf8_lossy(&sysroot.stderr).trim()
        );
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(RUST_TARGET).exists() {
        return Ok(());
    }
    eprintln!("warden: adding the {RUST_TARGET} target (rustup target add {RUST_TARGET})");
    run(
        Command::new("rustup")
            .args(["target", "add", RUST_TARGET])
            .current_dir(project),
        &format!("rustup target add {RUST_TARGET}"),
        "install Rust with rustup (https://rustup.rs), or add the target to your toolchain by hand",
    )
}
