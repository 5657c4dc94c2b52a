//! Bad input gets a clear error, never a panic, and the ledger stays readable.

use serde_json::json;

use crate::common::*;

fn assert_ledger_readable(env: &Env) {
    let out = env
        .warden(&["session", "list", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
}

fn no_panic(run: &Run) {
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[tokio::test]
async fn a_malformed_cassette_is_a_cli_error_that_names_the_problem() {
    let env = Env::new();
    std::fs::write(
        env.root.path().join("cassette.json"),
        r#"{"turns": [{"txt": "hi"}]}"#,
    )
    .unwrap();
    let run = env.run_json("hello");
    no_panic(&run);
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stderr.contains("unknown field `txt`"), "{}", run.stderr);
    assert!(run.stderr.contains("cassette.json"), "{}", run.stderr);
    assert_ledger_readable(&env);
    assert!(
        env.ledger().sessions().await.unwrap().is_empty(),
        "nothing was written for a prompt that could not run"
    );

    std::fs::write(env.root.path().join("cassette.json"), "not json").unwrap();
    let run = env.run_json("hello");
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr.contains("not a valid cassette"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_cassette_and_an_unknown_provider_are_named() {
    let env = Env::new();
    let run = Run::from(
        env.warden(&["run", "--model", "scripted:/no/such/file.json", "hi"])
            .output()
            .unwrap(),
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr.contains("cannot read /no/such/file.json"),
        "{}",
        run.stderr
    );
    let run = Run::from(
        env.warden(&["run", "--model", "nowhere/model", "hi"])
            .output()
            .unwrap(),
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr.contains("unknown provider \"nowhere\""),
        "{}",
        run.stderr
    );
    let run = Run::from(
        env.warden(&["run", "--model", "justaname", "hi"])
            .output()
            .unwrap(),
    );
    assert!(run.stderr.contains("provider/model"), "{}", run.stderr);
    assert_ledger_readable(&env);
}

#[tokio::test]
async fn bad_tool_calls_from_the_model_become_error_parts_and_the_model_is_told() {
    let env = Env::new();
    env.cassette(json!([
        {"tool_calls": [
            {"id": "c1", "name": "shell", "arguments": {"command": "rm -rf /"}},
            {"id": "c2", "name": "read", "arguments_raw": "{\"filePath\": \"a.txt\""},
            {"id": "c3", "name": "read", "arguments": "a.txt"},
            {"id": "c4", "name": "read", "arguments": {"filePath": "missing.txt"}},
            {"id": "c5", "name": "read", "arguments": {"path": "a.txt"}}
        ]},
        {"text": "I see the errors."}
    ]));
    let run = env.run_json("try things");
    no_panic(&run);
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    let by_id = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    for id in ["c1", "c2", "c3", "c4", "c5"] {
        assert!(by_id(id).1, "{id} is an error result");
    }
    assert_eq!(
        by_id("c1").2,
        "Error: unknown tool `shell`; the tools available are: read, write, edit, list, glob, grep"
    );
    assert!(
        by_id("c2").2.contains("the arguments are not valid JSON"),
        "{:?}",
        by_id("c2")
    );
    assert!(
        by_id("c3")
            .2
            .contains("must be a JSON object, but the model sent a string"),
        "{:?}",
        by_id("c3")
    );
    assert_eq!(by_id("c4").2, "Error: file not found: missing.txt");
    assert!(
        by_id("c5").2.contains("unknown field `path`"),
        "{:?}",
        by_id("c5")
    );
    for id in ["c1", "c2", "c3", "c4", "c5"] {
        assert_eq!(
            timeline(&env.ledger(), &run.session(), id).await,
            ["pending", "running", "error"],
            "{id}"
        );
    }
    assert_ledger_readable(&env);
}

#[test]
fn a_bad_config_is_refused_with_its_path_and_the_field() {
    let env = Env::new();
    env.config(json!({"agent": {"build": {"stepz": 3}}}));
    env.cassette(json!([{"text": "hi"}]));
    let run = env.run_json("hello");
    no_panic(&run);
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stderr.contains("warden.json"), "{}", run.stderr);
    assert!(
        run.stderr.contains("unknown field `stepz`"),
        "{}",
        run.stderr
    );

    env.config(json!({"plugins": [{"name": "x", "path": "nope.wasm"}]}));
    let run = env.run_json("hello");
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr.contains("plugin x: cannot read"),
        "{}",
        run.stderr
    );
    assert_ledger_readable(&env);
}

#[test]
fn unknown_sessions_are_named() {
    let env = Env::new();
    for args in [
        vec!["session", "show", "ses_nope"],
        vec!["session", "resume", "ses_nope"],
        vec!["trace", "ses_nope"],
    ] {
        let out = env.warden(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("no session ses_nope"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"));
    }
}

#[tokio::test]
async fn a_provider_error_ends_the_run_with_its_message_and_keeps_the_prompt() {
    let env = Env::new();
    env.cassette(json!([{"error": {"kind": "auth", "message": "invalid api key", "status": 401}}]));
    let run = env.run_json("hello");
    no_panic(&run);
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(run.finished()["error"], "invalid api key");
    let msgs = env.ledger().messages(&run.session()).await.unwrap();
    assert_eq!(msgs[0].text(), "hello", "the prompt is kept");
}

/// A file that is not a component is refused before anything is installed,
/// saying what it is and what to do: a core module (an Extism plugin, a
/// wasip1 build), a component of another world, and a file that is not
/// WebAssembly at all.
#[test]
fn plugin_add_of_a_core_module_another_world_or_not_wasm_says_what_it_is_and_what_to_do() {
    let env = Env::new();
    let cases: [(&str, &[u8], &[&str]); 3] = [
        (
            "core.wasm",
            b"\0asm\x01\0\0\0",
            &[
                "core WebAssembly module, not a component",
                "wasm32-wasip2",
                "Extism",
            ],
        ),
        (
            // A component of no world of warden's: it exports nothing.
            "other-world.wasm",
            b"\0asm\x0d\0\x01\0",
            &[
                "exports neither warden:plugin/tool nor warden:plugin/hooks",
                "it exports: nothing",
                "Build it against warden's world",
            ],
        ),
        (
            "script.wasm",
            b"#!/bin/sh\necho hi\n",
            &["not WebAssembly", "warden plugin build"],
        ),
    ];
    for (name, bytes, said) in cases {
        let path = env.file(name, bytes);
        let run = Run::from(
            env.warden(&["plugin", "add", path.to_str().unwrap(), "-y"])
                .output()
                .unwrap(),
        );
        no_panic(&run);
        assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
        for s in said {
            assert!(
                run.stderr.contains(s),
                "{name}: {s:?} not in {}",
                run.stderr
            );
        }
        let listed = Run::from(env.warden(&["plugin", "list"]).output().unwrap());
        assert!(listed.status.success(), "{}", listed.stderr);
        assert!(
            listed.stdout.contains("read (built-in)"),
            "{}",
            listed.stdout
        );
        let stem = name.trim_end_matches(".wasm");
        assert!(
            !listed.stdout.contains(stem),
            "{name} was installed: {}",
            listed.stdout
        );
    }
}
