//! The real counterparts, installed on first use with pinned versions into
//! a cache under target/ (kept between runs). A missing npm or python3 is a
//! failure that says what to install, never a skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One install at a time within this test binary.
static INSTALLING: Mutex<()> = Mutex::new(());

fn cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-deps")
}

fn run(cmd: &mut Command, what: &str, needs: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what} ({e}); this test needs {needs}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `npm install PACKAGE@VERSION` into a folder of its own; returns the folder.
pub fn npm(package: &str, version: &str) -> PathBuf {
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = cache()
        .join("npm")
        .join(format!("{}@{version}", package.replace('/', "+")));
    let done = dir.join(".installed");
    if !done.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        run(
            Command::new("npm").args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                &dir.display().to_string(),
                &format!("{package}@{version}"),
            ]),
            &format!("npm install {package}@{version}"),
            "Node.js 20+ and npm (apt-get install nodejs npm)",
        );
        std::fs::write(&done, "").unwrap();
    }
    dir
}

/// A virtualenv with `pip install PACKAGE==VERSION`; returns its python.
pub fn python(package: &str, version: &str) -> PathBuf {
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = cache().join("py").join(format!("{package}-{version}"));
    let python = dir.join("bin").join("python");
    let done = dir.join(".installed");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        run(
            Command::new("python3").args(["-m", "venv", &dir.display().to_string()]),
            "python3 -m venv",
            "Python 3.10+ with venv (apt-get install python3 python3-venv)",
        );
        run(
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                &format!("{package}=={version}"),
            ]),
            &format!("pip install {package}=={version}"),
            "pip and access to PyPI",
        );
        std::fs::write(&done, "").unwrap();
    }
    python
}
