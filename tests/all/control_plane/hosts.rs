//! Several hosts on one ledger (here one SQLite file): each serves and runs
//! only what its own operator allows. A host does not show, stream or act
//! on sessions outside its `--dir`, and a prompt another host queued is
//! judged by the host that runs it.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;
use crate::server::{Server, client, is_idle, send, subscribe, until};

/// A cassette of its own at `path`, recording its requests beside it.
fn cassette(path: &Path, turns: Value) -> Value {
    let record = path.with_extension("requests.jsonl");
    std::fs::write(
        path,
        json!({"turns": turns, "record": record.display().to_string()}).to_string(),
    )
    .unwrap();
    json!({"providerID": "scripted", "modelID": path.display().to_string()})
}

fn dir(env: &Env, name: &str) -> PathBuf {
    let d = env.project().join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn create(s: &Server, dir: &Path) -> String {
    let (status, body) = send(
        &client(),
        "POST",
        &s.url("/session"),
        Some(json!({"directory": dir.display().to_string()})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_neither_shows_nor_acts_on_a_session_outside_its_directory() {
    let env = Env::new();
    let (a_dir, b_dir) = (dir(&env, "a"), dir(&env, "b"));
    let a = Server::start(&env, &["--dir", &a_dir.display().to_string()], &[]);
    let b = Server::start(&env, &["--dir", &b_dir.display().to_string()], &[]);
    let c = client();
    let mut b_events = subscribe(b.url("/event")).await;
    let first = until(&mut b_events, |_| true).await;
    assert_eq!(first[0]["type"], "server.connected");

    let of_a = create(&a, &a_dir).await;
    let model_a = cassette(&env.root.path().join("a.json"), json!([{"text": "from A"}]));
    let model_b = cassette(&env.root.path().join("b.json"), json!([{"text": "from B"}]));
    let prompt = |model: &Value| json!({"parts": [{"type": "text", "text": "hi"}], "model": model});
    let (status, answer) = send(
        &c,
        "POST",
        &a.url(&format!("/session/{of_a}/message")),
        Some(prompt(&model_a)),
    )
    .await;
    assert_eq!(
        (status, answer["parts"][1]["text"].clone()),
        (200, json!("from A"))
    );

    // B does not know it: not listed, not readable, not promptable.
    for (method, path, body) in [
        ("GET", format!("/session/{of_a}"), None),
        ("GET", format!("/session/{of_a}/message"), None),
        (
            "POST",
            format!("/session/{of_a}/message"),
            Some(prompt(&model_b)),
        ),
        ("POST", format!("/session/{of_a}/abort"), None),
        ("DELETE", format!("/session/{of_a}"), None),
    ] {
        let (status, body) = send(&c, method, &b.url(&path), body).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert!(
            !body.to_string().contains(&a_dir.display().to_string()),
            "{body}"
        );
    }
    let (_, listed) = send(&c, "GET", &b.url("/session"), None).await;
    assert_eq!(listed, json!([]));
    // Nor may a client of B make a session in A's directory.
    let (status, body) = send(
        &c,
        "POST",
        &b.url("/session"),
        Some(json!({"directory": a_dir.display().to_string()})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the server's directory")
    );

    // Nor read what is there through a route that takes a directory.
    std::fs::create_dir_all(a_dir.join(".git")).unwrap();
    std::fs::write(a_dir.join(".git/HEAD"), "ref: refs/heads/a-secret\n").unwrap();
    let at_a = format!("directory={}", a_dir.display());
    let (_, vcs) = send(&c, "GET", &b.url(&format!("/vcs?{at_a}")), None).await;
    assert_eq!(vcs["branch"], Value::Null, "{vcs}");
    let (_, vcs) = send(&c, "GET", &a.url(&format!("/vcs?{at_a}")), None).await;
    assert_eq!(vcs["branch"], "a-secret", "{vcs}");
    let (_, path) = send(&c, "GET", &b.url(&format!("/path?{at_a}")), None).await;
    assert_eq!(path["directory"], b_dir.display().to_string(), "{path}");

    // B's own session works, and B's stream carried nothing of A's.
    let of_b = create(&b, &b_dir).await;
    let (status, _) = send(
        &c,
        "POST",
        &b.url(&format!("/session/{of_b}/message")),
        Some(prompt(&model_b)),
    )
    .await;
    assert_eq!(status, 200);
    let seen = until(&mut b_events, |e| {
        is_idle(e) && e["sessionID"] == of_b.as_str()
    })
    .await;
    assert!(seen.iter().any(|e| e.to_string().contains(&of_b)));
    for e in &seen {
        assert!(!e.to_string().contains(&of_a), "B streamed A's event {e}");
    }
    // The ledger holds both; only A ran A's.
    let (_, a_messages) = send(&c, "GET", &a.url(&format!("/session/{of_a}/message")), None).await;
    assert_eq!(a_messages.as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_another_host_queued_is_refused_by_the_host_whose_policy_forbids_its_model() {
    let env = Env::new();
    env.file("a.txt", "alpha\n");
    // A's run waits on a question until the test answers it: A holds the
    // session's lease for exactly as long as the test needs.
    env.config(json!({"permission": {"read": "ask"}}));
    let root = env.root.path();
    // A's operator runs one cassette of its own; no client's.
    let own_path = root.join("own.json");
    let own = cassette(
        &own_path,
        json!([
            {"tool_calls": [{"id": "c1", "name": "read", "arguments": {"filePath": "a.txt"}}]},
            {"text": "A's own answer"}
        ]),
    );
    let a = Server::launch(
        &env,
        &["--model", &format!("scripted:{}", own_path.display())],
        &[],
    );
    // B lets its clients use any cassette.
    let b = Server::start(&env, &[], &[]);
    let c = client();
    let theirs_path = root.join("theirs.json");
    let theirs = cassette(&theirs_path, json!([{"text": "B's cassette ran"}]));

    // A refuses B's cassette from its own clients.
    let session = create(&a, &env.project()).await;
    let (status, body) = send(
        &c,
        "POST",
        &a.url(&format!("/session/{session}/message")),
        Some(json!({"parts": [{"type": "text", "text": "x"}], "model": theirs})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("--allow-scripted"), "{body}");

    let mut a_events = subscribe(a.url(&format!("/event?session={session}"))).await;
    let (status, _) = send(
        &c,
        "POST",
        &a.url(&format!("/session/{session}/prompt_async")),
        Some(json!({"parts": [{"type": "text", "text": "read a.txt"}], "model": own})),
    )
    .await;
    assert_eq!(status, 204);
    let seen = until(&mut a_events, |e| e["type"] == "permission.asked").await;
    let ask = seen.last().unwrap()["id"].as_str().unwrap().to_string();

    // A client of B prompts the same session: queued behind A's run.
    let from_b = {
        let (c, url) = (c.clone(), b.url(&format!("/session/{session}/message")));
        let theirs = theirs.clone();
        tokio::spawn(async move {
            send(
                &c,
                "POST",
                &url,
                Some(json!({"parts": [{"type": "text", "text": "from B"}], "model": theirs})),
            )
            .await
        })
    };
    let ledger = env.ledger();
    let id = warden_protocol::SessionId(session.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ledger.open_prompts(&id).await.unwrap().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "B's prompt was never queued"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A goes on, then takes B's prompt, and does not run a model its
    // operator never allowed.
    let (status, _) = send(
        &c,
        "POST",
        &a.url(&format!("/permission/{ask}/reply")),
        Some(json!({"reply": "once"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = from_b.await.unwrap();
    assert_ne!(status, 200, "{body}");
    assert!(
        body.to_string()
            .contains("scripted models (cassettes) are off for this host's clients"),
        "{status} {body}"
    );
    assert!(
        !theirs_path.with_extension("requests.jsonl").exists(),
        "B's cassette was run"
    );
    until(&mut a_events, is_idle).await;
    assert!(ledger.open_prompts(&id).await.unwrap().is_empty());
    // A's own turn is whole; B's prompt got no answer.
    let (_, messages) = send(
        &c,
        "GET",
        &a.url(&format!("/session/{session}/message")),
        None,
    )
    .await;
    let answers: Vec<String> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["info"]["role"] == "assistant")
        .map(|m| m["parts"].to_string())
        .collect();
    assert_eq!(answers.len(), 2, "{messages}");
    assert!(answers[1].contains("A's own answer"), "{messages}");
    assert!(!messages.to_string().contains("B's cassette ran"));
}
