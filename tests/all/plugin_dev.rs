//! `warden plugin dev`: the author's edit → usable loop. It builds and
//! installs a `plugin new` project, then on each change to its sources
//! rebuilds and reinstalls it with the grants it was given; a change that
//! does not build leaves the installed plugin working as it was. Each step
//! is waited for by the line `plugin dev` prints for it, never by time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::Env;
use crate::plugin_deps::edit;
use crate::plugin_new::author;

/// `plugin dev` running, and the lines of its standard error.
struct Dev {
    child: Child,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Dev {
    /// Wait for a line containing `text` (and return it); panics with
    /// everything said so far if none comes within `within`.
    fn expect(&mut self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.said.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "plugin dev did not say {text:?} within {within:?}; it said:\n{}",
                    self.said.join("\n")
                ),
            }
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tool's output for the session's `hello.txt`.
fn call(env: &Env) -> String {
    let out = env
        .warden(&[
            "plugin",
            "call",
            "devtool",
            "devtool",
            "--args",
            r#"{"path": "hello.txt"}"#,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn plugin_dev_reinstalls_on_each_change_keeps_grants_and_survives_a_broken_build() {
    let env = Env::new();
    env.file("hello.txt", "one two\nthree\n");
    let home = env.root.path().join("author");
    std::fs::create_dir_all(&home).unwrap();
    author(&env, &home, &["plugin", "new", "devtool", "--lang", "rust"]);
    let project = home.join("devtool");
    let mut cmd = env.warden(&[
        "plugin",
        "dev",
        project.to_str().unwrap(),
        "--yes",
        "--dir",
        ".:ro",
    ]);
    cmd.env(
        "WARDEN_TOOLCHAINS",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/warden-toolchains"),
    )
    .env(
        "CARGO_TARGET_DIR",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugin-projects"),
    )
    .current_dir(env.project())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut dev = Dev {
        child,
        lines,
        said: Vec::new(),
    };
    let build = Duration::from_secs(600);
    dev.expect("watching devtool's sources", build);
    assert_eq!(
        call(&env),
        "hello.txt: 2 lines, 3 words (no label: WARDEN_EXAMPLE_LABEL is not granted)"
    );

    // A change: rebuilt, reinstalled, and the directory grant still holds
    // (the call reads hello.txt through it).
    let lib = project.join("src/lib.rs");
    edit(
        &lib,
        "{lines} lines, {words} words",
        "{lines} LINES and {words} WORDS",
    );
    let changed = dev.expect("changed; rebuilding devtool", build);
    assert!(changed.contains("src/lib.rs"), "{changed}");
    dev.expect("reinstalled devtool in", build);
    dev.expect("watching devtool's sources", build);
    assert_eq!(
        call(&env),
        "hello.txt: 2 LINES and 3 WORDS (no label: WARDEN_EXAMPLE_LABEL is not granted)"
    );

    // A change that does not compile: said, and the last good one stays.
    edit(&lib, "Ok(Output::text(", "Ok(Output::text(oops ");
    dev.expect("changed; rebuilding devtool", build);
    let failed = dev.expect(
        "the build failed, so the installed devtool is unchanged",
        build,
    );
    assert!(failed.contains("cargo build failed"), "{failed}");
    dev.expect("watching devtool's sources", build);
    assert_eq!(
        call(&env),
        "hello.txt: 2 LINES and 3 WORDS (no label: WARDEN_EXAMPLE_LABEL is not granted)"
    );

    // Fixed again: back to building.
    edit(&lib, "Ok(Output::text(oops ", "Ok(Output::text(");
    dev.expect("reinstalled devtool in", build);
}
