//! Builds the guest components in `plugins/` for wasm32-wasip2, so that a
//! plain `cargo build` or `cargo test` of the host has them: the built-in
//! tools are embedded in the binary, and the test fixtures are found at
//! `WARDEN_PLUGIN_DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.join("../..");
    let plugins = root.join("plugins");
    let target_dir = root.join("target").join("plugins");
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.lock").display()
    );
    for dir in ["sdk", "read", "fixtures", "adversary", "adversary-describe"] {
        let d = plugins.join(dir);
        if d.exists() {
            println!("cargo:rerun-if-changed={}", d.display());
        }
    }
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!("cargo:rerun-if-env-changed=WARDEN_SKIP_PLUGIN_BUILD");

    check_target();

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--workspace")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(plugins.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags and wrappers are for the host target (and for
    // clippy); the guests get a clean environment.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PROFILE_RELEASE_DEBUG",
        "CARGO_INCREMENTAL",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the plugins: {e}"));
    if !status.success() {
        panic!(
            "building the plugins in {} for {TARGET} failed (see the errors above)",
            plugins.display()
        );
    }
    let out = target_dir.join(TARGET).join("release");
    println!("cargo:rustc-env=WARDEN_PLUGIN_DIR={}", out.display());
}

/// Fail early, and say what to do, when the wasm target is missing.
fn check_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| PathBuf::from(s.trim()));
    if let Some(sysroot) = sysroot
        && !Path::new(&sysroot)
            .join("lib/rustlib")
            .join(TARGET)
            .exists()
    {
        panic!(
            "\n\nThe {TARGET} target is not installed for the toolchain at {}.\n\
             warden builds its plugins for it. Run, in the repository:\n\n    rustup target add {TARGET}\n\n\
             (the README's commands do this for you)\n",
            sysroot.display()
        );
    }
}
