//! A hostile tool plugin, written against the raw bindings: `wit/v0.1.0/plugin.wit`
//! through wit-bindgen, WASI through the `wasip2` bindings and Rust's std —
//! never the warden SDK, so nothing in between softens an attack. Each tool
//! pushes on one boundary the host must hold (see tests/all/adversarial.rs).

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "tool-plugin",
});

use exports::warden::plugin::tool::Guest;
use serde_json::{Value, json};
use warden::plugin::host::{self, LogLevel};
use warden::plugin::types::{CallContext, ToolError, ToolOutput, ToolSpec};

struct Adversary;

const TOOLS: &[(&str, &str)] = &[
    ("fields_flood", "Create wasi:http header fields of `kb` KiB, `count` times, keeping them all."),
    ("pollable_flood", "Create `count` clock pollables, keeping them all."),
    ("open", "Read the file at `path` (absolute, or relative to the working directory)."),
    ("list_dir", "List the directory at `path`."),
    ("ask_flood", "Ask a permission `count` times (`distinct`: a new pattern each time)."),
    ("log_flood", "Log `count` lines of `kb` KiB."),
    ("ask_aliased", "Ask one question whose `count` patterns all point at one buffer of `kb` KiB."),
    ("progress_flood", "Send `count` progress updates of `kb` KiB."),
    ("fetch", "GET `scheme`://`authority``path` over wasi:http, raw."),
];

fn arg_u64(args: &Value, name: &str) -> u64 {
    args.get(name).and_then(Value::as_u64).unwrap_or(0)
}

fn arg_str<'a>(args: &'a Value, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("")
}

fn done(output: String) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput {
        output,
        title: String::new(),
        metadata: "{}".into(),
    })
}

fn failed(message: String) -> Result<ToolOutput, ToolError> {
    Err(ToolError::Failed(message))
}

impl Guest for Adversary {
    fn describe() -> Vec<ToolSpec> {
        TOOLS
            .iter()
            .map(|(id, description)| ToolSpec {
                id: (*id).into(),
                description: (*description).into(),
                parameters: r#"{"type": "object"}"#.into(),
            })
            .collect()
    }

    fn execute(ctx: CallContext, tool: String, arguments: String) -> Result<ToolOutput, ToolError> {
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        match tool.as_str() {
            "fields_flood" => fields_flood(arg_u64(&args, "count"), arg_u64(&args, "kb")),
            "pollable_flood" => {
                let mut kept = Vec::new();
                for _ in 0..arg_u64(&args, "count") {
                    kept.push(wasip2::clocks::monotonic_clock::subscribe_duration(1 << 40));
                }
                done(format!("made {} pollables", kept.len()))
            }
            "open" => {
                let path = resolve(&ctx, arg_str(&args, "path"));
                match std::fs::read(&path) {
                    Ok(bytes) => done(String::from_utf8_lossy(&bytes).into_owned()),
                    Err(e) => failed(format!("cannot open {path}: {e}")),
                }
            }
            "list_dir" => {
                let path = resolve(&ctx, arg_str(&args, "path"));
                match std::fs::read_dir(&path) {
                    Ok(entries) => {
                        let mut names: Vec<String> = entries
                            .filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect();
                        names.sort();
                        done(names.join("\n"))
                    }
                    Err(e) => failed(format!("cannot list {path}: {e}")),
                }
            }
            "ask_flood" => {
                let distinct = args.get("distinct").and_then(Value::as_bool).unwrap_or(false);
                let (mut ok, mut refused, mut last) = (0u64, 0u64, String::new());
                for i in 0..arg_u64(&args, "count") {
                    let pattern = if distinct { format!("p{i}") } else { "same".into() };
                    match host::ask("probe", &[pattern], "{}") {
                        Ok(()) => ok += 1,
                        Err(e) => {
                            refused += 1;
                            last = e;
                        }
                    }
                }
                done(json!({"ok": ok, "refused": refused, "last": last}).to_string())
            }
            "ask_aliased" => {
                let buffer = "p".repeat(arg_u64(&args, "kb") as usize * 1024);
                let (ptr, len) = (buffer.as_ptr().cast_mut(), buffer.len());
                std::mem::forget(buffer);
                // Every entry of the list points at the same bytes: the
                // guest holds one buffer, a host that copies each entry
                // before looking holds `count` of them.
                let patterns: Vec<String> = (0..arg_u64(&args, "count"))
                    // SAFETY: never freed (forgotten below), never written:
                    // the aliases only lend the host the bytes to read.
                    .map(|_| unsafe { String::from_raw_parts(ptr, len, len) })
                    .collect();
                let answer = host::ask("probe", &patterns, "{}");
                std::mem::forget(patterns);
                match answer {
                    Ok(()) => done("allowed".into()),
                    Err(e) => done(format!("refused: {e}")),
                }
            }
            "log_flood" => {
                let line = "x".repeat(arg_u64(&args, "kb") as usize * 1024);
                for _ in 0..arg_u64(&args, "count") {
                    host::log(LogLevel::Error, &line);
                }
                done("logged".into())
            }
            "progress_flood" => {
                let meta = json!({"pad": "x".repeat(arg_u64(&args, "kb") as usize * 1024)}).to_string();
                for i in 0..arg_u64(&args, "count") {
                    host::progress(Some(&format!("step {i}")), &meta);
                }
                done("progressed".into())
            }
            "fetch" => fetch(
                arg_str(&args, "scheme"),
                arg_str(&args, "authority"),
                arg_str(&args, "path"),
            ),
            other => failed(format!("no tool {other}")),
        }
    }
}

fn resolve(ctx: &CallContext, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", ctx.directory)
    }
}

/// Header collections the host must hold, each `kb` KiB, never dropped.
fn fields_flood(count: u64, kb: u64) -> Result<ToolOutput, ToolError> {
    use wasip2::http::types::Fields;
    let value = vec![b'a'; kb as usize * 1024];
    let mut kept = Vec::new();
    for i in 0..count {
        let entries = [("x-flood".to_string(), value.clone())];
        match Fields::from_list(&entries) {
            Ok(f) => kept.push(f),
            Err(e) => return failed(format!("fields refused at {i}: {e:?}")),
        }
    }
    done(format!("made {} fields", kept.len()))
}

fn fetch(scheme: &str, authority: &str, path: &str) -> Result<ToolOutput, ToolError> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};
    let request = OutgoingRequest::new(Fields::new());
    let scheme = if scheme == "https" { Scheme::Https } else { Scheme::Http };
    let built = request.set_method(&Method::Get).is_ok()
        && request.set_scheme(Some(&scheme)).is_ok()
        && request.set_authority(Some(authority)).is_ok()
        && request.set_path_with_query(Some(path)).is_ok();
    if !built {
        return failed(format!("wasi:http would not build a request for {authority}"));
    }
    let pending = match outgoing_handler::handle(request, None) {
        Ok(p) => p,
        Err(e) => return failed(format!("refused: {e:?}")),
    };
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => done(format!("status {}", response.status())),
        Some(Ok(Err(e))) => failed(format!("refused: {e:?}")),
        _ => failed("lost".into()),
    }
}

export!(Adversary);
