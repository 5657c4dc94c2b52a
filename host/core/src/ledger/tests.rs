//! The ledger's behaviour through its SQLite store: what a round reads
//! back, the held copy, leases and fencing, carrying old files over.

use super::*;
use rusqlite::Connection;
use serde_json::json;
use sqlite::checkpoint::Checkpointer;
use sqlite::schema;
use warden_protocol::{MessageError, MessageTime, ModelRef, ToolState, UserInfo};

fn ledger() -> Ledger {
    Ledger::in_memory(Bus::new()).unwrap()
}

fn user_message(session: &SessionId) -> MessageInfo {
    MessageInfo::User(UserInfo {
        id: MessageId(id::ascending("msg")),
        session_id: session.clone(),
        time: MessageTime::at(1),
        agent: "build".into(),
        model: ModelRef {
            provider: "scripted".into(),
            model: "x".into(),
        },
    })
}

fn text_part(message: &MessageInfo, text: String) -> Part {
    Part {
        id: id::ascending("prt").into(),
        session_id: message.session_id().clone(),
        message_id: message.id().clone(),
        body: PartBody::Text {
            text,
            synthetic: false,
            time: None,
            ignored: false,
        },
    }
}

#[tokio::test]
async fn messages_come_back_with_their_parts_in_id_order() {
    let l = ledger();
    let s = l.create_session("/w", "t").await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let info = user_message(&s.id);
        l.put_message(&info).await.unwrap();
        for n in 0..2 {
            let part = text_part(&info, format!("{n}"));
            l.put_part(&part, PartWrite::Changed).await.unwrap();
        }
        ids.push(info.id().clone());
    }
    let msgs = l.messages(&s.id).await.unwrap();
    assert_eq!(
        msgs.iter().map(|m| m.info.id().clone()).collect::<Vec<_>>(),
        ids
    );
    for m in &msgs {
        assert_eq!(m.parts.len(), 2);
        assert!(m.parts[0].id < m.parts[1].id);
    }
}

#[tokio::test]
async fn only_changes_enter_the_timeline() {
    let l = ledger();
    let s = l.create_session("/w", "t").await.unwrap();
    let info = user_message(&s.id);
    l.put_message(&info).await.unwrap();
    let mut part = Part {
        id: id::ascending("prt").into(),
        session_id: s.id.clone(),
        message_id: info.id().clone(),
        body: PartBody::Tool {
            call_id: "c1".into(),
            tool: "read".into(),
            state: ToolState::pending(),
            provider_executed: false,
            ignored: false,
        },
    };
    l.put_part(&part, PartWrite::Changed).await.unwrap();
    l.put_part(&part, PartWrite::Delta("{")).await.unwrap();
    if let PartBody::Tool { state, .. } = &mut part.body {
        *state = state.start(serde_json::json!({}), 5).unwrap();
    }
    l.put_part(&part, PartWrite::Changed).await.unwrap();
    let events = l.part_events(&s.id).await.unwrap();
    let statuses: Vec<_> = events
        .iter()
        .map(|e| e.part.tool_state().unwrap().status())
        .collect();
    assert_eq!(statuses, ["pending", "running"]);
}

#[tokio::test]
async fn a_lease_is_exclusive_until_it_expires_or_its_holder_dies() {
    let l = ledger();
    let s = l.create_session("/w", "t").await.unwrap();
    let a = l
        .acquire_lease(&s.id, "a", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap();
    let held = l
        .acquire_lease(&s.id, "b", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(held.holder, "a");
    let b = l
        .acquire_lease(&s.id, "b", 60_000, |h| h == "a")
        .await
        .unwrap()
        .unwrap();
    assert!(b.epoch > a.epoch, "a new holder, a new epoch");
    assert!(!l.renew_lease(&s.id, &a, 60_000).await.unwrap());
    assert!(l.renew_lease(&s.id, &b, 60_000).await.unwrap());
    l.release_lease(&s.id, &b).await.unwrap();
    let a2 = l
        .acquire_lease(&s.id, "a", -1, |_| false)
        .await
        .unwrap()
        .unwrap();
    assert!(a2.epoch > b.epoch, "epochs only grow, also after a release");
    assert!(
        l.acquire_lease(&s.id, "b", 60_000, |_| false)
            .await
            .unwrap()
            .is_ok(),
        "expired lease is taken over"
    );
}

/// Two processes on one file: the first holds the lease, the second takes
/// it over; every write of the first is refused from then on, in the
/// write's own transaction, and the second's go through.
#[tokio::test]
async fn a_holder_whose_lease_was_taken_over_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let (a, b) = (
        Ledger::open(&path, Bus::new()).unwrap(),
        Ledger::open(&path, Bus::new()).unwrap(),
    );
    let s = a.create_session("/w", "t").await.unwrap();
    a.acquire_lease(&s.id, "a", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap();
    let first = user_message(&s.id);
    a.put_message(&first).await.unwrap();
    a.check_fence(&s.id).await.unwrap();
    // B takes over (A was declared dead, or its lease ran out).
    b.acquire_lease(&s.id, "b", 60_000, |h| h == "a")
        .await
        .unwrap()
        .unwrap();
    let before = b.read_messages(&s.id).await.unwrap();
    let fenced = |r: Result<()>| match r {
        Err(CoreError::Ledger(LedgerError::Fenced { session })) => assert_eq!(session, s.id),
        other => panic!("expected a fenced write, got {other:?}"),
    };
    fenced(a.check_fence(&s.id).await);
    fenced(a.put_message(&user_message(&s.id)).await);
    fenced(
        a.put_part(&text_part(&first, "late".into()), PartWrite::Changed)
            .await,
    );
    fenced(a.touch_session(&s.id).await);
    fenced(
        a.audit(&AuditEntry {
            seq: 0,
            session_id: s.id.clone(),
            message_id: None,
            call_id: None,
            at: 1,
            stage: "tool".into(),
            subject: "read".into(),
            plugin_hash: None,
            decision: "allowed".into(),
            rule: None,
            duration_us: None,
            outcome: None,
        })
        .await,
    );
    fenced(a.set_session_permission(&s.id, &[]).await.map(|_| ()));
    assert_eq!(b.read_messages(&s.id).await.unwrap(), before);
    assert!(b.audit_trail(&s.id).await.unwrap().is_empty());
    // A's reads come from the rows now, not from its stale copy.
    assert_eq!(a.messages(&s.id).await.unwrap(), before);
    // The new holder writes as usual.
    b.put_part(&text_part(&first, "mine".into()), PartWrite::Changed)
        .await
        .unwrap();
    assert_eq!(b.read_messages(&s.id).await.unwrap()[0].parts.len(), 1);
}

#[tokio::test]
async fn the_copy_kept_while_holding_a_lease_equals_the_rows() {
    let l = ledger();
    let s = l.create_session("/w", "t").await.unwrap();
    let user = |n: u32| {
        MessageInfo::User(UserInfo {
            id: MessageId(id::ascending("msg")),
            session_id: s.id.clone(),
            time: MessageTime::at(n as i64),
            agent: "build".into(),
            model: ModelRef {
                provider: "scripted".into(),
                model: "x".into(),
            },
        })
    };
    // One message before the lease, more while it is held.
    let first = user(0);
    l.put_message(&first).await.unwrap();
    let me = l
        .acquire_lease(&s.id, "me", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap();
    let mut tool = Part {
        id: id::ascending("prt").into(),
        session_id: s.id.clone(),
        message_id: first.id().clone(),
        body: PartBody::Tool {
            call_id: "c".into(),
            tool: "read".into(),
            state: ToolState::pending(),
            provider_executed: false,
            ignored: false,
        },
    };
    l.put_part(&tool, PartWrite::Changed).await.unwrap();
    if let PartBody::Tool { state, .. } = &mut tool.body {
        *state = state.start(serde_json::json!({"a": 1}), 2).unwrap();
    }
    l.put_part(&tool, PartWrite::Changed).await.unwrap();
    for n in 1..4 {
        let m = user(n);
        l.put_message(&m).await.unwrap();
        let p = Part {
            id: id::ascending("prt").into(),
            session_id: s.id.clone(),
            message_id: m.id().clone(),
            body: PartBody::StepStart {},
        };
        l.put_part(&p, PartWrite::Changed).await.unwrap();
    }
    let held = l.messages(&s.id).await.unwrap();
    assert_eq!(held, l.read_messages(&s.id).await.unwrap());
    let shared: Vec<MessageWithParts> = l
        .history(&s.id)
        .await
        .unwrap()
        .iter()
        .map(|m| (**m).clone())
        .collect();
    assert_eq!(shared, held);
    assert_eq!(held.len(), 4);
    assert_eq!(held[0].parts[0].tool_state().unwrap().status(), "running");
    l.release_lease(&s.id, &me).await.unwrap();
    assert!(l.held().is_empty());
    assert_eq!(l.messages(&s.id).await.unwrap(), held);
}

/// A reader of a held session is given only what changed since it last
/// looked: the messages before the first one written are the very `Arc`s it
/// had. A copy loaded again (the lease given back and taken), or a reader
/// further behind than the remembered changes, is given the history whole.
#[tokio::test]
async fn a_refreshed_history_copies_only_what_changed_since() {
    let l = ledger();
    let s = l.create_session("/w", "t").await.unwrap();
    let me = l
        .acquire_lease(&s.id, "me", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap();
    let mut infos = Vec::new();
    for _ in 0..5 {
        let info = user_message(&s.id);
        l.put_message(&info).await.unwrap();
        infos.push(info);
    }
    let mut h = History::default();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!((h.messages.len(), h.changed_from), (5, 0));
    let before = h.messages.clone();
    let same =
        |h: &History, upto: usize| (0..upto).all(|i| Arc::ptr_eq(&h.messages[i], &before[i]));

    // Nothing written: nothing changed.
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!(h.changed_from, 5);
    assert!(same(&h, 5));

    // A part of the fourth message and a new message: from the fourth on.
    l.put_part(&text_part(&infos[3], "x".into()), PartWrite::Changed)
        .await
        .unwrap();
    l.put_message(&user_message(&s.id)).await.unwrap();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!((h.messages.len(), h.changed_from), (6, 3));
    assert!(same(&h, 3));
    assert_eq!(h.messages[3].parts.len(), 1);
    let rows: Vec<MessageWithParts> = l.read_messages(&s.id).await.unwrap();
    let held: Vec<MessageWithParts> = h.messages.iter().map(|m| (**m).clone()).collect();
    assert_eq!(held, rows);

    // An older message changed after newer ones: from it on.
    l.put_part(&text_part(&infos[1], "y".into()), PartWrite::Changed)
        .await
        .unwrap();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!(h.changed_from, 1);
    assert!(same(&h, 1));

    // Further behind than the changes remembered: whole.
    let mut behind = History::default();
    l.refresh(&s.id, &mut behind).await.unwrap();
    for n in 0..=TOUCHED {
        l.put_part(&text_part(&infos[4], format!("{n}")), PartWrite::Changed)
            .await
            .unwrap();
    }
    l.refresh(&s.id, &mut behind).await.unwrap();
    assert_eq!(behind.changed_from, 0);
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!(h.changed_from, 0);
    assert_eq!(h.messages[4].parts.len(), TOUCHED + 1);

    // The lease given back: read from the rows, whole; taken again: a new
    // copy, whole once, then by changes again.
    l.release_lease(&s.id, &me).await.unwrap();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!((h.messages.len(), h.changed_from), (6, 0));
    l.acquire_lease(&s.id, "me", 60_000, |_| false)
        .await
        .unwrap()
        .unwrap();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!(h.changed_from, 0);
    l.put_message(&user_message(&s.id)).await.unwrap();
    l.refresh(&s.id, &mut h).await.unwrap();
    assert_eq!((h.messages.len(), h.changed_from), (7, 6));
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    drop(Ledger::open(&path, Bus::new()).unwrap());
    let c = Connection::open(&path).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    match Ledger::open(&path, Bus::new()) {
        Err(CoreError::Ledger(LedgerError::TooNew { found: 99, .. })) => {}
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("opened a newer ledger"),
    }
}

#[tokio::test]
async fn the_log_reaches_the_database_file_without_a_writer_paying_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let l = Ledger::open(&path, Bus::new()).unwrap();
    let s = l.create_session("/w", "t").await.unwrap();
    // What the first checkpoint found (the schema) is in the file by now.
    std::thread::sleep(Checkpointer::EVERY * 3);
    let before = std::fs::metadata(&path).unwrap().len();
    let info = user_message(&s.id);
    l.put_message(&info).await.unwrap();
    for n in 0..200 {
        let part = text_part(&info, format!("{n} {}", "x".repeat(500)));
        l.put_part(&part, PartWrite::Changed).await.unwrap();
    }
    // SQLite alone would leave 100 KB in the log (its own threshold is
    // 40 MB); the checkpoint thread copies it into the file.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::metadata(&path).unwrap().len() < before + 100_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {} bytes",
            std::fs::metadata(&path).unwrap().len()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Dropping the last clone stops the thread (the test would hang otherwise).
    let clone = l.clone();
    drop(l);
    drop(clone);
    assert_eq!(
        Ledger::open(&path, Bus::new())
            .unwrap()
            .messages(&s.id)
            .await
            .unwrap()[0]
            .parts
            .len(),
        200
    );
}

#[tokio::test]
async fn message_headers_written_before_opencode_s_shapes_are_carried_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(schema::MIGRATIONS[0]).unwrap();
    c.pragma_update(None, "user_version", 1).unwrap();
    let (sid, user, answer) = (
        id::ascending("ses"),
        id::ascending("msg"),
        id::ascending("msg"),
    );
    c.execute(
        "INSERT INTO session (id, title, directory, created_at, updated_at) VALUES (?1, 't', '/w', 1, 1)",
        [&sid],
    )
    .unwrap();
    let old_user = json!({"role": "user", "id": user, "session_id": sid, "created": 5,
        "agent": "build", "model": {"provider": "scripted", "model": "x"}});
    let old_answer = json!({"role": "assistant", "id": answer, "session_id": sid,
        "parent_id": user, "agent": "build", "model": {"provider": "openai", "model": "gpt"},
        "created": 6, "completed": 9, "finish": "stop", "cost": 0.5,
        "error": {"name": "Provider", "message": "503 from the provider", "status": 503}});
    for (id, role, info) in [
        (&user, "user", &old_user),
        (&answer, "assistant", &old_answer),
    ] {
        c.execute(
            "INSERT INTO message (session_id, id, role, info, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 1, 1)",
            rusqlite::params![sid, id, role, info.to_string()],
        )
        .unwrap();
    }
    drop(c);

    let l = Ledger::open(&path, Bus::new()).unwrap();
    let messages = l.messages(&SessionId(sid.clone())).await.unwrap();
    let infos: Vec<_> = messages.iter().map(|m| m.info.clone()).collect();
    let MessageInfo::User(u) = &infos[0] else {
        panic!("{infos:?}")
    };
    assert_eq!(
        (u.time, u.model.provider.as_str()),
        (MessageTime::at(5), "scripted")
    );
    let MessageInfo::Assistant(a) = &infos[1] else {
        panic!("{infos:?}")
    };
    assert_eq!(a.parent_id.0, user);
    assert_eq!((a.mode.as_str(), a.model.model.as_str()), ("build", "gpt"));
    assert_eq!((a.time.created, a.time.completed), (6, Some(9)));
    assert_eq!((a.path.cwd.as_str(), a.path.root.as_str()), ("/w", "/w"));
    assert_eq!(
        a.error,
        Some(MessageError::Provider {
            message: "503 from the provider".into(),
            status: Some(503)
        })
    );
    assert_eq!(a.cost, 0.5);
}

#[test]
fn a_ledger_from_before_the_schema_was_fixed_is_refused_with_a_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL,
                               info TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
         PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(c);
    match Ledger::open(&path, Bus::new()) {
        Err(e @ CoreError::Ledger(LedgerError::PreRelease { .. })) => {
            assert!(e.to_string().contains("move it away"), "{e}")
        }
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("opened a ledger it cannot write"),
    }
}

#[tokio::test]
async fn a_ledger_of_schema_1_is_carried_over_and_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(schema::MIGRATIONS[0]).unwrap();
    c.execute_batch(
        r#"
        INSERT INTO session VALUES ('ses_1', 't', '/w', '[]', 1, 2);
        INSERT INTO message VALUES ('ses_1', 'msg_1', 'user',
            '{"role":"user","id":"msg_1","session_id":"ses_1","created":1,"agent":"build","model":{"provider":"scripted","model":"x"}}', 1, 1);
        INSERT INTO part VALUES ('ses_1', 'msg_1', 'prt_1', 'tool', 'c1', 'completed',
            '{"type":"tool","call_id":"c1","tool":"read","state":{"status":"completed","input":{"a":1},"output":"out","title":"","metadata":{},"time":{"start":3,"end":4}}}', 4);
        INSERT INTO part_event VALUES ('ses_1', 1, 'msg_1', 'prt_1', 'tool', 'c1', 'running', 3,
            '{"type":"tool","call_id":"c1","tool":"read","state":{"status":"running","input":{"a":1},"time":{"start":3}}}');
        INSERT INTO audit VALUES ('ses_1', 1, 'msg_1', 'c1', 3, 'tool', 'plugin:read', 'abc', 'allowed', NULL, 12, 'ok');
        PRAGMA user_version = 1;
        "#,
    )
    .unwrap();
    drop(c);
    let l = Ledger::open(&path, Bus::new()).unwrap();
    let s = SessionId("ses_1".into());
    assert_eq!(l.session(&s).await.unwrap().title, "t");
    let msgs = l.messages(&s).await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].info, user_message_with(&s, "msg_1", 1));
    match msgs[0].parts[0].tool_state().unwrap() {
        ToolState::Completed { input, output, .. } => {
            assert_eq!(
                (input, output.as_str()),
                (&serde_json::json!({"a": 1}), "out")
            )
        }
        other => panic!("{other:?}"),
    }
    let events = l.part_events(&s).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].part.tool_state().unwrap(),
        &ToolState::pending()
            .start(serde_json::json!({"a": 1}), 3)
            .unwrap()
    );
    let audit = l.audit_trail(&s).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (
            audit[0].stage.as_str(),
            audit[0].plugin_hash.as_deref(),
            audit[0].duration_us,
            audit[0].rule.as_deref()
        ),
        ("tool", Some("abc"), Some(12), None)
    );
    // And it takes new writes in the new form.
    let info = user_message(&s);
    l.put_message(&info).await.unwrap();
    l.put_part(&text_part(&info, "hi".into()), PartWrite::Changed)
        .await
        .unwrap();
    assert_eq!(l.messages(&s).await.unwrap().len(), 2);
}

fn user_message_with(session: &SessionId, id: &str, created: i64) -> MessageInfo {
    MessageInfo::User(UserInfo {
        id: MessageId(id.into()),
        session_id: session.clone(),
        time: MessageTime::at(created),
        agent: "build".into(),
        model: ModelRef {
            provider: "scripted".into(),
            model: "x".into(),
        },
    })
}

#[tokio::test]
async fn a_call_is_one_audit_row_and_reads_back_entry_by_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let l = Ledger::open(&path, Bus::new()).unwrap();
    let s = l.create_session("/w", "t").await.unwrap();
    let info = user_message(&s.id);
    l.put_message(&info).await.unwrap();
    let entry = |stage: &str, hash: Option<&str>, at: i64| AuditEntry {
        seq: 0,
        session_id: s.id.clone(),
        message_id: Some(info.id().clone()),
        call_id: Some("c1".into()),
        at,
        stage: stage.into(),
        subject: "read".into(),
        plugin_hash: hash.map(str::to_string),
        decision: "allowed".into(),
        rule: (stage == "permission").then(|| "read * allow".to_string()),
        duration_us: hash.map(|_| 40),
        outcome: Some("ok".into()),
    };
    let entries = vec![
        entry("permission", None, 10),
        entry("before", Some(&"a".repeat(64)), 10),
        entry("tool", Some(&"b".repeat(64)), 11),
        entry("after", Some(&"a".repeat(64)), 12),
    ];
    l.audit_all(&entries).await.unwrap();
    let rows: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
    let back = l.audit_trail(&s.id).await.unwrap();
    let expected: Vec<AuditEntry> = entries
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e.seq = i as i64 + 1;
            e
        })
        .collect();
    assert_eq!(back, expected);
}

/// A ledger file with a 10 KB part still in its write-ahead log.
async fn ledger_with_a_log(dir: &std::path::Path) -> Ledger {
    let ledger = Ledger::open(&dir.join("ledger.db"), Bus::new()).unwrap();
    let s = ledger.create_session("/tmp", "t").await.unwrap();
    let user = user_message(&s.id);
    ledger.put_message(&user).await.unwrap();
    ledger
        .put_part(&text_part(&user, "x".repeat(10_000)), PartWrite::Changed)
        .await
        .unwrap();
    ledger
}

/// Another connection in the middle of a read transaction for `ms`, as
/// another process's `warden session export` would be; returns once the
/// read has begun.
fn hold_a_read(path: &std::path::Path, ms: u64) -> std::thread::JoinHandle<()> {
    let (reading, read) = std::sync::mpsc::channel::<()>();
    let path = path.to_path_buf();
    let reader = std::thread::spawn(move || {
        let mut c = Connection::open(&path).unwrap();
        let tx = c.transaction().unwrap();
        let _: i64 = tx
            .query_row("SELECT count(*) FROM part", [], |r| r.get(0))
            .unwrap();
        reading.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        tx.commit().unwrap();
    });
    read.recv().unwrap();
    reader
}

fn log_size(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("ledger.db-wal")).map_or(0, |m| m.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_meets_a_reader_waits_for_it_and_empties_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = ledger_with_a_log(dir.path()).await;
    let reader = hold_a_read(&dir.path().join("ledger.db"), 200);
    ledger.checkpoint().await.unwrap();
    reader.join().unwrap();
    assert_eq!(
        log_size(dir.path()),
        0,
        "the log was moved into the file and truncated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_meets_another_checkpoint_waits_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = ledger_with_a_log(dir.path()).await;
    // A reader holds a snapshot for 300 ms; another connection's checkpoint
    // waits for it, holding the checkpoint lock all that time.
    let reader = hold_a_read(&path, 300);
    let other = std::thread::spawn(move || {
        let c = Connection::open(&path).unwrap();
        c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    ledger.checkpoint().await.unwrap();
    assert_eq!(
        log_size(dir.path()),
        0,
        "the log was moved into the file when the call returned"
    );
    reader.join().unwrap();
    assert_eq!(other.join().unwrap(), 0);
}
#[tokio::test]
async fn marks_come_back_in_order() {
    let ledger = Ledger::in_memory(Bus::new()).unwrap();
    let s = ledger.create_session("/w", "t").await.unwrap();
    let m = MessageId("msg_1".into());
    let kinds = [
        PhaseKind::ModelRequest { attempt: 1 },
        PhaseKind::RetryWait {
            attempt: 1,
            until: 30,
            message: "overloaded".into(),
        },
        PhaseKind::ModelRequest { attempt: 2 },
        PhaseKind::FirstToken,
        PhaseKind::StepFinish {
            reason: "stop".into(),
        },
    ];
    // The message the marks belong to must exist (marks point at its key).
    ledger
        .put_message(&warden_protocol::MessageInfo::User(
            warden_protocol::UserInfo {
                id: m.clone(),
                session_id: s.id.clone(),
                time: warden_protocol::MessageTime::at(0),
                agent: "build".into(),
                model: warden_protocol::ModelRef {
                    provider: "scripted".into(),
                    model: "x".into(),
                },
            },
        ))
        .await
        .unwrap();
    let marks: Vec<(i64, PhaseKind)> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (10 * i as i64, k.clone()))
        .collect();
    ledger
        .mark_phases(&s.id, Some(&m), &marks[..2])
        .await
        .unwrap();
    ledger
        .mark_phases(&s.id, Some(&m), &marks[2..])
        .await
        .unwrap();
    let got = ledger.phases(&s.id).await.unwrap();
    assert!(got.iter().all(|p| p.message_id.as_ref() == Some(&m)));
    assert_eq!(
        got.iter()
            .map(|p| (p.seq, p.at, p.kind.clone()))
            .collect::<Vec<_>>(),
        kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (i as i64 + 1, 10 * i as i64, k.clone()))
            .collect::<Vec<_>>()
    );
}

/// One watch serves every receiver of another process's writes, and one is
/// started again once the last receiver is gone.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_hears_another_process_s_writes_from_one_watch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = Ledger::open(&path, Bus::new()).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("CREATE TABLE scratch (n)").unwrap();
    let write = |n: i64| {
        other
            .execute("INSERT INTO scratch VALUES (?1)", [n])
            .unwrap()
    };
    let heard = |rx: &mut tokio::sync::broadcast::Receiver<()>| {
        let mut rx = rx.resubscribe();
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                .await
                .is_ok()
        }
    };
    let mut a = ledger.writes().expect("a watch on a SQLite file");
    let mut b = ledger.writes().expect("the same watch");
    let (ha, hb) = (heard(&mut a), heard(&mut b));
    write(1);
    assert!(ha.await && hb.await, "both heard the write");
    drop((a, b));
    // The watch ends at the next change; a new receiver gets a new one.
    write(2);
    let mut c = ledger.writes().expect("a watch again");
    let hc = heard(&mut c);
    write(3);
    assert!(hc.await, "heard by the new watch");
}
