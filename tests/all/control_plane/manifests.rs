//! Plugin projects and manifests: a tool names one literal permission
//! wherever that is written (the project's `warden-plugin.json`, `--tool`,
//! the config, an installed `plugin.json`), a project's own build steps
//! never run unasked, and installing says what the plugin gets first.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;

/// A Rust plugin project whose build.rs would leave `marker` behind.
fn project(env: &Env, name: &str, tools: Value, marker: &Path) -> PathBuf {
    let dir = env.root.path().join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("warden-plugin.json"),
        json!({"name": name, "lang": "rust", "kind": "tool", "tools": tools}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("build.rs"),
        format!(
            "fn main() {{ std::fs::write({:?}, \"ran\").unwrap(); }}\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "// the plugin\n").unwrap();
    dir
}

/// Put an already built component where `plugin build` would, newer than
/// the sources.
fn built(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("build")).unwrap();
    let out = dir.join("build").join(format!("{name}.wasm"));
    std::fs::copy(fixture_wasm(), &out).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&out)
        .unwrap()
        .set_modified(later)
        .unwrap();
}

fn add(env: &Env, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["plugin", "add"];
    all.extend_from_slice(args);
    let out = env.warden(&all).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_project_is_never_built_unasked_and_installing_says_what_it_gets() {
    let env = Env::new();
    let marker = env.root.path().join("BUILT");
    let dir = project(
        &env,
        "notes",
        json!({"echo": {"permission": "echo"}}),
        &marker,
    );
    let path = dir.display().to_string();

    // Never built: refused, naming --build; nothing of the project ran.
    let (ok, _, err) = add(&env, &[&path, "--yes"]);
    assert!(!ok);
    assert!(err.contains("pass --build"), "{err}");
    assert!(!marker.exists());

    // Built and up to date: installed from the component, still without
    // running the project's build; with nobody at a terminal, only with --yes.
    built(&dir, "notes");
    let (ok, out, err) = add(&env, &[&path, "--dir", ".:ro"]);
    assert!(!ok);
    assert!(err.contains("confirm with --yes"), "{err}");
    assert!(out.contains("notes will get:"), "{out}");
    assert!(!env.data().join("plugins/notes").exists());
    let (ok, out, err) = add(&env, &[&path, "--dir", ".:ro", "--yes"]);
    assert!(ok, "{err}");
    assert!(!marker.exists(), "the project's build.rs ran");
    let consent: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("will get:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert!(consent[0].starts_with("sha256 "), "{consent:?}");
    assert!(
        consent.contains(&"tool echo: permission echo"),
        "{consent:?}"
    );
    assert!(
        consent.contains(&"tool sleep: permission sleep (unmapped: always asked about)"),
        "{consent:?}"
    );
    assert!(
        consent.iter().any(|l| l.starts_with("directories: .:ro (")),
        "{consent:?}"
    );
    assert!(consent.contains(&"HTTP hosts: none"), "{consent:?}");

    // Sources newer than the component: refused until built again.
    std::thread::sleep(std::time::Duration::from_millis(10));
    let src = dir.join("src/lib.rs");
    std::fs::write(&src, "// changed\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
        .unwrap();
    let (ok, _, err) = add(&env, &[&path, "--name", "notes2", "--yes"]);
    assert!(!ok);
    assert!(err.contains("older than the project's sources"), "{err}");
    assert!(!marker.exists());
}

#[test]
fn a_tool_names_one_literal_permission_wherever_it_is_written() {
    let env = Env::new();
    let marker = env.root.path().join("BUILT");
    // The project's manifest.
    let dir = project(&env, "wide", json!({"echo": {"permission": "*"}}), &marker);
    built(&dir, "wide");
    let (ok, _, err) = add(&env, &[&dir.display().to_string(), "--yes"]);
    assert!(!ok);
    assert!(
        err.contains("warden-plugin.json")
            && err.contains("tools.echo.permission")
            && err.contains("is a glob"),
        "{err}"
    );
    // A flag.
    for flag in ["echo:*", "echo:re?d", "echo:hook", "echo:doom_loop"] {
        let (ok, _, err) = add(&env, &[&fixture_wasm(), "--tool", flag, "--yes"]);
        assert!(!ok, "{flag}");
        assert!(err.contains(&format!("--tool {flag:?}")), "{flag}: {err}");
    }
    // The config.
    env.config(
        json!({"plugins": [{"name": "fixtures", "path": fixture_wasm(),
                                     "tools": {"echo": {"permission": "ed*"}}}]}),
    );
    env.cassette(json!([{"text": "hi"}]));
    let run = env.run_json("hi");
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("tools.echo.permission"),
        "{}",
        run.stderr
    );
    assert!(env.requests().is_empty(), "no session ran");

    // An installed plugin's manifest, edited after install.
    env.config(json!({"permission": {"echo": "allow"}}));
    let (ok, _, err) = add(
        &env,
        &[
            &fixture_wasm(),
            "--name",
            "fx",
            "--tool",
            "echo:echo",
            "--yes",
        ],
    );
    assert!(ok, "{err}");
    env.cassette(json!([
        {"tool_calls": [{"id": "e", "name": "echo", "arguments": {"x": 1}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("echo");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(tool_results(&env.requests()[1])[0].2, r#"{"x":1}"#);
    let manifest = env.data().join("plugins/fx/plugin.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["tools"]["echo"]["permission"] = json!("*");
    std::fs::write(&manifest, m.to_string()).unwrap();
    let run = env.run_json("echo");
    assert!(!run.status.success());
    assert!(run.stderr.contains("is a glob"), "{}", run.stderr);
}
