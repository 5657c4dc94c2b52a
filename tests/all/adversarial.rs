//! The host's side of the boundary, attacked by a guest written against the
//! raw WIT and WASI bindings (`plugins/adversary`, not the SDK). One or more
//! tests per class of issue 9; each asserts the refusal *and* that the host
//! kept serving within its budget: its memory growth stays bounded, and a
//! normal call right after the attack completes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use warden_core::Config;
use warden_core::tool::{CallContext, CallObserver, GuestError, ToolSource};
use warden_runtime::WasmHost;

use crate::common::*;

fn adversary_wasm() -> String {
    plugin_wasm("warden_adversary.wasm")
}

fn adversary(grants: Value) -> Value {
    json!({"name": "adversary", "path": adversary_wasm(), "grants": grants})
}

/// Resident memory of this process, in bytes (`/proc/self/statm`).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// An observer that answers every question with `answer` and counts them.
struct Counting {
    asked: AtomicUsize,
    progress: AtomicUsize,
    answer: Result<(), String>,
}

impl Counting {
    fn new(answer: Result<(), String>) -> Arc<Counting> {
        Arc::new(Counting {
            asked: AtomicUsize::new(0),
            progress: AtomicUsize::new(0),
            answer,
        })
    }
}

#[async_trait::async_trait]
impl CallObserver for Counting {
    fn progress(&self, _: Option<String>, _: Value) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
    async fn ask(&self, _: String, _: Vec<String>, _: Value) -> Result<(), String> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.answer.clone()
    }
}

/// The adversary loaded in this process, with these grants.
struct InProcess {
    host: WasmHost,
    dir: tempfile::TempDir,
}

impl InProcess {
    async fn new(grants: Value) -> InProcess {
        let config =
            Config::parse(&json!({"builtins": false, "plugins": [adversary(grants)]}).to_string())
                .unwrap();
        InProcess {
            host: WasmHost::load(&config.plugin_set(), None, None)
                .await
                .unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    async fn call(
        &self,
        tool: &str,
        args: Value,
        observer: Arc<dyn CallObserver>,
    ) -> Result<String, GuestError> {
        let tools = self.host.tools();
        let def = tools.iter().find(|t| t.id == tool).unwrap();
        let ctx = CallContext {
            session_id: "ses_adv".into(),
            message_id: "msg_adv".into(),
            call_id: "c".into(),
            agent: "build".into(),
            directory: std::fs::canonicalize(self.dir.path())
                .unwrap()
                .display()
                .to_string(),
        };
        self.host
            .execute(def, &ctx, &args.to_string(), observer)
            .await
            .map(|o| o.output)
    }

    /// A normal call: the host is still serving.
    async fn still_serving(&self) {
        let r = self
            .call("pollable_flood", json!({"count": 1}), Counting::new(Ok(())))
            .await;
        assert_eq!(r, Ok("made 1 pollables".to_string()));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Memory an attack may leave the host holding: well under what the
/// unmetered attacks took (about 900 MiB for the fields flood).
const RSS_BOUND: usize = 96 << 20;

// ---- 1. host memory outside memory_mb ----

#[test]
fn host_objects_count_against_one_budget() {
    runtime().block_on(async {
        // No hosts granted: no wasi:http at all.
        let offline = InProcess::new(json!({"memory_mb": 8})).await;
        let before = rss();
        let e = offline
            .call("fields_flood", json!({"count": 100_000, "kb": 100}), Counting::new(Ok(())))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the plugin was granted no hosts, so it has no wasi:http at all"),
            "{e}"
        );
        // Any other host object: the resource table is the one count.
        let e = offline
            .call("pollable_flood", json!({"count": 1_000_000}), Counting::new(Ok(())))
            .await
            .unwrap_err();
        assert!(matches!(e, GuestError::OverBudget { .. }), "{e}");
        assert!(
            e.to_string().contains("held 1024 host objects at once"),
            "{e}"
        );
        offline.still_serving().await;

        // Granted a host: fields exist, each capped, and their number too.
        let online = InProcess::new(json!({"memory_mb": 8, "hosts": ["127.0.0.1:9"]})).await;
        let big = online
            .call("fields_flood", json!({"count": 100_000, "kb": 100}), Counting::new(Ok(())))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            big.ends_with("went over its host resource budget: it built an HTTP header collection over 16 KiB, the most one may hold"),
            "{big}"
        );
        let many = online
            .call("fields_flood", json!({"count": 100_000, "kb": 15}), Counting::new(Ok(())))
            .await
            .unwrap_err()
            .to_string();
        assert!(many.contains("went over its host resource budget"), "{many}");
        online.still_serving().await;
        let grown = rss().saturating_sub(before);
        assert!(grown < RSS_BOUND, "the host grew by {} MiB", grown >> 20);
    });
}

// ---- 2. time limits that fire whatever the guest does ----

#[test]
fn a_fifo_in_a_grant_is_refused_and_no_worker_is_lost() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let adv =
            InProcess::new(json!({"timeout_ms": 2000, "dirs": [{"path": ".", "mode": "ro"}]}))
                .await;
        let fifo = adv.dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo (coreutils) is needed for this test");
        // On a single-threaded runtime, a guest blocked in open() would stall
        // everything; a liveness guard turns a hang into a failure.
        let both = async {
            tokio::join!(
                adv.call("open", json!({"path": "pipe"}), Counting::new(Ok(()))),
                adv.call("pollable_flood", json!({"count": 1}), Counting::new(Ok(()))),
            )
        };
        let (opened, other) = tokio::time::timeout(std::time::Duration::from_secs(60), both)
            .await
            .expect("a guest opening a FIFO blocked the runtime");
        let e = opened.unwrap_err().to_string();
        assert!(
            e.contains("refused to open \"pipe\": it is not a regular file or directory"),
            "{e}"
        );
        assert_eq!(other, Ok("made 1 pollables".to_string()));
        adv.still_serving().await;
    });
}

// ---- 3. grants resolved through links ----

#[test]
fn a_relative_grant_that_links_outside_is_refused_and_shown_resolved() {
    let env = Env::new();
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "outside secret").unwrap();
    std::os::unix::fs::symlink("../outside", env.project().join("build")).unwrap();
    std::fs::create_dir_all(env.project().join("real")).unwrap();
    std::os::unix::fs::symlink("real", env.project().join("inside")).unwrap();
    env.config(json!({"plugins": [
        adversary(json!({"dirs": [{"path": "build", "mode": "ro"}]})),
        {"name": "inner", "path": fixture_wasm(), "grants": {"dirs": [{"path": "inside", "mode": "ro"}]}}
    ], "permission": {"open": "allow", "echo": "allow"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "escape", "name": "open", "arguments": {"path": "build/secret.txt"}}]},
        {"tool_calls": [{"id": "after", "name": "echo", "arguments": {"ok": 1}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("escape");
    assert!(run.status.success(), "{}", run.stderr);
    let reqs = env.requests();
    let results = tool_results(&reqs[1]);
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].2.contains("leads to") && results[0].2.contains("outside the working directory"),
        "{results:?}"
    );
    assert!(!results[0].2.contains("outside secret"));
    let after = tool_results(&reqs[2]);
    assert_eq!(
        after.iter().find(|r| r.0 == "after"),
        Some(&("after".into(), false, r#"{"ok":1}"#.into()))
    );

    let list = env.warden(&["plugin", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    let real = env.project().join("real");
    assert!(
        text.contains(&format!("inside:ro → {}", real.display())),
        "{text}"
    );
    assert!(text.contains("build:ro → unusable:"), "{text}");
}

// ---- 4. the compiled-code cache is verified ----

#[test]
fn a_swapped_cache_entry_is_refused_and_recompiled() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    // A cache of its own: the shared one must not be tampered with.
    std::fs::remove_file(env.data().join("cache")).unwrap();
    std::fs::remove_dir(env.data()).unwrap();
    // Two plugins from files, so the cache holds two entries (the built-ins
    // come compiled in the binary and are checked there, not cached).
    env.config(
        json!({"plugins": [Env::fixtures_plugin(json!({})), adversary(json!({}))],
        "permission": {"echo": "allow"}}),
    );
    let verify = env.warden(&["plugin", "verify"]).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&env.data()), 0o700, "the data dir is owner-only");
    let cache = env.data().join("cache/components");
    assert_eq!(mode(&cache), 0o700);

    let list = env
        .warden(&["plugin", "list", "--format", "json"])
        .output()
        .unwrap();
    let plugins: Value = serde_json::from_slice(&list.stdout).unwrap();
    let hash = |name: &str| {
        plugins
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let entry = |h: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(h))
            .unwrap()
    };
    // Another component's artifact copied over the fixtures' entry.
    let fixtures_entry = entry(&hash("fixtures"));
    std::fs::copy(entry(&hash("adversary")), &fixtures_entry).unwrap();

    env.cassette(json!([
        {"tool_calls": [{"id": "e", "name": "echo", "arguments": {"said": "the real echo"}}]},
        {"text": "done"}
    ]));
    let run = env.run_json("echo");
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "warning: the compiled cache entry for component {} was not used (it was compiled from another component",
            hash("fixtures")
        )) && run.stderr.contains("compiled it again"),
        "{}",
        run.stderr
    );
    let results = tool_results(&env.requests()[1]);
    assert_eq!(
        results,
        vec![(
            "e".to_string(),
            false,
            r#"{"said":"the real echo"}"#.to_string()
        )]
    );
    // The entry was rewritten: the next run loads it without a warning.
    let again = env.run_json("echo");
    assert!(!again.stderr.contains("warning"), "{}", again.stderr);
}

// ---- 5. guest-driven writes are bounded ----

#[test]
fn asks_logs_and_progress_are_capped_per_call() {
    runtime().block_on(async {
        let adv = InProcess::new(json!({})).await;
        let before = rss();
        // The same question a hundred thousand times: asked once.
        let same = Counting::new(Err("no".into()));
        let out = adv
            .call("ask_flood", json!({"count": 100_000}), same.clone())
            .await
            .unwrap();
        assert_eq!(same.asked.load(Ordering::Relaxed), 1);
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["refused"], 100_000);
        assert_eq!(out["last"], "no");
        // Distinct questions: at most 16 are put, the rest refused at once.
        let distinct = Counting::new(Ok(()));
        let out = adv
            .call(
                "ask_flood",
                json!({"count": 10_000, "distinct": true}),
                distinct.clone(),
            )
            .await
            .unwrap();
        assert_eq!(distinct.asked.load(Ordering::Relaxed), 16);
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (out["ok"].as_u64(), out["refused"].as_u64()),
            (Some(16), Some(9984))
        );
        assert!(
            out["last"]
                .as_str()
                .unwrap()
                .contains("the most one call may")
        );
        // Progress: 20,000 updates of 8 KiB go out as at most 256 KiB.
        let progress = Counting::new(Ok(()));
        adv.call(
            "progress_flood",
            json!({"count": 20_000, "kb": 8}),
            progress.clone(),
        )
        .await
        .unwrap();
        let sent = progress.progress.load(Ordering::Relaxed);
        assert!((1..=32).contains(&sent), "{sent} progress updates went out");
        adv.still_serving().await;
        let grown = rss().saturating_sub(before);
        assert!(grown < RSS_BOUND, "the host grew by {} MiB", grown >> 20);
    });
}

#[tokio::test]
async fn a_log_flood_and_an_ask_flood_leave_bounded_traces() {
    let env = Env::new();
    env.config(json!({
        "plugins": [adversary(json!({}))],
        "permission": {"probe": "allow", "ask_flood": "allow", "log_flood": "allow"}
    }));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "asks", "name": "ask_flood", "arguments": {"count": 200_000, "distinct": true}},
            {"id": "logs", "name": "log_flood", "arguments": {"count": 20_000, "kb": 4}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json_with("flood", &[("WARDEN_LOG", Some("error"))]);
    assert!(run.status.success(), "{}", run.stderr);
    // 80 MiB of log lines reach stderr as at most the call's 64 KiB and one notice.
    assert!(
        run.stderr.len() < 80 * 1024,
        "stderr has {} bytes",
        run.stderr.len()
    );
    assert!(
        run.stderr.contains("log budget of this call used up"),
        "{}",
        &run.stderr[..200.min(run.stderr.len())]
    );
    let results = tool_results(&env.requests()[1]);
    let asks: Value =
        serde_json::from_str(&results.iter().find(|r| r.0 == "asks").unwrap().2).unwrap();
    assert_eq!(asks["ok"], 16);
    let trail = env.ledger().audit_trail(&run.session()).await.unwrap();
    let of_asks = trail
        .iter()
        .filter(|a| a.call_id.as_deref() == Some("asks"))
        .count();
    assert!(of_asks <= 16 + 2, "{of_asks} audit rows for one call");
}

#[test]
fn empty_log_lines_and_aliased_questions_are_paid_for_before_they_are_read() {
    let env = Env::new();
    env.config(json!({
        "plugins": [adversary(json!({}))],
        "permission": {"probe": "allow", "ask_aliased": "allow", "log_flood": "allow"}
    }));
    env.cassette(json!([
        {"tool_calls": [
            // 200 000 empty lines: each costs its line, not just its bytes.
            {"id": "empty", "name": "log_flood", "arguments": {"count": 200_000, "kb": 0}},
            // 400 patterns, all one 1 MiB buffer: counted before any is read.
            {"id": "many", "name": "ask_aliased", "arguments": {"count": 400, "kb": 1024}},
            // 16 patterns of 1 MiB: each over the pattern limit, read no further.
            {"id": "long", "name": "ask_aliased", "arguments": {"count": 16, "kb": 1024}},
            {"id": "fine", "name": "ask_aliased", "arguments": {"count": 2, "kb": 0}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json_with("meters", &[("WARDEN_LOG", Some("info"))]);
    assert!(run.status.success(), "{}", run.stderr);
    let lines = run
        .stderr
        .lines()
        .filter(|l| l.contains("adversary"))
        .count();
    assert!(lines <= 1024 + 1, "{lines} lines on stderr");
    assert!(run.stderr.contains("log budget of this call used up"));
    let results = tool_results(&env.requests()[1]);
    let r = |id: &str| results.iter().find(|r| r.0 == id).unwrap().2.clone();
    assert!(
        r("many").starts_with("refused: ") && r("many").contains("at most 16"),
        "{}",
        r("many")
    );
    assert!(
        r("long").starts_with("refused: ") && r("long").contains("pattern 0"),
        "{}",
        r("long")
    );
    assert_eq!(r("fine"), "allowed");
}

// ---- 6. warden's own files through a directory grant ----

#[test]
fn no_grant_reaches_wardens_own_files() {
    let env = Env::new();
    // The data dir inside the granted project, as when running in $HOME.
    let data = env.project().join(".warden");
    std::fs::create_dir_all(&data).unwrap();
    std::os::unix::fs::symlink(env.data().join("cache"), data.join("cache")).unwrap();
    std::os::unix::fs::symlink(".warden", env.project().join("alias")).unwrap();
    env.file("ok.txt", "fine\n");
    env.config(
        json!({"plugins": [adversary(json!({"dirs": [{"path": ".", "mode": "rw"}]}))],
                      "permission": {"open": "allow", "list_dir": "allow"}}),
    );
    env.trust_in(&data);
    env.cassette(json!([
        {"tool_calls": [
            {"id": "ledger", "name": "open", "arguments": {"path": ".warden/ledger.db"}},
            {"id": "alias", "name": "open", "arguments": {"path": "alias/ledger.db"}},
            {"id": "cache", "name": "list_dir", "arguments": {"path": ".warden/cache"}},
            {"id": "config", "name": "open", "arguments": {"path": "warden.json"}},
            {"id": "grep", "name": "grep", "arguments": {"pattern": "SQLite format", "path": "."}},
            {"id": "ok", "name": "open", "arguments": {"path": "ok.txt"}}
        ]},
        {"text": "done"}
    ]));
    let run = env
        .warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!(
                "scripted:{}",
                env.root.path().join("cassette.json").display()
            ),
            "own files",
        ])
        .env("WARDEN_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let results = tool_results(&env.requests()[1]);
    let r = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    for id in ["ledger", "alias", "cache", "config"] {
        let (_, is_error, text) = r(id);
        assert!(
            is_error && text.contains("is warden's own file"),
            "{id}: {text}"
        );
    }
    assert!(!r("grep").2.contains("ledger.db:1:"), "{:?}", r("grep"));
    assert_eq!(r("ok"), ("ok".into(), false, "fine\n".into()));
}

// ---- 7. one URL canonicaliser for rules and the HTTP gate ----

#[test]
fn url_rules_see_every_spelling_and_every_redirect() {
    let second = serve_http_on(
        "127.0.0.2",
        vec![("/secret", Canned::ok("text/plain", "second host"))],
    );
    let first = serve_http(vec![
        ("/page", Canned::ok("text/plain", "first host")),
        (
            "/jump",
            Canned {
                status: 302,
                headers: vec![(
                    "location".into(),
                    format!("http://127.0.0.2:{}/secret", second.port),
                )],
                body: vec![],
            },
        ),
    ]);
    let p = first.port;
    let env = Env::new();
    env.config(json!({
        "builtin_grants": {"webfetch": {"hosts": ["*"]}},
        "plugins": [adversary(json!({"hosts": [format!("127.0.0.1:{p}")]}))],
        "permission": {"fetch": "allow", "webfetch": {"*": "allow", "127.0.0.2": "deny", "127.0.0.3": "deny"}},
        "experimental": {"continue_loop_on_deny": true}
    }));
    let spellings = [
        format!("http://2130706435:{p}/page"),
        format!("http://0x7f000003:{p}/page"),
        format!("http://[::ffff:127.0.0.3]:{p}/page"),
        format!("http://0177.0.0.3:{p}/page"),
    ];
    let mut calls: Vec<Value> = spellings
        .iter()
        .enumerate()
        .map(|(i, u)| json!({"id": format!("s{i}"), "name": "webfetch", "arguments": {"url": u, "format": "text"}}))
        .collect();
    calls.push(json!({"id": "jump", "name": "webfetch", "arguments": {"url": format!("http://127.0.0.1:{p}/jump"), "format": "text"}}));
    calls.push(json!({"id": "creds", "name": "fetch", "arguments": {"scheme": "http", "authority": format!("127.0.0.1:{p}@api.example.com"), "path": "/page"}}));
    calls.push(json!({"id": "fine", "name": "fetch", "arguments": {"scheme": "http", "authority": format!("0x7f000001:{p}"), "path": "/page"}}));
    env.cassette(json!([{"tool_calls": calls}, {"text": "done"}]));
    let run = env.run_json("urls");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    let r = |id: &str| results.iter().find(|r| r.0 == id).unwrap().clone();
    for i in 0..spellings.len() {
        let (_, is_error, text) = r(&format!("s{i}"));
        assert!(
            is_error && text.contains("on `127.0.0.3` is denied"),
            "{text}"
        );
    }
    let (_, is_error, text) = r("jump");
    assert!(is_error && text.contains("was refused"), "{text}");
    let (_, is_error, text) = r("creds");
    assert!(is_error && text.contains("HttpRequestDenied"), "{text}");
    assert_eq!(r("fine"), ("fine".into(), false, "status 200".into()));
    assert!(
        second.hits.lock().unwrap().is_empty(),
        "the redirect was followed"
    );
    let mut hits = first.hits.lock().unwrap().clone();
    hits.sort();
    assert_eq!(
        hits,
        ["/jump", "/page"],
        "only the allowed calls reached it"
    );
}

// ---- 8. plugin add takes the permission mapping ----

#[test]
fn an_added_tool_is_mapped_or_asked_about() {
    let env = Env::new();
    env.file(".env", "SECRET=1\n");
    env.file("ok.txt", "fine\n");
    env.config(json!({"permission": {"read": {"*.env": "deny"}},
                      "experimental": {"continue_loop_on_deny": true}}));
    let add = |extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "add",
            "--name",
            "adv",
            "--dir",
            ".:ro",
            "--replace",
            "--yes",
        ];
        args.push(Box::leak(adversary_wasm().into_boxed_str()));
        args.extend_from_slice(extra);
        let out = env.warden(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let cassette = json!([
        {"tool_calls": [
            {"id": "env", "name": "open", "arguments": {"path": ".env"}},
            {"id": "ok", "name": "open", "arguments": {"path": "ok.txt"}}
        ]},
        {"text": "done"}
    ]);
    // Unmapped: `*` allow does not run it; with nobody attached, asked is denied.
    add(&[]);
    env.cassette(cassette.clone());
    let run = env.run_json("unmapped");
    assert!(run.status.success(), "{}", run.stderr);
    for (_, is_error, text) in tool_results(&env.requests()[1]) {
        assert!(
            is_error && text.contains("needs approval and nobody was attached"),
            "{text}"
        );
    }
    // Mapped to `read` with its path argument: the path rules apply.
    add(&["--tool", "open:read:path=path"]);
    std::fs::remove_file(env.root.path().join("requests.jsonl")).unwrap();
    env.cassette(cassette);
    let run = env.run_json("mapped");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    assert!(
        results[0].1 && results[0].2.contains("`read` on `.env` is denied"),
        "{results:?}"
    );
    assert_eq!(results[1], ("ok".into(), false, "fine\n".into()));
}

// ---- 9. tool count, and call ids ----

#[test]
fn too_many_tools_are_refused_at_load() {
    let env = Env::new();
    env.config(json!({"plugins": [{"name": "many", "path": plugin_wasm("warden_adversary_describe.wasm")}]}));
    let out = env.warden(&["plugin", "verify"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("it describes 65 tools; one plugin may provide at most 64"),
        "{text}"
    );
}

#[tokio::test]
async fn a_second_call_with_the_same_id_is_refused_visibly() {
    let env = Env::new();
    env.config(json!({"plugins": [Env::fixtures_plugin(json!({}))]}));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "same", "name": "echo", "arguments": {"n": 1}},
            {"id": "same", "name": "echo", "arguments": {"n": 2}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json("dup");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0], ("same".into(), false, r#"{"n":1}"#.into()));
    assert_eq!(results[1].0, "same-duplicate-1");
    assert!(
        results[1].1
            && results[1]
                .2
                .contains("already has a tool call with the id `same`"),
        "{results:?}"
    );
    let ledger = env.ledger();
    assert_eq!(
        timeline(&ledger, &run.session(), "same-duplicate-1").await,
        ["pending", "running", "error"]
    );
}
