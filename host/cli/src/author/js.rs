//! A JavaScript project to a component: its npm dependencies installed
//! (when `package.json` lists any), the project bundled into one ES module
//! by esbuild, then componentize-js.
//!
//! componentize-js evaluates one module inside the component, where there
//! is no `node_modules` to resolve a bare `import 'pkg'` from. esbuild
//! inlines every import the module reaches (the project's own files and
//! its packages, CommonJS ones included) into `build/js/app.js`, leaving
//! out only the component's imports (`wasi:…`, `warden:…`), which the
//! host provides. Packages run as they would in a browser: `node:fs`,
//! `process` and other Node built-ins are not in a component, and esbuild
//! stops with the import that asks for one.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use super::{Kind, Project, toolchain};

/// Build the JavaScript `project` in `dir` to `out`.
pub fn build(project: &Project, dir: &Path, out: &Path, toolchains: &Path) -> Result<()> {
    dependencies(dir)?;
    let esbuild = toolchain::esbuild(toolchains)?;
    let tool = toolchain::componentize_js(toolchains)?;
    let work = dir.join("build").join("js");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let bundle = work.join("app.js");
    eprintln!(
        "warden: esbuild {} app.js → {}",
        toolchain::ESBUILD,
        bundle.display()
    );
    super::builder::run(
        Command::new(&esbuild)
            .args([
                "app.js",
                "--bundle",
                "--format=esm",
                "--platform=neutral",
                "--main-fields=module,main",
                "--keep-names",
                "--log-level=warning",
                "--external:wasi:*",
                "--external:warden:*",
            ])
            .arg(format!("--outfile={}", bundle.display()))
            .current_dir(dir),
        "esbuild",
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}. If it could not resolve an import: a package must be in package.json's dependencies; Node's built-ins (node:fs, process, Buffer) are not in a component, so use warden.js's fs and env instead"
        )
    })?;
    let world = match project.kind {
        Kind::Tool => "tool-plugin-js",
        Kind::Hook => "hook-plugin-js",
    };
    eprintln!(
        "warden: componentize-js {} → {}",
        toolchain::COMPONENTIZE_JS,
        out.display()
    );
    super::builder::run(
        Command::new(&tool)
            .arg(&bundle)
            .args(["--wit", "wit", "--world-name", world, "--out"])
            .arg(out)
            .current_dir(dir),
        "componentize-js",
    )
}

/// Install the dependencies `package.json` lists into `node_modules`
/// (`npm ci` when there is a lock file, so the build gets exactly the
/// locked versions), unless they were installed from the same
/// `package.json` and lock file. Development dependencies are installed
/// too (the project's own tests use them); esbuild bundles only what
/// `app.js` imports. Packages' install scripts are not run: nothing native runs in
/// a component, and the build runs no package's code on this machine.
fn dependencies(dir: &Path) -> Result<()> {
    let manifest = dir.join("package.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else {
        return Ok(());
    };
    let package: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", manifest.display()))?;
    let listed = package["dependencies"]
        .as_object()
        .is_some_and(|d| !d.is_empty());
    if !listed {
        return Ok(());
    }
    let lock = dir.join("package-lock.json");
    let marker = dir.join("node_modules").join(".warden-installed");
    // What was installed from: both files' text, so an edit saved while
    // npm ran, or a copy that kept old times, is still seen.
    let installed_from = |lock_text: &str| format!("{text}\n\0\n{lock_text}");
    let lock_text = std::fs::read_to_string(&lock).unwrap_or_default();
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == installed_from(&lock_text)) {
        return Ok(());
    }
    let ci = lock.exists();
    eprintln!(
        "warden: npm {} (the dependencies package.json lists; no install scripts)",
        if ci { "ci" } else { "install" }
    );
    toolchain::run(
        Command::new("npm")
            .arg(if ci { "ci" } else { "install" })
            .args([
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel",
                "error",
            ])
            .current_dir(dir),
        "npm's install of package.json's dependencies",
        "install Node.js 18 or later (with npm), and check package.json's dependencies and the npm registry",
    )?;
    // npm install may have written the lock file: record it as it is now.
    let lock_text = std::fs::read_to_string(&lock).unwrap_or_default();
    std::fs::write(&marker, installed_from(&lock_text))
        .with_context(|| format!("cannot write {}", marker.display()))?;
    Ok(())
}
