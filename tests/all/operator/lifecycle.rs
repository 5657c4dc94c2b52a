//! An installed plugin's life after `plugin add`: `disable` keeps it with
//! its grants but loads it nowhere (a hook applies to no session), `enable`
//! brings it back as it was, `remove` deletes it. Each is seen where it
//! counts: in what the model is offered and in the audit trail.

use serde_json::json;

use crate::common::*;

/// Run `warden ARGS`; its stdout, after checking it succeeded.
fn ok(env: &Env, args: &[&str]) -> String {
    let out = env.warden(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "warden {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `plugin add PATH --name NAME EXTRA… -y`; its stdout.
fn install(env: &Env, path: &str, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["plugin", "add", path, "--name", name];
    args.extend_from_slice(extra);
    args.push("-y");
    ok(env, &args)
}

/// One prompt calling the fixture's `echo`: the tools offered, and whether
/// the installed hook ran around the call.
async fn one_call(env: &Env) -> (Vec<String>, bool) {
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]},
        {"text": "done"}
    ]));
    let _ = std::fs::remove_file(env.root.path().join("requests.jsonl"));
    let run = env.run_json("go");
    assert!(run.status.success(), "{}", run.stderr);
    let offered = offered(&env.requests()[0]);
    let trail = env.ledger().audit_trail(&run.session()).await.unwrap();
    (offered, trail.iter().any(|a| a.subject == "hook:hk"))
}

#[tokio::test]
async fn a_disabled_plugin_is_loaded_nowhere_until_enabled_and_a_removed_one_is_gone() {
    let env = Env::new();
    let (tool, hook) = (fixture_wasm(), plugin_wasm("warden_fixture_hooks.wasm"));
    install(&env, &tool, "fx", &["--tool", "echo:echo"]);
    install(&env, &hook, "hk", &[]);
    let (offered, hooked) = one_call(&env).await;
    assert!(offered.contains(&"echo".to_string()), "{offered:?}");
    assert!(hooked, "the installed hook ran around the call");

    // Switched off: listed as disabled, offered nowhere, the hook silent.
    assert!(ok(&env, &["plugin", "disable", "fx"]).contains("fx: disabled"));
    assert!(ok(&env, &["plugin", "disable", "hk"]).contains("hk: disabled"));
    assert!(ok(&env, &["plugin", "disable", "hk"]).contains("already disabled"));
    let listed = ok(&env, &["plugin", "list"]);
    assert!(listed.contains("fx (disabled, not loaded)"), "{listed}");
    assert!(listed.contains("hk (disabled, not loaded)"), "{listed}");
    env.cassette(json!([{"text": "done"}]));
    let _ = std::fs::remove_file(env.root.path().join("requests.jsonl"));
    let run = env.run_json("go");
    assert!(run.status.success(), "{}", run.stderr);
    assert!(!offered_now(&env).contains(&"echo".to_string()));

    // Back on, with the grants and mapping it had.
    ok(&env, &["plugin", "enable", "fx"]);
    ok(&env, &["plugin", "enable", "hk"]);
    let (offered, hooked) = one_call(&env).await;
    assert!(offered.contains(&"echo".to_string()), "{offered:?}");
    assert!(hooked);
    let inspected: serde_json::Value =
        serde_json::from_str(&ok(&env, &["plugin", "inspect", "fx"])).unwrap();
    let echo = inspected["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "echo")
        .unwrap();
    assert_eq!(echo["permission"], "echo");

    // Removed: gone from the list and the folder; removing again says what
    // is installed; a built-in is not removed this way.
    assert!(ok(&env, &["plugin", "remove", "hk"]).contains("removed hk"));
    assert!(!env.data().join("plugins").join("hk").exists());
    assert!(!ok(&env, &["plugin", "list"]).contains("hk"));
    for (name, said) in [("hk", "installed: fx"), ("read", "built-in")] {
        let out = env.warden(&["plugin", "remove", name]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("no plugin named"), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
    let (_, hooked) = one_call(&env).await;
    assert!(!hooked, "a removed hook runs no more");
}

/// The tools offered in the last run's first request.
fn offered_now(env: &Env) -> Vec<String> {
    offered(&env.requests()[0])
}

/// `plugin add --replace` is an upgrade: every grant and mapping the
/// operator gave the installed plugin is kept (flags add to them), its
/// disabled state too, and the consent shows what changes.
#[test]
fn an_upgrade_keeps_what_was_granted_and_shows_what_changes() {
    let env = Env::new();
    let tool = fixture_wasm();
    let granted = ["--dir", ".:ro", "--env", "A", "--tool", "echo:echo"];
    install(&env, &tool, "fx", &granted);
    let manifest = || -> serde_json::Value {
        let path = env.data().join("plugins").join("fx").join("plugin.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };

    // The same component, one more host: only the host line changes.
    let said = install(
        &env,
        &tool,
        "fx",
        &["--replace", "--host", "api.example.com"],
    );
    assert!(
        said.contains("against the installed fx (its grants kept):"),
        "{said}"
    );
    assert!(said.contains("- HTTP hosts: none"), "{said}");
    assert!(said.contains("+ HTTP hosts: api.example.com"), "{said}");
    assert!(!said.contains("- directories"), "{said}");
    let m = manifest();
    assert_eq!(m["grants"]["dirs"], json!([{"path": ".", "mode": "ro"}]));
    assert_eq!(m["grants"]["env"], json!(["A"]));
    assert_eq!(m["grants"]["hosts"], json!(["api.example.com"]));
    assert_eq!(m["tools"]["echo"]["permission"], "echo");

    // Nothing given, nothing changed.
    let said = install(&env, &tool, "fx", &["--replace"]);
    assert!(
        said.contains("against the installed fx: no change"),
        "{said}"
    );

    // Another component under the name: its tools differ, the grants stay,
    // and a disabled plugin stays disabled.
    ok(&env, &["plugin", "disable", "fx"]);
    let read = plugin_wasm("warden_tool_read.wasm");
    let said = install(&env, &read, "fx", &["--replace"]);
    assert!(said.contains("- sha256 "), "{said}");
    assert!(said.contains("- tool echo: permission echo"), "{said}");
    assert!(said.contains("+ tool read: "), "{said}");
    let m = manifest();
    assert_eq!(m["grants"]["env"], json!(["A"]));
    assert_eq!(m["disabled"], true);
    assert!(ok(&env, &["plugin", "list"]).contains("fx (disabled, not loaded)"));
}

/// `plugin call` runs one tool through the session's boundary: its output
/// on stdout, the decisions on stderr, the audit trail written; a rule's
/// denial, a hook's block and a bad name are refusals with exit status 1.
#[tokio::test]
async fn plugin_call_goes_through_the_rules_and_hooks_and_prints_the_output() {
    let env = Env::new();
    let call = |args: &[&str]| {
        let mut all = vec!["plugin", "call"];
        all.extend_from_slice(args);
        let out = env.warden(&all).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    env.config(json!({
        "plugins": [Env::fixtures_plugin(json!({}))],
        "permission": {"*": "allow", "env": "deny"}
    }));
    let (code, out, err) = call(&["fixtures", "echo", "--args", r#"{"x": 1}"#]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "{\"x\":1}\n");
    assert!(err.contains("permission echo allowed"), "{err}");
    assert!(err.contains("tool echo ran: ok"), "{err}");

    // Its audit trail is the ledger's, under a session of its own.
    let ledger = env.ledger();
    let session = ledger.sessions().await.unwrap();
    assert_eq!(session.len(), 1);
    let trail = ledger.audit_trail(&session[0].id).await.unwrap();
    assert_eq!(
        trail.iter().map(|a| a.stage.as_str()).collect::<Vec<_>>(),
        ["caller", "permission", "tool"]
    );
    assert_eq!(trail[0].subject, "cli:plugin call");

    // A rule's denial.
    let (code, out, err) = call(&["fixtures", "env"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("error: permission denied"), "{err}");

    // Bad input, each said with what to do.
    for (args, said) in [
        (
            &["fixtures", "nope"][..],
            "has no tool \"nope\"; its tools: ",
        ),
        (&["nobody", "echo"][..], "no loaded plugin \"nobody\""),
        (
            &["fixtures", "echo", "--args", "[1]"][..],
            "must be a JSON object",
        ),
        (&["fixtures", "echo", "--args", "{"][..], "is not JSON"),
    ] {
        let (code, _, err) = call(args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }

    // A hook that blocks the call stops it before the tool.
    env.config(json!({
        "plugins": [Env::fixtures_plugin(json!({})),
                    {"name": "hk", "path": plugin_wasm("warden_fixture_hooks.wasm"),
                     "grants": {"env": ["FIXTURE_HOOK_B"]}}],
        "permission": {"*": "allow"}
    }));
    let out = env
        .warden(&["plugin", "call", "fixtures", "echo"])
        .env("FIXTURE_HOOK_B", r#"{"label": "b", "before": "block"}"#)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("before hook:hk ran: block: fixture b blocks echo"),
        "{err}"
    );
    assert!(
        !err.contains("tool echo ran"),
        "the tool did not run: {err}"
    );
}
