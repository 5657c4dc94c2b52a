//! Two `warden serve` processes on one PostgreSQL ledger (issue 15, events
//! across hosts): a client of host B sees, in order, every event of a
//! session host A runs, lists A's permission ask and answers it on B; A
//! applies the answer once and the run completes.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use warden_llm::sse::SseParser;

use crate::common::*;
use crate::server::{Server, client, is_idle, model, send, subscribe, until};

/// The events a client acts on, as short strings: tool states, asks and
/// answers, statuses. (Streamed text is left out: a relay may merge deltas
/// that queued up.)
fn outline(seen: &[Value]) -> Vec<String> {
    seen.iter()
        .filter_map(|e| match e["type"].as_str()? {
            "message.part.updated" if e["part"]["type"] == "tool" => Some(format!(
                "tool {} {}",
                e["part"]["callID"].as_str().unwrap_or("?"),
                e["part"]["state"]["status"].as_str()?
            )),
            "permission.asked" => Some(format!("asked {}", e["permission"].as_str()?)),
            "permission.replied" => Some(format!("replied {}", e["reply"].as_str()?)),
            "session.status" => Some(format!("status {}", e["status"]["type"].as_str()?)),
            "session.idle" => Some("idle".into()),
            _ => None,
        })
        .collect()
}

/// Subscribe to an event stream, resuming after SSE id `last` when given;
/// each event [`flat`], with its SSE id as `"sse_id"`.
async fn subscribe_from(url: String, last: Option<&str>) -> mpsc::UnboundedReceiver<Value> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut req = client().get(&url);
    if let Some(id) = last {
        req = req.header("last-event-id", id);
    }
    let res = req.send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut stream = res.bytes_stream();
    tokio::spawn(async move {
        let mut parser = SseParser::new();
        while let Some(Ok(chunk)) = stream.next().await {
            for e in parser.push(&chunk).unwrap() {
                if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                    let mut v = flat(v);
                    v["sse_id"] = json!(e.id);
                    let _ = tx.send(v);
                }
            }
        }
    });
    rx
}

/// The event of a `/global/event` message, as [`flat`] makes one of `/event`.
fn payload(e: &Value) -> Value {
    flat(e["payload"].clone())
}

/// Consecutive repeats dropped (a tool part is written more than once in a
/// state, e.g. as its input streams).
fn changes(outline: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in outline {
        if out.last() != Some(s) {
            out.push(s.clone());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_host_sees_a_session_s_events_in_order_and_answers_its_ask() {
    let db = warden_pg_harness::database();
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    env.config(json!({"permission": {"read": "ask"}}));
    env.cassette(json!([
        {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
        {"text": "read it"}
    ]));
    let on_pg = [("WARDEN_LEDGER", db.as_str())];
    let a = Server::start(&env, &[], &on_pg);
    let b = Server::start(&env, &[], &on_pg);
    let c = client();

    // B's relay is listening once a session made on A shows on B's stream.
    let mut b_all = subscribe(b.url("/global/event")).await;
    let (status, body) = send(
        &c,
        "POST",
        &a.url("/session"),
        Some(json!({"directory": env.project().display().to_string()})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    until(&mut b_all, |e| {
        let e = payload(e);
        e["type"] == "session.created" && e["info"]["id"] == id.as_str()
    })
    .await;

    let mut on_a = subscribe(a.url(&format!("/event?session={id}"))).await;
    let mut on_b = subscribe_from(b.url(&format!("/event?session={id}")), None).await;
    let (status, _) = send(
        &c,
        "POST",
        &a.url(&format!("/session/{id}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": model(&env)})),
    )
    .await;
    assert_eq!(status, 204);

    // B's client sees A's ask, and B lists it among the pending asks.
    let before_ask = until(&mut on_b, |e| e["type"] == "permission.asked").await;
    let ask = before_ask.last().unwrap().clone();
    assert_eq!(
        (ask["permission"].as_str(), ask["patterns"][0].as_str()),
        (Some("read"), Some("a.txt"))
    );
    let rid = ask["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, pending) = send(
            &c,
            "GET",
            &b.url(&format!("/permission?session={id}")),
            None,
        )
        .await;
        let ids: Vec<&str> = pending
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["id"].as_str())
            .collect();
        if ids == [rid.as_str()] {
            break;
        }
        assert!(ids.is_empty(), "B lists other asks: {pending}");
        assert!(Instant::now() < deadline, "B never listed A's ask");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Answered on B: A applies it, the call runs and the run completes.
    let (status, body) = send(
        &c,
        "POST",
        &b.url(&format!("/permission/{rid}/reply")),
        Some(json!({"reply": "once"})),
    )
    .await;
    assert_eq!((status, body), (200, json!(true)));
    // B no longer lists it: a second answer on B is a 404.
    let (status, err) = send(
        &c,
        "POST",
        &b.url(&format!("/permission/{rid}/reply")),
        Some(json!({"reply": "reject"})),
    )
    .await;
    assert_eq!(
        (status, err["error"]["code"].clone()),
        (404, json!("not_found"))
    );

    let mut seen_b = before_ask;
    seen_b.extend(until(&mut on_b, is_idle).await);
    let seen_a = until(&mut on_a, is_idle).await;

    // B's client saw what A's saw, in the same order.
    let (outline_a, outline_b) = (outline(&seen_a), outline(&seen_b));
    assert_eq!(outline_b, outline_a);
    let wanted: Vec<String> = [
        "status busy",
        "tool c1 pending",
        "tool c1 running",
        "asked read",
        "replied once",
        "tool c1 completed",
        "status idle",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(changes(&outline_b), wanted, "{outline_b:#?}");
    // The answer was applied on A once: answering there again is a 404 too.
    let (status, _) = send(
        &c,
        "POST",
        &a.url(&format!("/permission/{rid}/reply")),
        Some(json!({"reply": "once"})),
    )
    .await;
    assert_eq!(status, 404);
    let (_, msgs) = send(&c, "GET", &a.url(&format!("/session/{id}/message")), None).await;
    let last = msgs.as_array().unwrap().last().unwrap().clone();
    let text: String = last["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "read it");
    assert_eq!(env.requests().len(), 2);
    // Every event B sent carried its relay number, in increasing order.
    let numbers: Vec<i64> = seen_b
        .iter()
        .filter(|e| e["type"] != "server.connected")
        .map(|e| e["sse_id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] <= w[1]), "{numbers:?}");

    // A client that reconnects to B (or to A) with the ask's number as its
    // Last-Event-ID gets what followed it, from the outbox, none twice.
    let ask_number = seen_b
        .iter()
        .find(|e| e["type"] == "permission.asked")
        .unwrap()["sse_id"]
        .as_str()
        .unwrap()
        .to_string();
    let after_ask: Vec<String> = outline(&seen_b)
        .into_iter()
        .skip_while(|s| s != "asked read")
        .skip(1)
        .collect();
    for host in [&b, &a] {
        let mut resumed =
            subscribe_from(host.url(&format!("/event?session={id}")), Some(&ask_number)).await;
        let again = until(&mut resumed, is_idle).await;
        assert_eq!(again[0]["type"], "server.connected");
        assert_eq!(outline(&again), after_ask, "{}", host.base);
    }

    // B's global stream carried the same session's events too.
    let global: Vec<Value> = until(&mut b_all, |e| {
        let e = payload(e);
        is_idle(&e) && e["sessionID"] == id.as_str()
    })
    .await
    .iter()
    .map(payload)
    .collect();
    assert_eq!(
        changes(&outline(&global)),
        wanted,
        "{:#?}",
        outline(&global)
    );
}

/// Whether `seen` is `all` with some items left out, in `all`'s order.
fn in_order_within(seen: &[String], all: &[String]) -> bool {
    let mut rest = all.iter();
    seen.iter().all(|s| rest.any(|a| a == s))
}

/// Three hosts on one database share 300 sessions; mid-run one is killed
/// (SIGKILL) and one paused (SIGSTOP) past its leases. The third finishes
/// every session from the ledger alone: each once (one answer, one user
/// message), each tool's side effect at most once (exactly once where the
/// call completed), counted by the mark files the `tally` tool leaves. When
/// the paused host resumes, nothing it still tries to write lands. A client
/// of the surviving host saw every session through to its answer, each
/// session's tool states in the ledger's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_finish_300_sessions_once_each_through_a_kill_and_a_pause() {
    use futures::StreamExt as _;
    use std::collections::HashMap;
    use warden_protocol::{FinishReason, MessageInfo, SessionId, ToolState};
    const SESSIONS: usize = 300;

    let db = warden_pg_harness::database();
    let env = Env::new();
    let marks = env.project().join("marks");
    std::fs::create_dir(&marks).unwrap();
    env.config(json!({"plugins": [Env::fixtures_plugin(
        json!({"timeout_ms": 60000, "dirs": [{"path": ".", "mode": "rw"}]})
    )]}));
    let tally = |id: &str| json!({"tool_calls": [{"id": id, "name": "tally", "arguments": {"dir": marks.display().to_string(), "ms": 300}}]});
    // A spare answer, for a session whose answer was cut off mid-stream.
    env.cassette(json!([tally("first"), tally("second"), {"text": "done"}, {"text": "done"}]));
    let vars = [
        ("WARDEN_LEDGER", db.as_str()),
        ("WARDEN_LEASE_TTL_MS", "3000"),
    ];
    let mut a = Server::start(&env, &[], &vars);
    let b = Server::start(&env, &[], &vars);
    let c = Server::start(&env, &[], &vars);
    let hosts = [&a, &b, &c];
    let http = client();

    // The client of C, the host left alone, watches every session.
    let mut on_c = subscribe_from(c.url("/global/event"), None).await;
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let (status, body) = send(
            &http,
            "POST",
            &hosts[i % 3].url("/session"),
            Some(json!({"directory": env.project().display().to_string()})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    // C's relay is listening once the last session made on A shows there.
    let last_on_a = ids[SESSIONS - 3].clone();
    let mut seen: Vec<Value> = until(&mut on_c, |e| {
        let e = payload(e);
        e["type"] == "session.created" && e["info"]["id"] == last_on_a.as_str()
    })
    .await;
    let accepted: Vec<u16> = futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let (http, url) = (
                http.clone(),
                hosts[i % 3].url(&format!("/session/{id}/prompt_async")),
            );
            let model = model(&env);
            async move {
                send(
                    &http,
                    "POST",
                    &url,
                    Some(json!({"parts": [{"type": "text", "text": "go"}], "model": model})),
                )
                .await
                .0
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(accepted.iter().all(|s| *s == 204), "{accepted:?}");

    // Mid-run: a quarter of the 600 side effects done.
    let count_marks = || std::fs::read_dir(&marks).unwrap().count();
    let deadline = Instant::now() + Duration::from_secs(120);
    while count_marks() < SESSIONS / 2 {
        assert!(Instant::now() < deadline, "the hosts made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    crate::lease_fence::signal(b.pid(), "-STOP");
    let at_kill = count_marks();
    assert!(
        at_kill < 2 * SESSIONS,
        "the kill came mid-run ({at_kill} marks)"
    );

    // C finishes every session from the ledger.
    let ledger = warden_core::Ledger::new(
        warden_core::ledger::location::open_store(&db)
            .await
            .unwrap(),
        warden_core::Bus::new(),
    );
    let sessions: Vec<SessionId> = ids.iter().map(|i| SessionId(i.clone())).collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut pending = sessions.clone();
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} sessions never finished, e.g. {:#?}",
            pending.len(),
            ledger.messages(&pending[0]).await.unwrap()
        );
        let mut still = Vec::new();
        for s in pending {
            let done = ledger.open_prompts(&s).await.unwrap().is_empty()
                && ledger.messages(&s).await.unwrap().last().is_some_and(|m| {
                    // (A kill between a step's finish and its completion
                    // leaves the answer whole, marked interrupted.)
                    matches!(&m.info, MessageInfo::Assistant(i) if i.finish == Some(FinishReason::Stop))
                        && m.text() == "done"
                });
            if !done {
                still.push(s);
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The paused host resumes: whatever it still tries to write is fenced.
    let mut before = Vec::new();
    for s in &sessions {
        before.push((
            ledger.messages(s).await.unwrap(),
            ledger.part_events(s).await.unwrap(),
            ledger.audit_trail(s).await.unwrap(),
        ));
    }
    crate::lease_fence::signal(b.pid(), "-CONT");
    tokio::time::sleep(Duration::from_secs(4)).await;
    for (s, before) in sessions.iter().zip(&before) {
        let after = (
            ledger.messages(s).await.unwrap(),
            ledger.part_events(s).await.unwrap(),
            ledger.audit_trail(s).await.unwrap(),
        );
        assert!(
            after == *before,
            "session {s} changed after the paused host resumed"
        );
    }

    // Each session answered once; each side effect at most once, exactly
    // once where its call completed.
    let mut files: HashMap<String, usize> = HashMap::new();
    for f in std::fs::read_dir(&marks).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        let (call, n) = name.rsplit_once('.').unwrap();
        assert_eq!(n, "1", "{call} ran more than once");
        *files.entry(call.to_string()).or_default() += 1;
    }
    let (mut completed, mut interrupted) = (0, 0);
    for (s, (messages, _, _)) in sessions.iter().zip(&before) {
        let users: Vec<_> = messages
            .iter()
            .filter(|m| m.info.role() == "user")
            .collect();
        assert_eq!(users.len(), 1, "{s}: one prompt, written once");
        let answers = messages
            .iter()
            .filter(|m| {
                matches!(&m.info, MessageInfo::Assistant(i) if i.finish.is_some())
                    && m.text() == "done"
            })
            .count();
        assert_eq!(answers, 1, "{s}: answered once: {messages:#?}");
        for part in messages.iter().flat_map(|m| &m.parts) {
            let (Some(call), Some(state)) = (part.call_id(), part.tool_state()) else {
                continue;
            };
            let ran = files.remove(&format!("{s}.{call}")).unwrap_or(0);
            match state {
                ToolState::Completed { .. } => {
                    completed += 1;
                    assert_eq!(
                        ran, 1,
                        "{s} {call} completed: its side effect happened once"
                    );
                }
                ToolState::Error {
                    interrupted: true, ..
                } => {
                    interrupted += 1;
                    assert!(ran <= 1);
                }
                other => panic!("{s} {call} ended as {other:?}"),
            }
        }
    }
    assert!(
        files.is_empty(),
        "side effects of calls the ledger does not have: {files:?}"
    );
    assert!(completed > 0 && completed + interrupted >= 2 * SESSIONS);

    // C's client saw each session to its answer, its tool states in the
    // ledger's order (a killed host's last notices may never have left it).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut by_session: HashMap<String, Vec<Value>> = HashMap::new();
    let absorb = |seen: Vec<Value>, by_session: &mut HashMap<String, Vec<Value>>| {
        for e in seen {
            let e = payload(&e);
            let s = e["sessionID"]
                .as_str()
                .or(e["part"]["sessionID"].as_str())
                .or(e["info"]["sessionID"].as_str())
                .unwrap_or_default()
                .to_string();
            by_session.entry(s).or_default().push(e);
        }
    };
    absorb(std::mem::take(&mut seen), &mut by_session);
    let answered = |evs: &[Value]| {
        evs.iter().any(|e| {
            e["type"] == "message.part.updated"
                && e["part"]["type"] == "text"
                && e["part"]["text"] == "done"
        })
    };
    while !ids
        .iter()
        .all(|id| by_session.get(id).is_some_and(|e| answered(e)))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "C's client never saw some sessions answered"
        );
        if let Ok(Some(e)) = tokio::time::timeout(left, on_c.recv()).await {
            absorb(vec![e], &mut by_session);
        }
    }
    for (s, (_, timeline, _)) in sessions.iter().zip(&before) {
        let recorded: Vec<String> = changes(
            &timeline
                .iter()
                .filter_map(|e| {
                    Some(format!(
                        "tool {} {}",
                        e.part.call_id()?,
                        e.part.tool_state()?.status()
                    ))
                })
                .collect::<Vec<_>>(),
        );
        // A host taking a session over shows its state again: each state
        // counts where it was first seen.
        let mut seen: Vec<String> = Vec::new();
        for l in outline(&by_session[s.as_str()]) {
            if l.starts_with("tool ") && !seen.contains(&l) {
                seen.push(l);
            }
        }
        assert!(
            in_order_within(&seen, &recorded) && recorded.last().is_some_and(|l| seen.contains(l)),
            "{s}: C's client saw {seen:?}; the ledger has {recorded:?}"
        );
    }
    eprintln!(
        "failover: {SESSIONS} sessions, {at_kill} side effects before the kill, {completed} calls completed, {interrupted} interrupted by the kill or the pause"
    );
}
