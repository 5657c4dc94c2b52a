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
