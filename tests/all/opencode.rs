//! OpenCode's own clients against `warden serve` on 127.0.0.1, with a
//! scripted model: `opencode run --attach` completes a session with a tool
//! call, the JS SDK creates, prompts, streams events, answers a permission
//! ask and aborts, the `opencode attach` TUI (in tmux) shows a prompt's tool
//! call and answer, and `/doc` passes an OpenAPI validator.
//!
//! The clients are the pinned npm packages below, installed on first use
//! into target/tmp (kept between runs). node and npm must be installed;
//! the TUI test needs tmux.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::server::Server;

/// The OpenCode CLI and TUI, and the SDK of the same release.
const OPENCODE: &str = "opencode-ai@1.18.33";
const SDK: &str = "@opencode-ai/sdk@1.18.33";
/// An OpenAPI 3.1 validator.
const VALIDATOR: &str = "@apidevtools/swagger-parser@13.1.0";

/// The folder the npm packages are installed in (once per build tree).
fn clients() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("opencode-clients");
        let marker = dir.join(format!(
            ".installed-{}",
            [OPENCODE, SDK, VALIDATOR].join("+").replace(['/', '@'], "_")
        ));
        if !marker.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("package.json"), r#"{"private": true}"#).unwrap();
            let out = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"])
                .arg(&dir)
                .args([OPENCODE, SDK, VALIDATOR])
                .output()
                .unwrap_or_else(|e| {
                    panic!("these tests need node.js 20+ and npm to install OpenCode's clients ({e}); install them (e.g. apt-get install nodejs npm)")
                });
            assert!(
                out.status.success(),
                "npm install {OPENCODE} {SDK} {VALIDATOR} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Its postinstall links the platform's binary; npm is told to run
            // no scripts, so it is run here, as the package itself says to.
            let linked = Command::new("node")
                .arg("postinstall.mjs")
                .current_dir(dir.join("node_modules/opencode-ai"))
                .output()
                .unwrap();
            assert!(
                linked.status.success(),
                "opencode-ai's postinstall failed:\n{}",
                String::from_utf8_lossy(&linked.stderr)
            );
            std::fs::write(&marker, "").unwrap();
        }
        // The scripts live in the repository; node resolves their imports
        // from where they are, so they are copied beside the packages.
        for (name, text) in [
            ("sdk.mjs", include_str!("../opencode/sdk.mjs")),
            ("validate.mjs", include_str!("../opencode/validate.mjs")),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    })
}

/// `opencode ARGS`, offline: its own home, no model catalogue fetch, no
/// update check, no sharing, no plugins, no project config.
fn opencode(home: &Path, cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.arg("120").arg(opencode_bin()).args(args).current_dir(cwd);
    offline(&mut c, home);
    c
}

/// The pinned `opencode` binary, installed on first use.
pub(crate) fn opencode_bin() -> PathBuf {
    clients().join("node_modules/.bin/opencode")
}

/// Keep `opencode` offline and to itself: its own home under `home`, no
/// catalogue fetch, update check, sharing, plugins or project config.
pub(crate) fn offline(c: &mut Command, home: &Path) {
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_CLAUDE_CODE", "1")
        .env("OPENCODE_DISABLE_PROJECT_CONFIG", "1")
        // The token test servers take (a test with a password of its own sets it after).
        .env("OPENCODE_SERVER_PASSWORD", crate::server::TEST_TOKEN)
        .env_remove("OPENCODE_CONFIG")
        .env_remove("OPENCODE_CONFIG_CONTENT");
}

/// A project with a file to read and a cassette: read it, then answer at
/// once (no delay: a client that subscribes as it prompts still sees it
/// all); a third prompt waits a minute for its answer (to be aborted).
fn read_then_answer(env: &Env) -> PathBuf {
    env.file("hello.txt", "hi from the project\n");
    env.cassette(json!([
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "hello.txt"}}]},
        {"text": "The file says hi."},
        {"delay_ms": 60000, "text": "too late"}
    ]))
}

/// `opencode run --attach SERVER --format json "read hello.txt"` in the
/// project, which must succeed; its JSON events.
fn run_attach(env: &Env, server: &Server) -> Vec<Value> {
    let home = env.root.path().join("home");
    let out = opencode(
        &home,
        &env.project(),
        &[
            "run",
            "--attach",
            &server.base,
            "--format",
            "json",
            "read hello.txt",
        ],
    )
    .output()
    .unwrap();
    let events = lines(&out);
    assert!(
        out.status.success(),
        "opencode run failed: {}\n{events:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    events
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn opencode_run_attach_completes_a_session_with_a_tool_call() {
    let env = Env::new();
    let cassette = read_then_answer(&env);
    let model = format!("scripted:{}", cassette.display());
    let server = Server::launch(&env, &["--model", &model], &[]);
    let events = run_attach(&env, &server);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // The tool runs while the model's step ends, so the first step's
    // finish and the call's completion may come in either order.
    let mut first = kinds[..3].to_vec();
    first[1..].sort();
    assert_eq!(
        first,
        ["step_start", "step_finish", "tool_use"],
        "{events:#?}"
    );
    assert_eq!(
        kinds[3..],
        ["step_start", "text", "step_finish"],
        "{events:#?}"
    );
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap();
    let tool = &events[at("tool_use")]["part"];
    assert_eq!(tool["tool"], "read");
    assert_eq!(tool["callID"], "call_1");
    assert_eq!(tool["state"]["status"], "completed");
    assert_eq!(tool["state"]["input"], json!({"filePath": "hello.txt"}));
    assert!(
        tool["state"]["output"]
            .as_str()
            .unwrap()
            .contains("hi from the project"),
        "{tool}"
    );
    assert_eq!(events[at("step_finish")]["part"]["reason"], "tool-calls");
    assert_eq!(events[4]["part"]["text"], "The file says hi.");
    assert_eq!(events[5]["part"]["reason"], "stop");
    // The session is warden's, in its ledger.
    let session = events[0]["sessionID"].as_str().unwrap();
    let msgs = env
        .ledger()
        .messages(&warden_protocol::SessionId(session.into()))
        .await
        .unwrap();
    assert_eq!(msgs.len(), 3, "user, tool step, answer");
    // opencode run sends its message argument quoted (its own server
    // gets the same text).
    assert_eq!(msgs[0].text(), "\"read hello.txt\"");
}

/// The race the delayed cassette above leaves out: `opencode run --attach`
/// opens its event stream and sends its prompt at once, on two
/// connections, and a model answering at once (a local model, a cache, a
/// recording) has the session over before the stream is registered. The
/// stream must still show the whole session: every run prints the tool
/// call and the answer. Ten runs in a row, each a new session, no delay.
#[tokio::test]
async fn opencode_run_attach_shows_an_instant_session_ten_times_in_a_row() {
    let env = Env::new();
    let cassette = read_then_answer(&env);
    let model = format!("scripted:{}", cassette.display());
    let server = Server::launch(&env, &["--model", &model], &[]);
    for run in 1..=10 {
        let events = run_attach(&env, &server);
        let tool = events
            .iter()
            .find(|e| e["type"] == "tool_use")
            .unwrap_or_else(|| panic!("run {run}: no tool call shown: {events:#?}"));
        assert_eq!(tool["part"]["callID"], "call_1", "run {run}");
        assert_eq!(tool["part"]["state"]["status"], "completed", "run {run}");
        assert!(
            tool["part"]["state"]["output"]
                .as_str()
                .is_some_and(|o| o.contains("hi from the project")),
            "run {run}: {tool}"
        );
        let texts: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "text")
            .map(|e| &e["part"]["text"])
            .collect();
        assert_eq!(
            texts,
            [&json!("The file says hi.")],
            "run {run}: {events:#?}"
        );
        // Each part once, though it was sent both replayed and live.
        let ids: Vec<&str> = events
            .iter()
            .filter_map(|e| e["part"]["id"].as_str())
            .collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            ids.len(),
            unique.len(),
            "run {run}: a part shown twice: {events:#?}"
        );
    }
}

#[test]
fn the_sdk_creates_prompts_streams_answers_an_ask_and_aborts() {
    let env = Env::new();
    let cassette = read_then_answer(&env);
    env.config(json!({"permission": {"read": "ask"}}));
    let model = format!("scripted:{}", cassette.display());
    let server = Server::launch(
        &env,
        &["--model", &model],
        &[("OPENCODE_SERVER_PASSWORD", "s3cret")],
    );
    let mut node = Command::new("timeout");
    node.arg("120")
        .arg("node")
        .arg(clients().join("sdk.mjs"))
        .arg(&server.base)
        .env("OPENCODE_SERVER_PASSWORD", "s3cret");
    let out = node.output().unwrap();
    assert!(
        out.status.success(),
        "the SDK script failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let seen = &lines(&out)[0];
    assert_eq!(seen["session"]["title"], "from the SDK");
    assert_eq!(seen["session"]["projectID"], "global");
    assert_eq!(seen["promptAsyncStatus"], 204);
    assert_eq!(
        seen["ask"],
        json!({"permission": "read", "patterns": ["hello.txt"], "tool": "call_1"})
    );
    assert_eq!(seen["replied"], true);
    assert_eq!(
        seen["story"],
        json!([
            "session.status:busy",
            "tool:read:pending",
            "tool:read:running",
            "permission.asked",
            "permission.replied",
            "tool:read:completed",
            "session.status:idle",
            "session.idle"
        ])
    );
    assert_eq!(
        seen["answer"],
        json!({"role": "assistant", "finish": "stop", "text": "The file says hi."})
    );
    assert_eq!(seen["tool"][0]["status"], "completed");
    assert_eq!(seen["aborted"], true);
    assert_eq!(
        seen["afterAbort"],
        json!({"role": "assistant", "error": "MessageAbortedError"})
    );
}

#[tokio::test]
async fn doc_is_valid_openapi_3_1() {
    let env = Env::new();
    let server = Server::launch(&env, &[], &[]);
    let doc = crate::server::client()
        .get(server.url("/doc"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let file = env.root.path().join("doc.json");
    std::fs::write(&file, &doc).unwrap();
    let out = Command::new("node")
        .arg(clients().join("validate.mjs"))
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        lines(&out),
        [json!({"valid": true, "openapi": "3.1.0"})],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every route the OpenCode clients were seen to use is described.
    let doc: Value = serde_json::from_str(&doc).unwrap();
    for path in [
        "/session",
        "/session/status",
        "/session/{sessionID}",
        "/session/{sessionID}/message",
        "/session/{sessionID}/prompt_async",
        "/session/{sessionID}/abort",
        "/session/{sessionID}/todo",
        "/session/{sessionID}/diff",
        "/permission",
        "/permission/{requestID}/reply",
        "/event",
        "/global/event",
        "/config",
        "/config/providers",
        "/provider",
        "/agent",
        "/command",
        "/path",
        "/project/current",
        "/vcs",
        "/formatter",
        "/lsp",
        "/mcp",
        "/experimental/capabilities",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is not in /doc");
    }
}

/// A tmux server of the test's own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
    /// Where the program in it writes its stderr, shown when a wait fails.
    stderr: PathBuf,
}

impl Tmux {
    fn new(name: &str, stderr: PathBuf) -> Tmux {
        let which = Command::new("tmux").arg("-V").output();
        assert!(
            which.is_ok_and(|o| o.status.success()),
            "the TUI test needs tmux; install it (apt-get install tmux)"
        );
        Tmux {
            socket: format!("warden-{name}-{}", std::process::id()),
            stderr,
        }
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "tui"]).stdout).into_owned()
    }

    /// Wait until the screen shows `text`; the screen when it does.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the TUI never showed {text:?}; the screen:\n{screen}\nits stderr:\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[tokio::test]
async fn the_tui_answers_an_ask_shows_the_tool_call_and_answer_and_aborts() {
    let env = Env::new();
    let cassette = read_then_answer(&env);
    env.config(json!({"permission": {"read": "ask"}}));
    let model = format!("scripted:{}", cassette.display());
    let server = Server::launch(&env, &["--model", &model], &[]);
    let home = env.root.path().join("home");
    let bin = clients().join("node_modules/.bin/opencode");
    let mut vars = Command::new("env");
    offline(&mut vars, &home);
    let exports: Vec<String> = vars
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}='{}'", k.to_str()?, v?.to_str()?)))
        .collect();
    let stderr = env.root.path().join("tui.stderr");
    let script = format!(
        "cd '{}' && env {} '{}' attach '{}' 2>'{}'",
        env.project().display(),
        exports.join(" "),
        bin.display(),
        server.base,
        stderr.display()
    );
    let tmux = Tmux::new("tui", stderr);
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "tui",
        "-x",
        "160",
        "-y",
        "45",
        &script,
    ]);
    assert!(started.status.success(), "{started:?}");
    tmux.wait_for("Ask anything");
    tmux.cmd(&["send-keys", "-t", "tui", "read hello.txt"]);
    tmux.wait_for("read hello.txt");
    tmux.cmd(&["send-keys", "-t", "tui", "Enter"]);
    // warden's rule asks; the TUI shows the question and answers it.
    let ask = tmux.wait_for("Permission required");
    assert!(ask.contains("Allow once"), "{ask}");
    tmux.cmd(&["send-keys", "-t", "tui", "Enter"]);
    let screen = tmux.wait_for("The file says hi.");
    assert!(
        screen.contains("Read hello.txt"),
        "no tool line on screen:\n{screen}"
    );
    // A prompt whose answer is slow, interrupted from the TUI.
    tmux.cmd(&["send-keys", "-t", "tui", "wait please"]);
    tmux.wait_for("wait please");
    tmux.cmd(&["send-keys", "-t", "tui", "Enter"]);
    tmux.wait_for("esc interrupt");
    tmux.cmd(&["send-keys", "-t", "tui", "Escape"]);
    tmux.wait_for("esc again to interrupt");
    tmux.cmd(&["send-keys", "-t", "tui", "Escape"]);
    tmux.wait_for("interrupted");
    // It all went to warden: its ledger has the session, the answer and
    // the aborted one.
    let sessions = env.ledger().sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    let msgs = env.ledger().messages(&sessions[0].id).await.unwrap();
    let answers: Vec<(String, Option<String>)> = msgs
        .iter()
        .filter_map(|m| match &m.info {
            warden_protocol::MessageInfo::Assistant(a) => {
                Some((m.text(), a.error.as_ref().map(|e| format!("{e:?}"))))
            }
            warden_protocol::MessageInfo::User(_) => None,
        })
        .collect();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[1].0, "The file says hi.");
    assert!(
        answers[2]
            .1
            .as_deref()
            .is_some_and(|e| e.starts_with("Aborted")),
        "{answers:?}"
    );
    assert!(
        tool_parts(&msgs)
            .iter()
            .any(|(_, s)| s.status() == "completed"),
        "the read ran once allowed"
    );
}
