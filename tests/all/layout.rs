//! The layout's promises, checked from the repository itself: which crate
//! may depend on which (docs/architecture.md, "Crate graph"), and that no
//! source file grows past 600 lines of code without saying why at its top.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The names in a manifest's `[dependencies]` table (not dev or build).
fn dependencies(krate: &str) -> BTreeSet<String> {
    let path = root().join("host").join(krate).join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut inside = false;
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line
                .split(|c: char| c == '.' || c == '=' || c.is_whitespace())
                .next()
                .unwrap_or_default();
            names.insert(name.to_string());
        }
    }
    assert!(
        !names.is_empty(),
        "{} lists no dependencies",
        path.display()
    );
    names
}

const DRIVERS: [&str; 3] = ["rusqlite", "tokio-postgres", "deadpool-postgres"];
const WASMTIME: [&str; 3] = ["wasmtime", "wasmtime-wasi", "wasmtime-wasi-http"];

#[test]
fn the_crate_graph_keeps_its_boundaries() {
    let forbidden: &[(&str, &[&str])] = &[
        // The runtime builds none of the core, the ledger or a driver.
        ("runtime", &["warden-core", "warden-ledger", "warden-llm"]),
        ("runtime", &DRIVERS),
        // The core reaches storage, tools and models through their crates.
        ("core", &DRIVERS),
        ("core", &WASMTIME),
        ("core", &["warden-runtime", "reqwest"]),
        // The ledger knows nothing above it.
        (
            "ledger",
            &["warden-core", "warden-tool", "warden-llm", "warden-runtime"],
        ),
        ("ledger", &WASMTIME),
        // The tool model and the providers stand on the protocol alone.
        (
            "tool",
            &[
                "warden-core",
                "warden-ledger",
                "warden-llm",
                "warden-runtime",
            ],
        ),
        ("tool", &DRIVERS),
        ("tool", &WASMTIME),
        (
            "llm",
            &[
                "warden-core",
                "warden-ledger",
                "warden-tool",
                "warden-runtime",
            ],
        ),
        ("protocol", &["warden-core", "warden-ledger", "warden-tool"]),
    ];
    let mut crossed = Vec::new();
    for (krate, names) in forbidden {
        let deps = dependencies(krate);
        for name in *names {
            if deps.contains(*name) {
                crossed.push(format!("host/{krate} depends on {name}"));
            }
        }
    }
    // Of what ships, only the ledger links a database driver (the bench's
    // floors and the test harness are not shipped).
    for krate in [
        "protocol", "tool", "llm", "core", "runtime", "mcp", "server", "cli",
    ] {
        for driver in DRIVERS {
            if dependencies(krate).contains(driver) {
                crossed.push(format!("host/{krate} links the database driver {driver}"));
            }
        }
    }
    assert!(
        crossed.is_empty(),
        "the crate graph crossed its lines: {crossed:#?}"
    );
    assert!(dependencies("runtime").contains("warden-tool"));
    assert!(dependencies("core").contains("warden-ledger"));
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_600_lines_without_a_reason_at_its_top() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("host")).expect("host/") {
        let src = krate.expect("an entry").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "found only {} source files", files.len());
    let mut long = Vec::new();
    for file in files {
        let is_tests = file.file_name().is_some_and(|n| n == "tests.rs")
            || file.components().any(|c| c.as_os_str() == "tests");
        if is_tests {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let lines: Vec<&str> = text.lines().collect();
        // Code is what comes before a file's own test module.
        let code = lines
            .windows(2)
            .position(|w| w[0] == "#[cfg(test)]" && w[1].starts_with("mod tests"))
            .unwrap_or(lines.len());
        let reasoned = lines.iter().take(12).any(|l| l.starts_with("//! Long: "));
        if code > 600 && !reasoned {
            long.push(format!("{} ({code} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "over 600 lines with no `//! Long: <why>` line at the top: {long:#?}"
    );
}
