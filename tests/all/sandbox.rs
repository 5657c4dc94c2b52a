//! The sandbox against plugins written to misbehave: each ends as an error
//! tool part naming the cause, and the host keeps serving — a normal call
//! right after succeeds.

use serde_json::{Value, json};
use warden_protocol::ToolState;

use crate::common::*;

/// Turn 1 runs `calls` (id, tool, args) at once; turn 2 runs a normal `echo`;
/// turn 3 answers. Returns the results the model saw after turn 1, by id.
async fn misbehave(env: &Env, calls: &[(&str, &str, Value)]) -> Vec<(String, bool, String)> {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, tool, args)| json!({"id": id, "name": tool, "arguments": args}))
        .collect();
    env.cassette(json!([
        {"tool_calls": calls},
        {"tool_calls": [{"id": "after", "name": "echo", "arguments": {"still": "here"}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("misbehave");
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let reqs = env.requests();
    assert_eq!(reqs.len(), 3, "the loop went on after the failures");
    // The host kept serving: the normal call right after succeeded.
    let after = tool_results(&reqs[2]);
    let last = after.iter().find(|r| r.0 == "after").unwrap();
    assert_eq!((last.1, last.2.as_str()), (false, r#"{"still":"here"}"#));
    let results = tool_results(&reqs[1]);
    for (id, is_error, output) in &results {
        assert!(is_error, "{id} should have failed: {output}");
    }
    // Each failing call went pending → running → error.
    let ledger = env.ledger();
    let session = run.session();
    for (id, _, _) in &results {
        assert_eq!(
            timeline(&ledger, &session, id).await,
            ["pending", "running", "error"],
            "{id}"
        );
    }
    results
}

fn output<'a>(results: &'a [(String, bool, String)], id: &str) -> &'a str {
    &results
        .iter()
        .find(|r| r.0 == id)
        .unwrap_or_else(|| panic!("no result for {id}"))
        .2
}

#[tokio::test]
async fn runaway_guests_are_stopped_and_named() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"timeout_ms": 1000, "memory_mb": 32, "max_output_kb": 64}))]}));
    let results = misbehave(
        &env,
        &[
            ("loop", "spin", json!({})),
            ("bomb", "alloc", json!({"mb": 256})),
            ("deep", "recurse", json!({"depth": 100_000_000u64})),
            ("boom", "panic", json!({"message": "the guest gave up"})),
            ("flood", "big", json!({"kb": 65})),
        ],
    )
    .await;
    let g = "plugin fixtures (";
    let lp = output(&results, "loop");
    assert!(
        lp.starts_with(&format!("Error: {g}"))
            && lp.ends_with("ran past its time limit of 1000 ms and was stopped"),
        "{lp}"
    );
    let bomb = output(&results, "bomb");
    assert!(
        bomb.contains(g) && bomb.ends_with("ran out of memory (limit 32 MiB)"),
        "{bomb}"
    );
    let deep = output(&results, "deep");
    assert!(
        deep.contains(g)
            && (deep.contains("crashed: stack overflow (unbounded recursion?)")
                || deep.ends_with(
                    "out of bounds memory access (often a stack overflow from unbounded recursion)"
                )),
        "{deep}"
    );
    let boom = output(&results, "boom");
    assert!(
        boom.contains("crashed: panicked at") && boom.contains("the guest gave up"),
        "{boom}"
    );
    let flood = output(&results, "flood");
    assert!(
        flood.contains("returned 66562 bytes, over its output cap of 65536 bytes"),
        "{flood}"
    );
}

#[tokio::test]
async fn invalid_data_from_a_guest_is_refused() {
    let env = Env::new();
    env.config(json!({"plugins": [{"name": "raw", "path": raw_fixture_wasm()}, Env::fixtures_plugin(json!({}))]}));
    let results = misbehave(&env, &[("meta", "bad_meta", json!({}))]).await;
    assert!(
        output(&results, "meta").contains("plugin raw (")
            && output(&results, "meta")
                .contains("returned invalid data: its metadata is not a JSON object")
    );
}

#[tokio::test]
async fn files_outside_the_grant_do_not_exist_for_the_guest() {
    let env = Env::new();
    env.file("inside.txt", "inside\n");
    std::fs::create_dir_all(env.project().join("ro")).unwrap();
    env.file("ro/keep.txt", "keep\n");
    let secret = env.root.path().join("secret.txt");
    std::fs::write(&secret, "top secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, env.project().join("link.txt")).unwrap();
    // The working directory read-write, a subfolder of it read-only.
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"dirs": [
        {"path": ".", "mode": "rw"}
    ]}))]}));
    let p = env.project();
    let results = misbehave(
        &env,
        &[
            (
                "dotdot",
                "read_path",
                json!({"path": format!("{}/../secret.txt", p.display())}),
            ),
            (
                "absolute",
                "read_path",
                json!({"path": secret.display().to_string()}),
            ),
            ("etc", "read_path", json!({"path": "/etc/hostname"})),
            (
                "symlink",
                "read_path",
                json!({"path": format!("{}/link.txt", p.display())}),
            ),
            ("relative", "read_path", json!({"path": "../secret.txt"})),
            (
                "write_out",
                "write_path",
                json!({"path": env.root.path().join("planted.txt").display().to_string(), "content": "x"}),
            ),
        ],
    ).await;
    for (id, _, out) in &results {
        assert!(!out.contains("top secret"), "{id} leaked: {out}");
        assert!(out.starts_with("Error: cannot "), "{id}: {out}");
    }
    assert!(!env.root.path().join("planted.txt").exists());
}

#[tokio::test]
async fn a_read_only_grant_refuses_writes() {
    let env = Env::new();
    env.file("keep.txt", "keep\n");
    env.config(
        json!({"plugins": [Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "ro"}]}))]}),
    );
    let target = env.project().join("keep.txt").display().to_string();
    let fresh = env.project().join("new.txt").display().to_string();
    let results = misbehave(
        &env,
        &[
            (
                "overwrite",
                "write_path",
                json!({"path": target, "content": "changed"}),
            ),
            (
                "create",
                "write_path",
                json!({"path": fresh, "content": "new"}),
            ),
        ],
    )
    .await;
    assert!(
        output(&results, "overwrite").starts_with("Error: cannot write"),
        "{results:?}"
    );
    assert_eq!(
        std::fs::read_to_string(env.project().join("keep.txt")).unwrap(),
        "keep\n"
    );
    assert!(!env.project().join("new.txt").exists());
}

#[test]
fn environment_variables_exist_only_when_granted() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({"env": ["WARDEN_TEST_VISIBLE"]}))]}));
    let cassette = env.cassette(json!([
        {"tool_calls": [
            {"id": "hidden", "name": "env", "arguments": {"name": "WARDEN_TEST_HIDDEN"}},
            {"id": "visible", "name": "env", "arguments": {"name": "WARDEN_TEST_VISIBLE"}},
            {"id": "path", "name": "env", "arguments": {"name": "PATH"}}
        ]},
        {"text": "done"}
    ]));
    let out = env
        .warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!("scripted:{}", cassette.display()),
            "env",
        ])
        .env("WARDEN_TEST_HIDDEN", "hidden-value")
        .env("WARDEN_TEST_VISIBLE", "visible-value")
        .output()
        .unwrap();
    assert!(out.status.success());
    let results = tool_results(&env.requests()[1]);
    assert_eq!(output(&results, "visible"), "visible-value");
    assert!(
        output(&results, "hidden").contains("WARDEN_TEST_HIDDEN: environment variable not found")
    );
    assert!(output(&results, "path").contains("PATH: environment variable not found"));
}

#[test]
fn raw_sockets_do_not_exist_and_http_goes_only_to_granted_hosts() {
    let other = serve_http(vec![("/secret", Canned::ok("text/plain", "internal data"))]);
    // The granted server's /jump redirects to the other one.
    let granted = serve_http(vec![
        (
            "/page.html",
            Canned::ok(
                "text/html",
                "<html><body><h1>Granted</h1><p>See <a href=\"/docs\">the docs</a>.</p></body></html>",
            ),
        ),
        ("/plain", Canned::ok("text/plain", "just text")),
        (
            "/jump",
            Canned {
                status: 302,
                headers: vec![(
                    "location".into(),
                    format!("http://127.0.0.1:{}/secret", other.port),
                )],
                body: vec![],
            },
        ),
    ]);
    let env = Env::new();
    env.config(json!({
        "builtin_grants": {"webfetch": {"hosts": [format!("127.0.0.1:{}", granted.port)]}},
        "plugins": [Env::fixtures_plugin(json!({"hosts": [format!("127.0.0.1:{}", granted.port)]}))]
    }));
    let base = format!("http://127.0.0.1:{}", granted.port);
    env.cassette(json!([
        {"tool_calls": [
            {"id": "page", "name": "webfetch", "arguments": {"url": format!("{base}/page.html")}},
            {"id": "plain", "name": "webfetch", "arguments": {"url": format!("{base}/plain"), "format": "text"}},
            {"id": "missing", "name": "webfetch", "arguments": {"url": format!("{base}/nope")}},
            {"id": "other", "name": "webfetch", "arguments": {"url": format!("http://127.0.0.1:{}/secret", other.port)}},
            {"id": "redirect", "name": "webfetch", "arguments": {"url": format!("{base}/jump")}},
            {"id": "scheme", "name": "webfetch", "arguments": {"url": "file:///etc/passwd"}},
            {"id": "tcp", "name": "tcp", "arguments": {"addr": format!("127.0.0.1:{}", other.port)}}
        ]},
        {"tool_calls": [{"id": "after", "name": "echo", "arguments": {}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("fetch");
    assert!(run.status.success(), "{}", run.stderr);
    let reqs = env.requests();
    let results = tool_results(&reqs[1]);
    let r = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    assert!(!r("page").1);
    assert!(
        r("page").2.contains("Granted") && r("page").2.contains("the docs"),
        "{:?}",
        r("page")
    );
    assert!(
        !r("page").2.contains("<h1>"),
        "HTML was converted: {:?}",
        r("page")
    );
    assert_eq!(r("plain"), ("plain".into(), false, "just text".into()));
    assert!(
        r("missing").1 && r("missing").2.contains("answered HTTP 404"),
        "{:?}",
        r("missing")
    );
    for id in ["other", "redirect"] {
        assert!(r(id).1, "{id}");
        assert!(
            r(id)
                .2
                .contains("was refused: this tool was not granted access to that host"),
            "{id}: {:?}",
            r(id)
        );
        assert!(!r(id).2.contains("internal data"));
    }
    assert!(
        r("scheme").2.contains("scheme \"file\" is not supported"),
        "{:?}",
        r("scheme")
    );
    let tcp = r("tcp");
    assert!(
        tcp.1 && tcp.2.contains("wasi:sockets") && tcp.2.contains("which warden does not provide"),
        "{tcp:?}"
    );
    // Nothing ever reached the other server.
    assert!(
        other.hits.lock().unwrap().is_empty(),
        "{:?}",
        other.hits.lock().unwrap()
    );
    assert!(!tool_results(&reqs[2])[0].1, "the host kept serving");
}

#[tokio::test]
async fn a_denied_call_never_reaches_the_guest() {
    let env = Env::new();
    let mut plugin = Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "rw"}]}));
    plugin["tools"] = json!({"write_path": {"path_arg": "path"}});
    env.config(json!({"plugins": [plugin], "permission": {"write_path": {"*.mark": "deny"}}}));
    let mark = env.project().join("x.mark");
    let allowed = env.project().join("x.txt");
    env.cassette(json!([
        {"tool_calls": [{"id": "ok", "name": "write_path", "arguments": {"path": allowed.display().to_string(), "content": "fine"}}]},
        {"tool_calls": [{"id": "no", "name": "write_path", "arguments": {"path": mark.display().to_string(), "content": "the guest ran"}}]},
        {"text": "never"}
    ]));
    let run = env.run_json("write");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(&allowed).unwrap(),
        "fine",
        "the allowed call ran"
    );
    assert!(
        !mark.exists(),
        "the denied call left no mark: it never reached the guest"
    );
    assert_eq!(
        env.requests().len(),
        3,
        "a rule's denial is an error the model reads: the loop goes on"
    );
    let ledger = env.ledger();
    let session = run.session();
    let calls = tool_parts(&ledger.messages(&session).await.unwrap());
    match &calls[1].1 {
        ToolState::Error { error, .. } => assert!(
            error.contains("denied by the rule `write_path *.mark deny`"),
            "{error}"
        ),
        other => panic!("{other:?}"),
    }
    let audit = ledger.audit_trail(&session).await.unwrap();
    let denied: Vec<(&str, &str)> = audit
        .iter()
        .filter(|a| a.call_id.as_deref() == Some("no"))
        .map(|a| (a.stage.as_str(), a.decision.as_str()))
        .collect();
    assert_eq!(
        denied,
        [("permission", "denied")],
        "no guest stage for the denied call"
    );
}

#[tokio::test]
async fn a_guest_can_ask_mid_call_and_the_answer_decides() {
    let env = Env::new();
    env.config(json!({
        "plugins": [Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "rw"}]}))],
        "permission": {"second_file": {"allowed/*": "allow", "blocked/*": "deny"}}
    }));
    let p = env.project();
    let (yes, no) = (p.join("yes.txt"), p.join("no.txt"));
    env.cassette(json!([
        {"tool_calls": [{"id": "yes", "name": "ask_then_write",
            "arguments": {"permission": "second_file", "pattern": "allowed/a", "path": yes.display().to_string()}}]},
        {"tool_calls": [{"id": "no", "name": "ask_then_write",
            "arguments": {"permission": "second_file", "pattern": "blocked/b", "path": no.display().to_string()}}]},
        {"text": "never"}
    ]));
    let run = env.run_json("ask");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&yes).unwrap(), "allowed");
    assert!(!no.exists(), "the guest stopped at the denial");
    // The guest's progress reached the running part before it finished.
    assert!(
        run.events
            .iter()
            .any(|e| e["type"] == "message.part.updated"
                && e["part"]["callID"] == "yes"
                && e["part"]["state"]["status"] == "running"
                && e["part"]["state"]["metadata"]["stage"] == "asking")
    );
    let calls = tool_parts(&env.ledger().messages(&run.session()).await.unwrap());
    match &calls[1].1 {
        ToolState::Error { error, .. } => {
            assert!(
                error.contains(
                    "denied: `second_file` is denied by the rule `second_file blocked/* deny`"
                ),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        env.requests().len(),
        3,
        "a guest's question a rule denies is an error like any other: the loop goes on"
    );

    // With an `ask` rule the question goes to whoever is attached: here, nobody.
    let env = Env::new();
    env.config(json!({
        "plugins": [Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "rw"}]}))],
        "permission": {"other_file": "ask"}
    }));
    let unasked = env.project().join("unasked.txt");
    env.cassette(json!([
        {"tool_calls": [{"id": "nobody", "name": "ask_then_write",
            "arguments": {"permission": "other_file", "pattern": "x", "path": unasked.display().to_string()}}]},
        {"text": "never"}
    ]));
    let run = env.run_json("ask");
    // Nobody approved the guest's question, so its call failed: the loop
    // stops there, saying why.
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.error().contains("failed because nobody approved it"),
        "{}",
        run.stdout
    );
    assert!(!unasked.exists());
    let asked: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "permission.asked")
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["permission"], "other_file");
    assert_eq!(asked[0]["tool"]["callID"], "nobody");
    let calls = tool_parts(&env.ledger().messages(&run.session()).await.unwrap());
    match &calls[0].1 {
        ToolState::Error { error, .. } => assert!(error.contains("nobody was attached"), "{error}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_call_gets_a_fresh_instance() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({}))]}));
    env.cassette(json!([
        {"tool_calls": [{"id": "a", "name": "counter", "arguments": {"n": 1}}, {"id": "b", "name": "counter", "arguments": {"n": 2}}]},
        {"tool_calls": [{"id": "c", "name": "counter", "arguments": {"n": 3}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("count");
    assert!(run.status.success());
    let reqs = env.requests();
    let mut outs: Vec<(String, bool, String)> = tool_results(&reqs[1]);
    outs.extend(tool_results(&reqs[2]).into_iter().filter(|r| r.0 == "c"));
    for (id, is_error, out) in outs {
        assert_eq!(
            (is_error, out.as_str()),
            (false, "call number 1 in this instance"),
            "{id}"
        );
    }
}

#[test]
fn a_second_start_loads_compiled_plugins_from_the_cache() {
    let env = Env::new();
    // This test needs a cache of its own, not the one the suite shares.
    std::fs::remove_file(env.data().join("cache")).unwrap();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({}))]}));
    let verify = || {
        let out = env.warden(&["plugin", "verify"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .to_string();
        // "N plugins verified (C compiled, H from the cache)"
        let numbers: Vec<u64> = last
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .take(3)
            .map(|s| s.parse().unwrap())
            .collect();
        (numbers[0], numbers[1], numbers[2])
    };
    let (total, compiled, cached) = verify();
    assert!(total >= 2);
    // The built-ins come compiled in the binary (verified before use), so a
    // cold start compiles only the plugin from a file.
    assert_eq!(
        (compiled, cached),
        (1, total - 1),
        "a cold start compiles every plugin that is not built in"
    );
    let (total2, compiled, cached) = verify();
    assert_eq!(total2, total);
    assert_eq!(
        (compiled, cached),
        (0, total),
        "a warm start compiles nothing"
    );
}

#[test]
fn a_pinned_hash_that_does_not_match_is_refused() {
    let env = Env::new();
    let mut plugin = Env::fixtures_plugin(json!({}));
    plugin["sha256"] = json!("0".repeat(64));
    env.config(json!({"plugins": [plugin]}));
    let out = env.warden(&["plugin", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("plugin fixtures: integrity check failed: the config pins sha256 0000"),
        "{stdout}"
    );
    env.cassette(json!([{"text": "hi"}]));
    let run = env.run_json("hello");
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr.contains("integrity check failed"),
        "{}",
        run.stderr
    );
}

#[test]
fn plugin_add_installs_a_pinned_plugin_that_later_runs_load() {
    let env = Env::new();
    let out = env
        .warden(&[
            "plugin",
            "add",
            "--yes",
            &fixture_wasm(),
            "--name",
            "fx",
            "--dir",
            ".:ro",
            "--env",
            "LANG",
            "--tool",
            "echo:echo",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(env.data().join("plugins/fx/plugin.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["grants"]["dirs"],
        json!([{"path": ".", "mode": "ro"}])
    );
    assert_eq!(manifest["sha256"].as_str().unwrap().len(), 64);
    let list = env
        .warden(&["plugin", "list", "--format", "json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    let fx = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fx")
        .unwrap();
    assert_eq!(fx["sha256"], manifest["sha256"]);
    assert!(
        fx["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == "echo")
    );
    env.cassette(json!([{"tool_calls": [{"id": "e", "name": "echo", "arguments": {"x": 1}}]}, {"text": "ok"}]));
    let run = env.run_json("echo");
    assert!(run.status.success());
    assert_eq!(tool_results(&env.requests()[1])[0].2, r#"{"x":1}"#);
}

#[test]
fn tools_cannot_change_wardens_config_or_touch_its_data() {
    let env = Env::new();
    env.config(
        json!({"permission": {"*": "allow"}, "experimental": {"continue_loop_on_deny": true}}),
    );
    let config = env.project().join("warden.json");
    let before = std::fs::read_to_string(&config).unwrap();
    // The data dir inside the project, where a careless setup might put it.
    let data = env.project().join(".warden");
    env.trust_in(&data);
    let cassette = env.cassette(json!([
        {"tool_calls": [
            {"id": "write", "name": "write", "arguments": {"filePath": "warden.json", "content": "{\"permission\": \"allow\"}"}},
            {"id": "edit", "name": "edit", "arguments": {"filePath": "./sub/../warden.json", "oldString": "*", "newString": "x"}},
            {"id": "read", "name": "read", "arguments": {"filePath": "warden.json"}},
            {"id": "ledger", "name": "read", "arguments": {"filePath": ".warden/ledger.db"}}
        ]},
        {"text": "done"}
    ]));
    let out = env
        .warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!("scripted:{}", cassette.display()),
            "change the config",
        ])
        .env("WARDEN_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        before,
        "the config is unchanged"
    );
    let results = tool_results(&env.requests()[1]);
    let r = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    for id in ["write", "edit"] {
        assert!(
            r(id).1
                && r(id)
                    .2
                    .contains("is warden's own configuration and no tool may change it"),
            "{id}: {:?}",
            r(id)
        );
    }
    // Reading it is refused too, by the file-system gate: no guest reads
    // warden's own files through any grant.
    assert!(
        r("read").1 && r("read").2.contains("warden.json is warden's own file"),
        "{:?}",
        r("read")
    );
    assert!(
        r("ledger").1
            && r("ledger")
                .2
                .contains("ledger.db is warden's own data and no tool may use it"),
        "{:?}",
        r("ledger")
    );
}
