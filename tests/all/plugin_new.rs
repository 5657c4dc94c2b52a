//! A plugin author's path, for Rust, Python and JavaScript: from an empty
//! folder outside the repository, `warden plugin new`, `warden plugin build`
//! (which installs the pinned toolchain on first use), `warden plugin add`
//! of the project folder, then scripted sessions through the new tool and
//! the new hook, with no file edited by hand. The toolchains and the Rust
//! build cache live in `target/` so re-runs are fast.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use warden_protocol::{SessionId, ToolState};

use crate::common::{Env, tool_parts, tool_results};

/// Where `plugin build` keeps its toolchains across test runs.
fn toolchains() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/warden-toolchains")
}

/// `warden ARGS` run in `dir`, as a plugin author would.
pub(crate) fn author(env: &Env, dir: &Path, args: &[&str]) -> String {
    let out = env
        .warden(args)
        .current_dir(dir)
        .env("WARDEN_TOOLCHAINS", toolchains())
        // Rust projects share one build cache, so their dependencies build once.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugin-projects"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "warden {args:?} failed in {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        dir.display()
    );
    stdout
}

/// `plugin new` then `plugin build` in a fresh folder; the project's path.
fn new_project(env: &Env, name: &str, lang: &str, hook: bool) -> PathBuf {
    let home = env.root.path().join("author");
    std::fs::create_dir_all(&home).unwrap();
    let mut args = vec!["plugin", "new", name, "--lang", lang];
    if hook {
        args.push("--hook");
    }
    let said = author(env, &home, &args);
    assert!(said.starts_with(&format!("created {name} ")), "{said}");
    let project = home.join(name);
    own_tests_pass(&project, lang);
    let said = author(env, &project, &["plugin", "build"]);
    let wasm = project.join("build").join(format!("{name}.wasm"));
    assert_eq!(said.trim(), format!("built ./build/{name}.wasm"));
    assert!(wasm.exists(), "no component at {}", wasm.display());
    if !hook {
        // The folder named from its parent, relatively, and absolutely from
        // elsewhere: the same component, said as it was spelled.
        std::fs::remove_file(&wasm).unwrap();
        let said = author(env, &home, &["plugin", "build", name]);
        assert_eq!(said.trim(), format!("built {name}/build/{name}.wasm"));
        assert!(wasm.exists(), "no component at {}", wasm.display());
        std::fs::remove_file(&wasm).unwrap();
        let absolute = project.to_str().unwrap();
        let said = author(env, env.root.path(), &["plugin", "build", absolute]);
        assert_eq!(said.trim(), format!("built {}", wasm.display()));
        assert!(wasm.exists(), "no component at {}", wasm.display());
    }
    project
}

/// The project's own tests, run natively as its README says, pass as written.
fn own_tests_pass(project: &Path, lang: &str) {
    let (program, args): (&str, &[&str]) = match lang {
        "rust" => ("cargo", &["test", "--quiet"]),
        "python" => ("python3", &["-m", "unittest"]),
        _ => ("node", &["--test"]),
    };
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(project)
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugin-projects"),
        )
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install it to run these tests): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed in {}:\n{}\n{}",
        project.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `plugin add PROJECT GRANTS…` from the session's folder.
fn add(env: &Env, project: &Path, grants: &[&str]) {
    let mut args = vec![
        "plugin",
        "add",
        project.to_str().unwrap(),
        "--replace",
        "--yes",
    ];
    args.extend_from_slice(grants);
    author(env, &env.project(), &args);
}

/// What a call ended as, or what the model was shown of it:
/// `(call id, failed, output or error)`.
type Outcome = (String, bool, String);

/// One scripted turn per call, then a closing answer. What each call ended
/// as in the ledger and what the model was shown, in call order, and the
/// session's id.
async fn session(
    env: &Env,
    calls: &[(&str, &str, Value)],
    vars: &[(&str, Option<&str>)],
) -> (Vec<Outcome>, Vec<Outcome>, SessionId) {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(
            |(id, tool, args)| json!({"tool_calls": [{"id": id, "name": tool, "arguments": args}]}),
        )
        .collect();
    turns.push(json!({"text": "done"}));
    env.cassette(json!(turns));
    let _ = std::fs::remove_file(env.root.path().join("requests.jsonl"));
    let run = env.run_json_with("use the new plugin", vars);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let id = run.session();
    let msgs = env.ledger().messages(&id).await.unwrap();
    let ended = tool_parts(&msgs)
        .into_iter()
        .map(|(id, state)| match state {
            ToolState::Completed { output, .. } => (id, false, output),
            ToolState::Error { error, .. } => (id, true, error),
            other => panic!("{id} did not end: {other:?}"),
        })
        .collect();
    let shown = env.requests().last().map(tool_results).unwrap_or_default();
    (ended, shown, id)
}

async fn tool_path(lang: &str) {
    let env = Env::new();
    let name = format!("count-{lang}");
    let project = new_project(&env, &name, lang, false);
    env.file("notes.txt", "alpha beta\ngamma\n");
    env.file("empty.txt", "");
    env.file("docs/guide.txt", "one\n");

    // Granted the working directory and the label variable.
    add(
        &env,
        &project,
        &["--dir", ".:ro", "--env", "WARDEN_EXAMPLE_LABEL"],
    );
    let (_, shown, id) = session(
        &env,
        &[
            ("c1", &name, json!({"path": "notes.txt"})),
            ("c2", &name, json!({"path": "empty.txt"})),
            ("c3", &name, json!({"path": "../outside.txt"})),
        ],
        &[("WARDEN_EXAMPLE_LABEL", Some("granted label"))],
    )
    .await;
    let dir = env.project();
    assert_eq!(
        shown,
        [
            (
                "c1".into(),
                false,
                "notes.txt: 2 lines, 3 words (granted label)".into()
            ),
            // The tool's own exception, its own words.
            ("c2".into(), true, expected_empty_error(lang)),
            (
                "c3".into(),
                true,
                format!(
                    "Error: invalid arguments: '../outside.txt' is outside the working directory {}; only paths inside it can be used",
                    dir.display()
                )
            ),
        ]
    );

    // What the guest printed (a traceback, a stack) is kept with the call.
    if lang != "rust" {
        let trail = env.ledger().audit_trail(&id).await.unwrap();
        let printed = trail
            .iter()
            .find(|a| a.call_id.as_deref() == Some("c2") && a.stage == "stderr")
            .unwrap_or_else(|| panic!("no stderr row for c2: {trail:?}"));
        assert_eq!(printed.subject, format!("plugin:{name}"));
        let text = printed.outcome.as_deref().unwrap_or("");
        assert!(
            text.contains(expected_empty_error(lang).trim_start_matches("Error: ")),
            "{text}"
        );
    }

    // Granted only docs/ and no variable: the sandbox holds. (An upgrade
    // keeps what was granted, so narrowing is a remove, then an add.)
    author(&env, &env.project(), &["plugin", "remove", &name]);
    add(&env, &project, &["--dir", "docs:ro"]);
    let (results, _, _) = session(
        &env,
        &[
            ("d1", &name, json!({"path": "docs/guide.txt"})),
            ("d2", &name, json!({"path": "notes.txt"})),
        ],
        &[("WARDEN_EXAMPLE_LABEL", Some("granted label"))],
    )
    .await;
    assert_eq!(
        results[0],
        (
            "d1".into(),
            false,
            "docs/guide.txt: 1 lines, 1 words (no label: WARDEN_EXAMPLE_LABEL is not granted)"
                .into()
        )
    );
    assert_eq!(results[1].0, "d2");
    assert!(
        results[1].1,
        "reading outside the grant must fail: {results:?}"
    );
    assert!(
        results[1].2.contains("notes.txt"),
        "the error names the file: {}",
        results[1].2
    );

    // The template's tool is a permission of its own name: an operator's
    // rule naming it holds, with its `path` argument as the pattern.
    env.file("docs/keys.secret", "k\n");
    env.config(json!({"permission": {"*": "allow", &name: {"*.secret": "deny"}}}));
    let (results, _, _) = session(
        &env,
        &[
            ("e1", &name, json!({"path": "docs/guide.txt"})),
            ("e2", &name, json!({"path": "docs/keys.secret"})),
        ],
        &[],
    )
    .await;
    assert!(!results[0].1, "{results:?}");
    assert!(
        results[1].1,
        "the rule naming the tool denies it: {results:?}"
    );
    assert_eq!(
        results[1].2,
        format!(
            "permission denied: `{name}` on `docs/keys.secret` is denied by the rule `{name} *.secret deny`; the call did not run"
        )
    );
}

/// What the model is shown when the tool meets an empty file.
fn expected_empty_error(lang: &str) -> String {
    match lang {
        "python" => "Error: ValueError: empty.txt is empty; there is nothing to count".into(),
        "js" => "Error: Error: empty.txt is empty; there is nothing to count".into(),
        _ => "Error: empty.txt is empty; there is nothing to count".into(),
    }
}

async fn hook_path(lang: &str) {
    let env = Env::new();
    let name = format!("guard-{lang}");
    let project = new_project(&env, &name, lang, true);
    env.file("notes.txt", "alpha\n");
    env.file("keys.secret", "hunter2\n");
    add(&env, &project, &[]);
    let (results, _, _) = session(
        &env,
        &[
            ("h1", "read", json!({"filePath": "./notes.txt"})),
            ("h2", "read", json!({"filePath": "keys.secret"})),
        ],
        &[],
    )
    .await;
    assert_eq!(
        results,
        [
            ("h1".into(), false, "     1\talpha\n".into()),
            (
                "h2".into(),
                true,
                format!(
                    "blocked by hook {name}: keys.secret is a .secret file; {name} keeps tools away from those"
                )
            ),
        ]
    );
    // The tool ran with the arguments the hook rewrote.
    let run_input = async |env: &Env| {
        let ledger = env.ledger();
        let sessions = ledger.sessions().await.unwrap();
        let msgs = ledger.messages(&sessions[0].id).await.unwrap();
        match tool_parts(&msgs).into_iter().next() {
            Some((_, ToolState::Completed { input, .. })) => input,
            other => panic!("h1 should have completed: {other:?}"),
        }
    };
    assert_eq!(run_input(&env).await, json!({"filePath": "notes.txt"}));

    crashing_hook(&env, &project, &name, lang).await;
}

/// The hook's author adds a bug: on `boom.txt` it raises (Python), throws
/// (JS) or panics (Rust). The call fails closed, the model sees the hook's
/// own words, the tool never runs, and what the guest printed is kept.
async fn crashing_hook(env: &Env, project: &Path, name: &str, lang: &str) {
    let (file, anchor, bug) = match lang {
        "python" => (
            "app.py",
            "    if path.endswith(\".secret\"):",
            "    if path == \"boom.txt\":\n        raise RuntimeError(\"the guard tripped on boom.txt\")\n",
        ),
        "js" => (
            "logic.js",
            "  if (path.endsWith('.secret'))",
            "  if (path === 'boom.txt') throw new Error('the guard tripped on boom.txt');\n",
        ),
        _ => (
            "src/lib.rs",
            "    if path.ends_with(\".secret\") {",
            "    if path == \"boom.txt\" {\n        panic!(\"the guard tripped on boom.txt\");\n    }\n",
        ),
    };
    let source = project.join(file);
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(
        text.contains(anchor),
        "{} changed: {text}",
        source.display()
    );
    std::fs::write(&source, text.replacen(anchor, &format!("{bug}{anchor}"), 1)).unwrap();
    author(env, project, &["plugin", "build"]);
    add(env, project, &[]);
    env.file("boom.txt", "the tool must not read this\n");

    let (results, shown, id) = session(
        env,
        &[
            ("b1", "read", json!({"filePath": "boom.txt"})),
            ("b2", "read", json!({"filePath": "notes.txt"})),
        ],
        &[],
    )
    .await;
    let said = match lang {
        "python" => "RuntimeError: the guard tripped on boom.txt",
        "js" => "Error: the guard tripped on boom.txt",
        _ => "the guard tripped on boom.txt",
    };
    assert_eq!(results.len(), 2, "{results:?}");
    let (call, failed, error) = &results[0];
    assert_eq!((call.as_str(), *failed), ("b1", true), "{results:?}");
    assert!(
        error.contains(&format!("hook {name}")) && error.contains(said),
        "the model should see which hook failed and its own message: {error}"
    );
    assert!(!error.contains("must not read"), "the tool ran: {error}");
    // The model is shown the same failure, and the next call still runs.
    assert_eq!(shown[0].0, "b1");
    assert!(shown[0].1 && shown[0].2.contains(said), "{shown:?}");
    assert_eq!(results[1], ("b2".into(), false, "     1\talpha\n".into()));

    // The whole story (a traceback, a stack, a panic's location) is kept.
    let trail = env.ledger().audit_trail(&id).await.unwrap();
    let printed = trail
        .iter()
        .find(|a| a.call_id.as_deref() == Some("b1") && a.stage == "stderr")
        .unwrap_or_else(|| panic!("no stderr row for b1: {trail:?}"));
    assert_eq!(printed.subject, format!("plugin:{name}"));
    let text = printed.outcome.as_deref().unwrap_or("");
    assert!(text.contains("the guard tripped on boom.txt"), "{text}");
    let whole = match lang {
        "python" => "Traceback",
        "js" => "decide",
        _ => "panicked at",
    };
    assert!(
        text.contains(whole),
        "stderr should carry the whole story: {text}"
    );
}

#[tokio::test]
async fn a_rust_tool_from_an_empty_folder() {
    tool_path("rust").await;
}

#[tokio::test]
async fn a_python_tool_from_an_empty_folder() {
    tool_path("python").await;
}

#[tokio::test]
async fn a_js_tool_from_an_empty_folder() {
    tool_path("js").await;
}

#[tokio::test]
async fn a_rust_hook_from_an_empty_folder() {
    hook_path("rust").await;
}

#[tokio::test]
async fn a_python_hook_from_an_empty_folder() {
    hook_path("python").await;
}

#[tokio::test]
async fn a_js_hook_from_an_empty_folder() {
    hook_path("js").await;
}

/// The SDK vendors the contract so it builds from anywhere; it must be the contract.
#[test]
fn sdk_wit_matches_contract() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let contract = std::fs::read_to_string(root.join("wit/v0.1.0/plugin.wit")).unwrap();
    let vendored = std::fs::read_to_string(root.join("plugins/sdk/wit/plugin.wit")).unwrap();
    assert!(
        contract == vendored,
        "plugins/sdk/wit/plugin.wit differs from wit/v0.1.0/plugin.wit, the version the SDK builds against; copy it: cp wit/v0.1.0/plugin.wit plugins/sdk/wit/"
    );
}

/// A toolchain install is one line of progress; its installer's own output
/// is shown only when it fails, its last lines, with what to do.
#[test]
fn a_failing_toolchain_install_shows_the_installer_s_last_lines_and_nothing_else() {
    let env = Env::new();
    let home = env.root.path().join("author");
    std::fs::create_dir_all(&home).unwrap();
    author(&env, &home, &["plugin", "new", "noisy", "--lang", "python"]);
    // A "python" that talks a lot, then fails.
    let fake = env.root.path().join("fake-python");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor i in $(seq 1 100); do echo \"chatter $i\"; done\necho 'no venv here' >&2\nexit 3\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env
        .warden(&["plugin", "build", "noisy"])
        .current_dir(&home)
        .env("WARDEN_TOOLCHAINS", env.root.path().join("toolchains"))
        .env("WARDEN_PYTHON", &fake)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let installing: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warden: installing componentize-py"))
        .collect();
    assert_eq!(installing.len(), 1, "{stderr}");
    assert!(
        !stderr.contains("chatter 60\n"),
        "only the last lines: {stderr}"
    );
    assert!(
        stderr.contains("chatter 100") && stderr.contains("no venv here"),
        "{stderr}"
    );
    assert!(
        stderr.contains("create a Python venv for componentize-py failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("WARDEN_PYTHON"),
        "says what to do: {stderr}"
    );
}
