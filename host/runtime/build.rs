//! Builds the guest components in `plugins/` for wasm32-wasip2, so that a
//! plain `cargo build` or `cargo test` of the host has them: the built-in
//! tools are embedded in the binary, and the test fixtures are found at
//! `WARDEN_PLUGIN_DIR`.
//!
//! Then compiles the built-in tools to native code with wasmtime, on the
//! engine settings the runtime uses by default, so that a first run on a
//! fresh data dir does not spend most of a second compiling them. Each
//! artifact is embedded with the sha256 of the component it was compiled
//! from, its own sha256 and the engine's compatibility fingerprint; the
//! runtime checks all three before it deserialises one (`src/builtin.rs`),
//! and compiles the component itself when any differs. If compiling here
//! fails, the build goes on without artifacts and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The engine settings the runtime uses (one file for both).
#[path = "src/engine_settings.rs"]
mod engine_settings;

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
    for dir in [
        "sdk",
        "toolkit",
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
        "webfetch",
        "hooks",
        "fixtures",
        "fixtures-raw",
        "fixtures-hooks",
        "adversary",
        "adversary-describe",
    ] {
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

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The built-ins are embedded from copies made here, from which their
    // hashes and artifacts are made too: the bytes embedded and the hashes
    // recorded for them always come from the same copy, however the files
    // in target/plugins change afterwards.
    for file in BUILTINS {
        std::fs::copy(out.join(file), out_dir.join(file))
            .unwrap_or_else(|e| panic!("cannot copy the built-in {file} into OUT_DIR: {e}"));
    }
    let entries = match precompile(&out_dir, &out_dir) {
        Ok(entries) => entries,
        Err(e) => {
            println!(
                "cargo:warning=the built-in plugins were not precompiled ({e}); a first run will compile them"
            );
            Vec::new()
        }
    };
    // Each artifact is a page-aligned static, so the runtime can run its
    // code where it lies in the binary instead of copying it (builtin.rs).
    let statics: String = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "static ARTIFACT_{i}: &Aligned<[u8; {}]> = &Aligned(*include_bytes!({:?}));\n",
                e.artifact_len, e.artifact_path
            )
        })
        .collect();
    let table: String = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "    ({:?}, &ARTIFACT_{i}.0, {:?}, {:?}, {:?}),\n",
                e.file, e.component_sha256, e.artifact_sha256, e.fingerprint
            )
        })
        .collect();
    std::fs::write(
        out_dir.join("precompiled.rs"),
        format!("{statics}/// Generated by build.rs: (component file, artifact, component sha256, artifact sha256, engine fingerprint).\npub static PRECOMPILED: &[(&str, &[u8], &str, &str, &str)] = &[\n{table}];\n"),
    )
    .expect("cannot write precompiled.rs in OUT_DIR");
}

/// The built-in tools' component files (`src/builtin.rs` embeds the same).
const BUILTINS: &[&str] = &[
    "warden_tool_read.wasm",
    "warden_tool_write.wasm",
    "warden_tool_edit.wasm",
    "warden_tool_list.wasm",
    "warden_tool_glob.wasm",
    "warden_tool_grep.wasm",
    "warden_tool_webfetch.wasm",
];

/// One built-in, compiled.
struct Precompiled {
    file: &'static str,
    artifact_path: String,
    artifact_len: usize,
    component_sha256: String,
    artifact_sha256: String,
    fingerprint: String,
}

/// Compile each built-in into `out_dir`.
fn precompile(plugins: &Path, out_dir: &Path) -> Result<Vec<Precompiled>, String> {
    let engine = wasmtime::Engine::new(&engine_settings::config(Some(
        (engine_settings::DEFAULT_MEMORY_MB << 20) as usize,
    )))
    .map_err(|e| format!("no engine: {e}"))?;
    let fingerprint = engine_settings::fingerprint(&engine);
    let mut entries = Vec::new();
    for file in BUILTINS {
        let bytes = std::fs::read(plugins.join(file)).map_err(|e| format!("{file}: {e}"))?;
        let artifact = engine
            .precompile_component(&bytes)
            .map_err(|e| format!("{file}: {e}"))?;
        let path = out_dir.join(format!("{file}.cwasm"));
        std::fs::write(&path, &artifact).map_err(|e| format!("{}: {e}", path.display()))?;
        entries.push(Precompiled {
            file,
            artifact_path: path.display().to_string(),
            artifact_len: artifact.len(),
            component_sha256: hex::encode(Sha256::digest(&bytes)),
            artifact_sha256: hex::encode(Sha256::digest(&artifact)),
            fingerprint: fingerprint.clone(),
        });
    }
    Ok(entries)
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
