//! A ledger whose disk fills up, or turns read-only, mid-step: the step
//! stops at the write that failed and says so, nothing written before is
//! lost, and `warden session resume` (once the disk has room) marks every
//! call the step left open as interrupted, in the ledger, and says so.
//!
//! The disk is real: a small tmpfs mounted in a mount namespace of a helper
//! process (`unshare -rm`, which needs no root). warden runs in that
//! namespace (`nsenter`); this process fills and reads the disk through
//! `/proc/PID/root` (SQLite resolves that link to the folder under the
//! mount, so the ledger is read from a copy). Filling it leaves a chosen
//! number of bytes free, so a sweep over that number makes each write of a
//! run the first to fail.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use serde_json::json;
use warden_core::{Bus, Ledger};
use warden_protocol::{MessageError, MessageInfo, MessageWithParts, PartBody, ToolState};

use crate::common::*;

/// A tmpfs of `size` KiB of its own, alive while this value is.
pub struct SmallDisk {
    helper: Child,
    /// The helper's stdin (commands) and stdout (their outcomes).
    channel: std::sync::Mutex<(ChildStdin, BufReader<std::process::ChildStdout>)>,
    /// The mount point as the helper (and warden under [`Self::warden`]) sees it.
    pub inside: PathBuf,
    /// The same folder as this process reaches it.
    pub dir: PathBuf,
    _mount_point: tempfile::TempDir,
}

impl SmallDisk {
    pub fn new(size_kib: u64) -> SmallDisk {
        let mount_point = tempfile::tempdir().unwrap();
        let inside = mount_point.path().to_path_buf();
        // The helper mounts, says so, then runs each line it is sent (a
        // remount) and answers `ok` or `failed`; it exits when its stdin
        // closes, however this process ends, and the mount goes with it.
        let script = format!(
            "mount -t tmpfs -o size={size_kib}k,mode=0777 tmpfs '{}' || exit 1; echo ready; \
             while read -r line; do if sh -c \"$line\" >&2; then echo ok; else echo failed; fi; done",
            inside.display()
        );
        let mut helper = Command::new("unshare")
            .args(["-rm", "sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("unshare (util-linux) starts the helper that mounts a small tmpfs");
        let commands = helper.stdin.take().unwrap();
        let mut replies = BufReader::new(helper.stdout.take().unwrap());
        let mut line = String::new();
        replies.read_line(&mut line).unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "`unshare -rm` could not mount a tmpfs (user namespaces must be allowed)"
        );
        let dir = PathBuf::from(format!("/proc/{}/root{}", helper.id(), inside.display()));
        let disk = SmallDisk {
            helper,
            channel: std::sync::Mutex::new((commands, replies)),
            inside,
            dir,
            _mount_point: mount_point,
        };
        // It is the small disk, not the folder under it.
        let probe = disk.dir.join("probe");
        let big = vec![0u8; (size_kib as usize + 64) * 1024];
        let err = std::fs::write(&probe, &big).expect_err("the tmpfs is smaller than this");
        assert_eq!(err.raw_os_error(), Some(libc_enospc()), "{err}");
        std::fs::remove_file(&probe).unwrap();
        disk
    }

    /// `warden ARGS` (with `env`'s settings), run in the disk's namespace.
    pub fn warden(&self, env: &Env, args: &[&str]) -> Command {
        env.warden_under(&self.wrapper(env), args)
    }

    /// The command that runs a program in the disk's namespace, from `env`'s project.
    pub fn wrapper(&self, env: &Env) -> Vec<String> {
        // Entering a mount namespace moves to its root: back to the project.
        let wd = format!("--wd={}", env.project().display());
        [
            "nsenter",
            "-t",
            &self.helper.id().to_string(),
            "-U",
            "-m",
            "--preserve-credentials",
            &wd,
            "--",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// A copy of the ledger `name` on the disk (with its log), to read here.
    pub fn copy_out(&self, name: &str, to: &Path) -> PathBuf {
        let target = to.join(name);
        for suffix in ["", "-wal"] {
            let _ = std::fs::remove_file(to.join(format!("{name}{suffix}")));
            let from = self.dir.join(format!("{name}{suffix}"));
            if from.exists() {
                std::fs::copy(&from, to.join(format!("{name}{suffix}"))).unwrap();
            }
        }
        target
    }

    /// Run a shell command inside the helper's namespace (e.g. a remount).
    pub fn run_inside(&self, command: &str) -> bool {
        let command = command.replace("{dir}", &self.inside.display().to_string());
        let mut channel = self.channel.lock().unwrap();
        let (commands, replies) = &mut *channel;
        writeln!(commands, "{command}").unwrap();
        let mut line = String::new();
        replies.read_line(&mut line).unwrap();
        line.trim() == "ok"
    }

    /// Fill the disk with a ballast file, leaving about `free` bytes.
    pub fn fill_leaving(&self, free: u64) {
        let path = self.dir.join("ballast");
        let mut f = std::fs::File::create(&path).unwrap();
        for chunk in [1 << 20, 4096, 512, 1] {
            let block = vec![0xA5u8; chunk];
            while f.write_all(&block).is_ok() {}
        }
        // Whatever write_all got in before ENOSPC stays; measure, then give
        // back `free` bytes.
        let len = std::fs::metadata(&path).unwrap().len();
        f.set_len(len.saturating_sub(free)).unwrap();
    }

    pub fn empty_ballast(&self) {
        let _ = std::fs::remove_file(self.dir.join("ballast"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.helper.kill();
        let _ = self.helper.wait();
    }
}

fn libc_enospc() -> i32 {
    28 // ENOSPC on Linux
}

/// The ledger `ledger.db` on `disk`, every session's messages (read from a
/// copy in `scratch`).
async fn snapshot(disk: &SmallDisk, scratch: &Path) -> HashMap<String, Vec<MessageWithParts>> {
    let path = disk.copy_out("ledger.db", scratch);
    let ledger = Ledger::open(&path, Bus::new()).unwrap();
    let mut out = HashMap::new();
    for s in ledger.sessions().await.unwrap() {
        out.insert(s.id.0.clone(), ledger.messages(&s.id).await.unwrap());
    }
    out
}

fn is_open(p: &warden_protocol::Part) -> bool {
    matches!(
        p.tool_state(),
        Some(ToolState::Pending { .. } | ToolState::Running { .. })
    )
}

/// What a failed run said, for the assertions' messages.
fn said(run: &Run) -> String {
    format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr)
}

/// A full disk at each write of a run in turn: every run that fails says
/// the disk is full (exit code, stderr, the JSON stream's `run.finished`),
/// and after `session resume` no call is open, each call the failed run
/// left open is an interrupted error in the ledger (and resume said so),
/// and every row the failed run wrote is still there as it was.
#[tokio::test]
async fn a_disk_that_fills_at_each_write_of_a_step_leaves_no_call_open_after_resume() {
    let env = Env::new();
    env.file("package.json", r#"{"scripts": {"build": "tsc"}}"#);
    let cassette = env.cassette(json!([
        {"text": "Reading it.", "tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "One script: build."}
    ]));
    let model = format!("scripted:{}", cassette.display());
    // A ledger with its schema, made once and copied onto the disk for each run.
    let base = env.root.path().join("base.db");
    let made = env
        .warden(&["session", "list", "--ledger", base.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");

    let disk = SmallDisk::new(2048);
    let ledger = disk.dir.join("ledger.db");
    let ledger_arg = disk.inside.join("ledger.db").display().to_string();
    let scratch = env.root.path().join("copies");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut failed_runs = 0;
    let mut left_running = 0;
    let mut left_open_messages = 0;
    let mut reached_the_end = false;
    let mut free = 0u64;
    while free <= 1 << 20 {
        for f in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
            let _ = std::fs::remove_file(disk.dir.join(f));
        }
        std::fs::copy(&base, &ledger).unwrap();
        disk.fill_leaving(free);
        let run = Run::from(
            disk.warden(
                &env,
                &[
                    "run",
                    "--format",
                    "json",
                    "--model",
                    &model,
                    "--ledger",
                    &ledger_arg,
                    "which scripts?",
                ],
            )
            .output()
            .unwrap(),
        );
        disk.empty_ballast();
        if run.status.success() {
            assert_eq!(
                run.finished()["text"],
                "One script: build.",
                "{}",
                said(&run)
            );
            reached_the_end = true;
            break;
        }
        failed_runs += 1;
        assert_eq!(run.status.code(), Some(1), "{}", said(&run));
        assert!(
            run.stderr.contains("the ledger is unavailable")
                && run
                    .stderr
                    .contains("the disk holding the ledger file is full"),
            "free {free}: the error says the disk is full\n{}",
            said(&run)
        );
        assert!(!run.stderr.contains("panicked"), "{}", said(&run));
        if let Some(finished) = run.events.last().filter(|e| e["type"] == "run.finished") {
            let error = finished["error"].as_str().unwrap_or_default();
            assert!(
                error.contains("the ledger is unavailable"),
                "{}",
                said(&run)
            );
        }

        let before = snapshot(&disk, &scratch).await;
        for (session, msgs) in &before {
            let open_calls: Vec<String> = msgs
                .iter()
                .flat_map(|m| &m.parts)
                .filter(|p| is_open(p))
                .filter_map(|p| p.call_id().map(str::to_string))
                .collect();
            if msgs
                .iter()
                .flat_map(|m| &m.parts)
                .any(|p| matches!(p.tool_state(), Some(ToolState::Running { .. })))
            {
                left_running += 1;
            }
            if msgs
                .iter()
                .any(|m| matches!(&m.info, MessageInfo::Assistant(a) if a.time.completed.is_none()))
            {
                left_open_messages += 1;
            }
            // Nothing the failed step wrote claims it ended: a message
            // marked completed holds no open call.
            for m in msgs {
                if let MessageInfo::Assistant(a) = &m.info
                    && a.time.completed.is_some()
                {
                    assert!(
                        !m.parts.iter().any(is_open),
                        "free {free}: a step written as ended with a call still open: {m:?}"
                    );
                }
            }

            let resumed = Run::from(
                disk.warden(
                    &env,
                    &[
                        "session",
                        "resume",
                        session,
                        "--format",
                        "json",
                        "--ledger",
                        &ledger_arg,
                    ],
                )
                .output()
                .unwrap(),
            );
            if !msgs.iter().any(|m| m.info.role() == "user") && !resumed.status.success() {
                // The run failed before its prompt was in the ledger's queue
                // (and said so): there is nothing to resume, and resume says
                // that. (A prompt queued but not yet written as a message is
                // answered by resume: the checks below.)
                assert_eq!(resumed.status.code(), Some(1), "{}", said(&resumed));
                assert!(
                    resumed.stderr.contains("has no user message to answer"),
                    "{}",
                    said(&resumed)
                );
                continue;
            }
            assert!(
                resumed.status.success(),
                "free {free}: resume\n{}",
                said(&resumed)
            );
            assert_eq!(resumed.finished()["text"], "One script: build.");
            let warned = resumed.events.iter().any(|e| {
                e["type"] == "session.warning"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("marked interrupted"))
            });
            assert_eq!(
                warned,
                !open_calls.is_empty(),
                "free {free}: resume says which calls it marked interrupted ({open_calls:?})\n{}",
                said(&resumed)
            );

            let after = snapshot(&disk, &scratch).await;
            let after = &after[session];
            assert!(
                !after.iter().flat_map(|m| &m.parts).any(is_open),
                "free {free}: a call is open after resume: {after:?}"
            );
            let parts_after: HashMap<&str, &warden_protocol::Part> = after
                .iter()
                .flat_map(|m| &m.parts)
                .map(|p| (p.id.as_str(), p))
                .collect();
            for m in msgs {
                let now = after
                    .iter()
                    .find(|a| a.info.id() == m.info.id())
                    .unwrap_or_else(|| panic!("free {free}: message {} lost", m.info.id()));
                match (&m.info, &now.info) {
                    (MessageInfo::Assistant(was), MessageInfo::Assistant(is))
                        if was.time.completed.is_none() =>
                    {
                        assert!(is.time.completed.is_some());
                        assert!(
                            matches!(is.error, Some(MessageError::Interrupted { .. })),
                            "{is:?}"
                        );
                    }
                    (was, is) => assert_eq!(
                        serde_json::to_value(was).unwrap(),
                        serde_json::to_value(is).unwrap(),
                        "free {free}: a finished message changed"
                    ),
                }
                for p in &m.parts {
                    let now = parts_after
                        .get(p.id.as_str())
                        .unwrap_or_else(|| panic!("free {free}: part {} lost", p.id));
                    if is_open(p) {
                        match now.tool_state() {
                            Some(ToolState::Error {
                                interrupted: true,
                                error,
                                ..
                            }) => assert!(error.contains("stopped before it finished"), "{error}"),
                            other => panic!("free {free}: an open call became {other:?}"),
                        }
                    } else if !matches!(
                        &p.body,
                        PartBody::Text { time: Some(t), .. } | PartBody::Reasoning { time: Some(t), .. }
                            if t.end.is_none()
                    ) {
                        assert_eq!(
                            serde_json::to_value(p).unwrap(),
                            serde_json::to_value(now).unwrap(),
                            "free {free}: a written part changed"
                        );
                    }
                }
            }
        }
        free += 4096;
    }
    assert!(
        reached_the_end,
        "with 1 MiB free the run still failed ({failed_runs} failed runs)"
    );
    eprintln!(
        "full disk: {failed_runs} runs failed at successive writes; {left_running} left a call running, {left_open_messages} left a step open"
    );
    assert!(
        failed_runs >= 5,
        "the sweep hit too few writes: {failed_runs}"
    );
    assert!(
        left_running >= 1,
        "no run failed at the write that completes a call"
    );
}

/// A ledger that turns read-only: the next run says so and writes nothing;
/// once it is writable again, nothing is lost and the session goes on.
#[tokio::test]
async fn a_read_only_ledger_is_a_clear_error_and_loses_nothing() {
    let env = Env::new();
    env.cassette(json!([{"text": "First."}, {"text": "Second."}]));
    let disk = SmallDisk::new(4096);
    let ledger_arg = disk.inside.join("ledger.db").display().to_string();
    let scratch = env.root.path().join("copies");
    std::fs::create_dir_all(&scratch).unwrap();
    let model = format!(
        "scripted:{}",
        env.root.path().join("cassette.json").display()
    );
    // `warden run --format json --model M --ledger L [ARGS]`.
    let run = |args: &[&str]| {
        let mut all = vec![
            "run",
            "--format",
            "json",
            "--model",
            &model,
            "--ledger",
            &ledger_arg,
        ];
        all.extend_from_slice(args);
        Run::from(disk.warden(&env, &all).output().unwrap())
    };
    let first = run(&["one"]);
    assert!(first.status.success(), "{}", said(&first));
    let session = first.session();
    let before = snapshot(&disk, &scratch).await;

    assert!(
        disk.run_inside("mount -o remount,ro {dir}"),
        "remount read-only"
    );
    let refused = run(&["--session", session.as_str(), "two"]);
    assert_eq!(refused.status.code(), Some(1), "{}", said(&refused));
    assert!(
        refused.stderr.contains("read-only"),
        "the error says the ledger is read-only\n{}",
        said(&refused)
    );
    assert!(
        disk.run_inside("mount -o remount,rw {dir}"),
        "remount read-write"
    );
    let after = snapshot(&disk, &scratch).await;
    assert_eq!(
        serde_json::to_value(&before[&session.0]).unwrap(),
        serde_json::to_value(&after[&session.0]).unwrap(),
        "nothing changed while read-only"
    );
    let again = run(&["--session", session.as_str(), "two"]);
    assert!(again.status.success(), "{}", said(&again));
    assert_eq!(again.finished()["text"], "Second.");
    let texts: Vec<String> = snapshot(&disk, &scratch).await[&session.0]
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["one", "First.", "two", "Second."]);
}

/// The server's client sees a disk that fills mid-turn as a 503 that says
/// so; once the disk has room, the server finishes the prompt by itself (it
/// stayed in the ledger's queue), with no call left open and the answer
/// written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_full_disk_answers_503_and_finishes_the_prompt_once_there_is_room() {
    use crate::server::{Server, client, send, subscribe, until};
    let env = Env::new();
    env.file("package.json", r#"{"scripts": {"build": "tsc"}}"#);
    // The first step waits a little before it starts: the disk fills then.
    env.cassette(json!([
        {"delay_ms": 1500, "tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": "One script: build."}
    ]));
    let disk = SmallDisk::new(4096);
    let ledger = disk.inside.join("ledger.db").display().to_string();
    let s = Server::launch_under(
        &env,
        &disk.wrapper(&env),
        Stdio::inherit(),
        &["--allow-scripted", "--ledger", &ledger],
        &[],
    );
    let c = client();
    let id = crate::server::new_session(&c, &s, &env).await;
    let mut events = subscribe(s.url(&format!("/event?session={id}"))).await;
    let post = {
        let (c, url, model) = (
            c.clone(),
            s.url(&format!("/session/{id}/message")),
            crate::server::model(&env),
        );
        tokio::spawn(async move {
            send(
                &c,
                "POST",
                &url,
                Some(
                    json!({"parts": [{"type": "text", "text": "which scripts?"}], "model": model}),
                ),
            )
            .await
        })
    };
    until(&mut events, |e| {
        e["type"] == "session.status" && e["status"]["type"] == "busy"
    })
    .await;
    disk.fill_leaving(0);
    let (status, body) = post.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "ledger_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the disk holding the ledger file is full"),
        "{message}"
    );
    disk.empty_ballast();
    // The prompt is still in the ledger's queue: the server takes it up
    // again by itself (its retries back off from a second).
    let seen = until(&mut events, |e| {
        e["type"] == "message.part.updated" && e["part"]["text"] == "One script: build."
    })
    .await;
    drop(seen);
    let (status, msgs) = send(&c, "GET", &s.url(&format!("/session/{id}/message")), None).await;
    assert_eq!(status, 200);
    let msgs = msgs.as_array().unwrap();
    let roles: Vec<&str> = msgs
        .iter()
        .map(|m| m["info"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles[0], "user", "{msgs:?}");
    assert_eq!(
        roles.iter().filter(|r| **r == "user").count(),
        1,
        "the prompt was taken once: {msgs:?}"
    );
    let parts: Vec<&serde_json::Value> = msgs
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .collect();
    assert_eq!(
        parts
            .iter()
            .filter(|p| p["text"] == "One script: build.")
            .count(),
        1,
        "answered once: {msgs:?}"
    );
    let open: Vec<_> = parts
        .iter()
        .filter(|p| {
            p["type"] == "tool"
                && matches!(p["state"]["status"].as_str(), Some("pending" | "running"))
        })
        .collect();
    assert!(open.is_empty(), "no call left open: {open:?}");
    // The step the disk stopped is marked interrupted in the ledger; the
    // run that took the prompt up again went on after it.
    let interrupted: Vec<&str> = msgs
        .iter()
        .filter_map(|m| m["info"]["error"]["name"].as_str())
        .collect();
    assert_eq!(interrupted, ["MessageInterruptedError"], "{msgs:?}");
    let last = msgs.last().unwrap();
    assert_eq!(last["info"]["finish"], "stop", "{last}");
}
