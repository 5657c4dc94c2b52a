//! One project to one component, per language. The build tools' own output
//! is the progress (on stderr); their failure is an error naming the step.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{Lang, Project, toolchain};

/// Build `project` (in `dir`) to `out`, installing its toolchain under
/// `toolchains` when missing.
pub fn build(project: &Project, dir: &Path, out: &Path, toolchains: &Path) -> Result<()> {
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let started = Instant::now();
    match project.lang {
        Lang::Rust => rust(project, dir, out)?,
        Lang::Python => super::python::build(project, dir, out, toolchains)?,
        Lang::Js => super::js::build(project, dir, out, toolchains)?,
    }
    let size = std::fs::metadata(out)
        .with_context(|| format!("the build wrote no component at {}", out.display()))?
        .len();
    eprintln!(
        "warden: built {} ({:.1} MB) in {:.1} s",
        out.display(),
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(super) fn run(cmd: &mut Command, what: &str) -> Result<()> {
    cmd.stdout(Stdio::from(std::io::stderr()));
    let status = cmd
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {what} ({:?}): {e}", cmd.get_program()))?;
    if !status.success() {
        bail!("{what} failed ({status}); see its output above");
    }
    Ok(())
}

/// `cargo build --release --target wasm32-wasip2`, then copy the cdylib.
fn rust(project: &Project, dir: &Path, out: &Path) -> Result<()> {
    toolchain::rust_target(dir)?;
    let cargo = std::env::var("WARDEN_CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "warden: cargo build --release --target {}",
        toolchain::RUST_TARGET
    );
    let output = Command::new(&cargo)
        .args(["build", "--release", "--target", toolchain::RUST_TARGET])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| {
            anyhow::anyhow!("cannot run cargo: {e}; install Rust with rustup (https://rustup.rs)")
        })?;
    if !output.status.success() {
        bail!(
            "cargo build failed ({}); see the errors above",
            output.status
        );
    }
    // Cargo names the artifact; this finds it whatever CARGO_TARGET_DIR says.
    let crate_name = project.name.replace('-', "_");
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["name"] == crate_name.as_str()
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(str::to_string))
        })
        .find(|f| f.ends_with(".wasm"));
    let Some(wasm) = wasm else {
        bail!(
            "cargo built no {crate_name}.wasm; is Cargo.toml's [lib] crate-type [\"cdylib\"] and its package named {}?",
            project.name
        );
    };
    std::fs::copy(&wasm, out)
        .with_context(|| format!("cannot copy {wasm} to {}", out.display()))?;
    Ok(())
}
