//! Helpers: a scratch project, a data dir, cassettes that record what the
//! model was shown, and reading the ledger the binary wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use warden_core::{Bus, Ledger};
use warden_protocol::{MessageWithParts, PartBody, SessionId, ToolState};

/// The tools of the fixture plugin (plugins/fixtures).
pub const FIXTURE_TOOLS: [&str; 15] = [
    "sleep",
    "spin",
    "alloc",
    "recurse",
    "panic",
    "big",
    "echo",
    "read_path",
    "write_path",
    "env",
    "tcp",
    "ask_then_write",
    "sleep_then_write",
    "counter",
    "tally",
];

/// The built-in tools, in the order the model is offered them.
pub const BUILTIN_TOOLS: [&str; 6] = ["read", "write", "edit", "list", "glob", "grep"];

/// A project directory, a data dir and a cassette, all temporary.
pub struct Env {
    pub root: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("project")).unwrap();
        std::fs::create_dir_all(root.path().join("data")).unwrap();
        // Each test has a data dir of its own, but compiling the built-in
        // components afresh in each would cost seconds per run; the cache is
        // keyed by content and engine, and written atomically, so sharing it
        // is safe.
        std::os::unix::fs::symlink(shared_cache(), root.path().join("data").join("cache")).unwrap();
        Env { root }
    }

    pub fn project(&self) -> PathBuf {
        std::fs::canonicalize(self.root.path().join("project")).unwrap()
    }

    pub fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// Write a file in the project.
    pub fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.project().join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Write the cassette; requests are recorded next to it.
    pub fn cassette(&self, turns: Value) -> PathBuf {
        let p = self.root.path().join("cassette.json");
        std::fs::write(
            &p,
            json!({"turns": turns, "record": "requests.jsonl"}).to_string(),
        )
        .unwrap();
        p
    }

    /// Every request the scripted model received, in order. (A process
    /// killed while recording may leave one cut line; it is skipped.)
    pub fn requests(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.root.path().join("requests.jsonl")) {
            Ok(text) => text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Write the config (warden.json in the project) and trust it, as the
    /// operator does with `warden trust` (an untrusted one may only tighten;
    /// `trust.rs` plays the checkout that nobody trusted).
    pub fn config(&self, config: Value) {
        let file = self.project().join("warden.json");
        let text = config.to_string();
        std::fs::write(&file, &text).unwrap();
        self.trust_in(&self.data());
    }

    /// Trust the project's warden.json as it is now in the trust list of
    /// the data dir `data` (for a test that runs warden on another one).
    pub fn trust_in(&self, data: &Path) {
        let file = std::fs::canonicalize(self.project().join("warden.json")).unwrap();
        let text = std::fs::read(&file).unwrap();
        warden_core::config::trust::TrustStore::open(data)
            .unwrap()
            .trust(&file, &text)
            .unwrap();
    }

    /// Write the project's warden.json without trusting it: what a cloned
    /// repository brings.
    pub fn untrusted_config(&self, config: Value) {
        std::fs::write(self.project().join("warden.json"), config.to_string()).unwrap();
    }

    /// A config entry loading the fixture plugin with these grants.
    /// Each tool is mapped to a permission of its own name, as an operator
    /// would (an unmapped tool of a plugin with files or hosts is asked about).
    pub fn fixtures_plugin(grants: Value) -> Value {
        let tools: serde_json::Map<String, Value> = FIXTURE_TOOLS
            .iter()
            .map(|t| (t.to_string(), json!({"permission": t})))
            .collect();
        json!({"name": "fixtures", "path": fixture_wasm(), "grants": grants, "tools": tools})
    }

    /// `warden ARGS` with this env's data dir, from the project.
    pub fn warden(&self, args: &[&str]) -> Command {
        self.warden_under(&[], args)
    }

    /// The same, started by `wrapper` (a program and its arguments, which
    /// then runs warden), e.g. `nsenter` into another mount namespace.
    pub fn warden_under(&self, wrapper: &[String], args: &[&str]) -> Command {
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(env!("CARGO_BIN_EXE_warden"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_warden")),
        };
        c.args(args)
            .current_dir(self.project())
            .env("WARDEN_DATA_DIR", self.data())
            // No user-level config but the test's own (none unless it writes one).
            .env("XDG_CONFIG_HOME", self.root.path().join("user-config"))
            .env_remove("WARDEN_CONFIG")
            .env_remove("WARDEN_SCRIPTED_RECORD")
            .env_remove("WARDEN_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Run `warden run --format json --model scripted:CASSETTE PROMPT`.
    pub fn run_json(&self, prompt: &str) -> Run {
        self.run_json_with(prompt, &[])
    }

    /// The same, with environment variables set (`Some`) or removed (`None`)
    /// for the process, e.g. the ones a plugin is granted.
    pub fn run_json_with(&self, prompt: &str, vars: &[(&str, Option<&str>)]) -> Run {
        let cassette = self.root.path().join("cassette.json");
        let mut cmd = self.warden(&[
            "run",
            "--format",
            "json",
            "--model",
            &format!("scripted:{}", cassette.display()),
            prompt,
        ]);
        for (name, value) in vars {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        Run::from(cmd.output().unwrap())
    }

    /// The ledger the binary wrote.
    pub fn ledger(&self) -> Ledger {
        Ledger::open(&self.data().join("ledger.db"), Bus::new()).unwrap()
    }
}

/// The compiled-component cache every test's data dir points to.
fn shared_cache() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-component-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The fixture component built by host/runtime/build.rs.
pub fn fixture_wasm() -> String {
    plugin_wasm("warden_fixtures.wasm")
}

/// A component built by host/runtime/build.rs, by file name.
pub fn plugin_wasm(file: &str) -> String {
    format!("{}/{file}", warden_runtime::builtin::plugin_dir())
}

/// An event envelope `{"id", "type", "properties"}` as one object: its
/// properties with its `type` beside them, so tests read
/// `e["part"]`, `e["status"]` (the envelope itself is asserted in cli.rs and
/// server.rs).
pub fn flat(v: Value) -> Value {
    match v {
        Value::Object(mut m) if m.contains_key("properties") => {
            let mut out = match m.remove("properties") {
                Some(Value::Object(p)) => p,
                _ => Default::default(),
            };
            // The envelope's id is left out: a permission request has an id
            // of its own.
            if let Some(x) = m.remove("type") {
                out.insert("type".into(), x);
            }
            Value::Object(out)
        }
        other => other,
    }
}

/// A finished `warden` process and its JSON events, each [`flat`].
pub struct Run {
    pub status: std::process::ExitStatus,
    pub events: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let events = stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
                flat(v)
            })
            .collect();
        Run {
            status: out.status,
            events,
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The session id the run reported.
    pub fn session(&self) -> SessionId {
        let last = self
            .events
            .last()
            .unwrap_or_else(|| panic!("no events; stderr: {}", self.stderr));
        SessionId(last["sessionID"].as_str().unwrap().to_string())
    }

    /// The `run.finished` event.
    pub fn finished(&self) -> &Value {
        let last = self.events.last().unwrap();
        assert_eq!(last["type"], "run.finished", "{}", self.stdout);
        last
    }

    /// Why the run ended without an answer: `run.finished`'s `error`.
    pub fn error(&self) -> &str {
        self.finished()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("the run has no error: {}", self.stdout))
    }

    /// (call_id, status) of each tool part update, dropping repeats.
    pub fn tool_states(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for e in &self.events {
            if e["type"] == "message.part.updated" && e["part"]["type"] == "tool" {
                let item = (
                    e["part"]["callID"].as_str().unwrap().to_string(),
                    e["part"]["state"]["status"].as_str().unwrap().to_string(),
                );
                if out.last() != Some(&item) {
                    out.push(item);
                }
            }
        }
        out
    }

    /// Session statuses in order.
    pub fn statuses(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["type"] == "session.status")
            .map(|e| e["status"]["type"].as_str().unwrap().to_string())
            .collect()
    }
}

/// The tool results in a recorded request: (call_id, is_error, output).
pub fn tool_results(request: &Value) -> Vec<(String, bool, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .map(|r| {
            (
                r["call_id"].as_str().unwrap().to_string(),
                r["is_error"].as_bool().unwrap_or(false),
                r["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The names of the tools offered in a recorded request.
pub fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Every tool part of a session in the ledger, in order.
pub fn tool_parts(msgs: &[MessageWithParts]) -> Vec<(String, ToolState)> {
    msgs.iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.body {
            PartBody::Tool { call_id, state, .. } => Some((call_id.clone(), state.clone())),
            _ => None,
        })
        .collect()
}

/// The recorded timeline of one call: its statuses in order.
pub async fn timeline(ledger: &Ledger, session: &SessionId, call: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in ledger.part_events(session).await.unwrap() {
        if let PartBody::Tool { call_id, state, .. } = &e.part.body
            && call_id == call
        {
            let s = state.status().to_string();
            if out.last() != Some(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// Wait for a path to exist (a child writing it), up to `secs`.
#[allow(dead_code)]
pub fn wait_for(path: &Path, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// A tiny HTTP/1.1 server on 127.0.0.1 for guests to fetch from: fixed
/// responses by path, every request path recorded.
pub struct HttpServer {
    pub port: u16,
    pub hits: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// One canned response: status, extra headers, body.
#[derive(Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Canned {
    pub fn ok(content_type: &str, body: &str) -> Canned {
        Canned {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.as_bytes().to_vec(),
        }
    }
}

#[allow(dead_code)]
pub fn serve_http(routes: Vec<(&str, Canned)>) -> HttpServer {
    serve_http_on("127.0.0.1", routes)
}

/// The same, on another loopback address (e.g. 127.0.0.2, a second "host").
pub fn serve_http_on(ip: &str, routes: Vec<(&str, Canned)>) -> HttpServer {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let routes: std::collections::HashMap<String, Canned> = routes
        .into_iter()
        .map(|(p, c)| (p.to_string(), c))
        .collect();
    let hits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n")
                && stream.read(&mut byte).map(|n| n == 1).unwrap_or(false)
            {
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head);
            let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
            seen.lock().unwrap().push(path.clone());
            let canned = routes.get(&path).cloned().unwrap_or(Canned {
                status: 404,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: b"not found".to_vec(),
            });
            let mut response = format!(
                "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                canned.status,
                canned.body.len()
            );
            for (k, v) in &canned.headers {
                response.push_str(&format!("{k}: {v}\r\n"));
            }
            response.push_str("\r\n");
            let _ = stream.write_all(response.as_bytes());
            let _ = stream.write_all(&canned.body);
        }
    });
    HttpServer { port, hits }
}

/// The raw fixture component (invalid output on purpose).
#[allow(dead_code)]
pub fn raw_fixture_wasm() -> String {
    format!(
        "{}/warden_fixtures_raw.wasm",
        warden_runtime::builtin::plugin_dir()
    )
}
