//! The storage interface's contract, one set of checks run on every
//! backend through `dyn Store` (what the core holds): fencing, epochs,
//! absence as a value, one transaction per write, writers at once, and
//! moving sessions whole between backends. Each check takes a [`Place`]
//! (one ledger: a SQLite file or a PostgreSQL database) and opens as many
//! stores on it as it needs: two stores on one place stand for two
//! processes (or two hosts).
//!
//! Long: test code only (`#[cfg(test)]`): the whole contract in one place, each check next to the others.

use std::sync::Arc;

use serde_json::json;
use warden_protocol::{
    MessageId, MessageInfo, MessageTime, ModelRef, Part, PartBody, Rule, SessionId, SessionInfo,
    SessionTime, ToolState, UserInfo,
};

use super::location::open_store;
use super::phase::PhaseKind;
use super::store::{Fence, PartChange, StepWrite, Store, TimelineRow};
use super::{AuditEntry, LedgerError, PartEvent, id};

/// One ledger the checks open stores on.
pub(crate) enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Place {
    pub(crate) fn sqlite() -> Place {
        Place::Sqlite(tempfile::tempdir().expect("a temporary folder"))
    }

    /// A fresh database on the test process's throwaway cluster.
    pub(crate) fn postgres() -> Place {
        Place::Postgres(warden_pg_harness::database())
    }

    pub(crate) fn location(&self) -> String {
        match self {
            Place::Sqlite(dir) => format!("sqlite:{}", dir.path().join("l.db").display()),
            Place::Postgres(url) => url.clone(),
        }
    }

    /// A new store on this place (another "process").
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        open_store(&self.location())
            .await
            .expect("the ledger opens")
    }
}

pub(crate) fn session(n: i64) -> SessionInfo {
    SessionInfo::new(
        SessionId(id::ascending(SessionId::PREFIX)),
        format!("s{n}"),
        "/w".into(),
        Vec::new(),
        SessionTime {
            created: n,
            updated: n,
        },
    )
}

pub(crate) fn user(session: &SessionId) -> MessageInfo {
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

/// A new part of `message`.
fn part_of(message: &MessageInfo, body: PartBody) -> Part {
    Part {
        id: id::ascending("prt").into(),
        session_id: message.session_id().clone(),
        message_id: message.id().clone(),
        body,
    }
}

fn tool(message: &MessageInfo) -> Part {
    part_of(
        message,
        PartBody::Tool {
            call_id: "c1".into(),
            tool: "read".into(),
            state: ToolState::pending(),
            provider_executed: false,
            ignored: false,
        },
    )
}

/// A call that started: pending, then running with `input`, each with its
/// timeline row when written together.
fn started(message: &MessageInfo, input: serde_json::Value) -> (Part, Part) {
    let pending = tool(message);
    let mut running = pending.clone();
    if let PartBody::Tool { state, .. } = &mut running.body {
        *state = state.start(input, 9).unwrap();
    }
    (pending, running)
}

/// Both states of a [`started`] call, for one write.
fn both<'a>(pending: &'a Part, running: &'a Part) -> [PartChange<'a>; 2] {
    [pending, running].map(|part| PartChange {
        part,
        timeline: Some(TimelineRow::default()),
    })
}

/// A finished text of `n` bytes.
fn text(n: usize) -> PartBody {
    PartBody::Text {
        text: "x".repeat(n),
        synthetic: false,
        time: None,
        ignored: false,
    }
}

fn step_finish(message: &MessageInfo) -> Part {
    part_of(
        message,
        PartBody::StepFinish {
            reason: warden_protocol::FinishReason::ToolCalls,
            tokens: Default::default(),
            cost: 0.0,
        },
    )
}

/// A step's end: its header, its last parts and its marks in one write.
async fn end_step(
    store: &dyn Store,
    info: &MessageInfo,
    parts: &[Part],
    marks: &[(i64, PhaseKind)],
    fence: Option<&Fence>,
) -> Result<bool, LedgerError> {
    let parts: Vec<PartChange<'_>> = parts
        .iter()
        .map(|part| PartChange {
            part,
            timeline: None,
        })
        .collect();
    let write = StepWrite {
        header: Some(info),
        parts: &parts,
        marks,
        ..StepWrite::default()
    };
    store.write_step(&write, fence).await
}

fn entry(session: &SessionId, decision: &str) -> AuditEntry {
    AuditEntry {
        seq: 0,
        session_id: session.clone(),
        message_id: None,
        call_id: Some("c1".into()),
        at: 5,
        stage: "permission".into(),
        subject: "read".into(),
        plugin_hash: None,
        decision: decision.into(),
        rule: None,
        duration_us: None,
        outcome: Some("ok".into()),
    }
}

fn rule(n: usize) -> Rule {
    Rule {
        permission: format!("tool{n}"),
        pattern: "*".into(),
        action: warden_protocol::Action::Allow,
    }
}

fn fenced<T: std::fmt::Debug>(session: &SessionId, r: Result<T, LedgerError>) {
    match r {
        Err(LedgerError::Fenced { session: s }) => assert_eq!(&s, session),
        other => panic!("expected a fenced write, got {other:?}"),
    }
}

/// After B takes the lease over, every kind of write A makes with its old
/// fence is refused and leaves no trace; B's writes with its own fence go
/// through.
pub(crate) async fn every_write_with_a_taken_over_fence_is_refused_and_changes_nothing(
    place: Place,
) {
    let a = place.open().await;
    let b = place.open().await;
    let s = session(1);
    a.create_session(&s).await.unwrap();
    let fa = a
        .acquire_lease(&s.id, "a", 60_000, Arc::new(|_: &str| false))
        .await
        .unwrap()
        .unwrap();
    let first = user(&s.id);
    assert!(a.put_message(&first, Some(&fa)).await.unwrap());
    a.check_fence(&s.id, &fa).await.unwrap();

    let fb = b
        .acquire_lease(&s.id, "b", 60_000, Arc::new(|h: &str| h == "a"))
        .await
        .unwrap()
        .unwrap();
    assert!(fb.epoch > fa.epoch);
    let before = (
        b.session(&s.id).await.unwrap(),
        b.messages(&s.id).await.unwrap(),
    );

    fenced(&s.id, a.check_fence(&s.id, &fa).await);
    fenced(&s.id, a.put_message(&user(&s.id), Some(&fa)).await);
    fenced(
        &s.id,
        a.put_part(&tool(&first), Some(TimelineRow::default()), &[], Some(&fa))
            .await,
    );
    fenced(
        &s.id,
        a.put_part(
            &tool(&first),
            Some(TimelineRow::default()),
            &[entry(&s.id, "allowed")],
            Some(&fa),
        )
        .await,
    );
    fenced(
        &s.id,
        a.audit(&s.id, &[entry(&s.id, "denied")], Some(&fa)).await,
    );
    fenced(
        &s.id,
        a.mark_phases(&s.id, None, &[(3, PhaseKind::FirstToken)], Some(&fa))
            .await,
    );
    fenced(
        &s.id,
        end_step(
            &*a,
            &first,
            &[step_finish(&first)],
            &[(4, PhaseKind::FirstToken)],
            Some(&fa),
        )
        .await,
    );
    fenced(&s.id, a.touch_session(&s.id, Some(&fa)).await);
    fenced(
        &s.id,
        a.update_permission(&s.id, Some(&fa), Box::new(|r: &mut Vec<Rule>| r.clear()))
            .await,
    );
    fenced(&s.id, a.delete_session(&s.id, Some(&fa)).await);
    // A stale holder can neither extend nor give back the new holder's lease.
    assert!(!a.renew_lease(&s.id, &fa, 60_000).await.unwrap());
    a.release_lease(&s.id, &fa).await.unwrap();
    b.check_fence(&s.id, &fb).await.unwrap();

    assert_eq!(
        (
            b.session(&s.id).await.unwrap(),
            b.messages(&s.id).await.unwrap()
        ),
        before
    );
    assert!(b.audit_trail(&s.id).await.unwrap().is_empty());
    assert!(b.part_events(&s.id).await.unwrap().is_empty());
    assert!(b.phases(&s.id).await.unwrap().is_empty());

    b.put_part(
        &tool(&first),
        Some(TimelineRow::default()),
        &[entry(&s.id, "allowed")],
        Some(&fb),
    )
    .await
    .unwrap();
    assert_eq!(b.messages(&s.id).await.unwrap()[0].parts.len(), 1);
    assert_eq!(b.audit_trail(&s.id).await.unwrap().len(), 1);
    assert_eq!(b.part_events(&s.id).await.unwrap().len(), 1);
}

/// Epochs only grow: renewing keeps one, giving a lease back keeps it on
/// the row, and every new holder (or the same holder after a release) gets
/// a higher one. A held, unexpired lease is refused to others with its holder.
pub(crate) async fn lease_epochs_only_grow(place: Place) {
    let store = place.open().await;
    let s = session(1);
    store.create_session(&s).await.unwrap();
    let alive = || Arc::new(|_: &str| false);
    let a1 = store
        .acquire_lease(&s.id, "a", 60_000, alive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a1.epoch, 1);
    let again = store
        .acquire_lease(&s.id, "a", 60_000, alive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, a1, "the holder renewing keeps its epoch");
    assert!(store.renew_lease(&s.id, &a1, 60_000).await.unwrap());
    let held = store
        .acquire_lease(&s.id, "b", 60_000, alive())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(held.holder, "a");
    assert_eq!(
        store.leases().await.unwrap(),
        vec![(s.id.clone(), "a".to_string(), held.expires_at)]
    );

    let (holder, left) = store.lease(&s.id).await.unwrap().expect("held");
    assert_eq!(holder, "a");
    assert!(
        (50_000..=60_000).contains(&left),
        "milliseconds left on the store's clock: {left}"
    );

    store.release_lease(&s.id, &a1).await.unwrap();
    assert!(store.leases().await.unwrap().is_empty());
    assert_eq!(store.lease(&s.id).await.unwrap(), None, "given back");
    let a2 = store
        .acquire_lease(&s.id, "a", -1, alive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a2.epoch, 2, "taken anew after a release: a new epoch");
    let (_, left) = store.lease(&s.id).await.unwrap().expect("held");
    assert!(left <= 0, "expired: {left}");
    fenced(&s.id, store.check_fence(&s.id, &a1).await);
    // Expired: anyone may take it, at a higher epoch still.
    let b = store
        .acquire_lease(&s.id, "b", 60_000, alive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        b,
        Fence {
            holder: "b".into(),
            epoch: 3
        }
    );
}

/// What is missing is a value the layer above interprets, never an error;
/// a part whose message is missing is refused whole, with its audit rows.
pub(crate) async fn absence_is_a_value_and_a_refused_part_takes_its_audit_with_it(place: Place) {
    let store = place.open().await;
    let ghost = SessionId("ses_none".into());
    assert_eq!(store.session(&ghost).await.unwrap(), None);
    assert!(!store.touch_session(&ghost, None).await.unwrap());
    assert!(!store.delete_session(&ghost, None).await.unwrap());
    assert!(!store.put_message(&user(&ghost), None).await.unwrap());
    let ghostly = user(&ghost);
    assert!(
        !end_step(&*store, &ghostly, &[step_finish(&ghostly)], &[], None)
            .await
            .unwrap()
    );
    assert!(
        store
            .update_permission(&ghost, None, Box::new(|_: &mut Vec<Rule>| {}))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.export_session(&ghost).await.unwrap(), None);

    let s = session(1);
    store.create_session(&s).await.unwrap();
    let unwritten = user(&s.id);
    match store
        .put_part(
            &tool(&unwritten),
            Some(TimelineRow::default()),
            &[entry(&s.id, "allowed")],
            None,
        )
        .await
    {
        Err(LedgerError::Corrupt { what, .. }) => assert!(what.starts_with("part "), "{what}"),
        other => panic!("expected a refused part, got {other:?}"),
    }
    assert!(store.audit_trail(&s.id).await.unwrap().is_empty());
    assert!(store.part_events(&s.id).await.unwrap().is_empty());

    // And the session's rules change in place, returning the session after.
    let kept = rule(0);
    let after = store
        .update_permission(&s.id, None, Box::new(move |r: &mut Vec<Rule>| r.push(kept)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.permission, vec![rule(0)]);
    assert_eq!(store.sessions().await.unwrap(), vec![after]);
}

/// A step's write is one transaction: its header, its parts, its calls'
/// states with their timeline rows, its audit rows and its phase marks land
/// together, and a part that is not the step's (another message's, another
/// session's) is refused with all the rest.
pub(crate) async fn a_step_is_written_whole_or_not_at_all(place: Place) {
    let store = place.open().await;
    let s = session(1);
    store.create_session(&s).await.unwrap();
    let elsewhere = session(2);
    store.create_session(&elsewhere).await.unwrap();
    let MessageInfo::User(mut step) = user(&s.id) else {
        unreachable!()
    };
    step.agent = "before".into();
    let before = MessageInfo::User(step.clone());
    assert!(store.put_message(&before, None).await.unwrap());
    step.agent = "after".into();
    let after = MessageInfo::User(step);
    let other = user(&s.id);
    assert!(store.put_message(&other, None).await.unwrap());
    let theirs = user(&elsewhere.id);
    assert!(store.put_message(&theirs, None).await.unwrap());
    let marks = [
        (7, PhaseKind::FirstToken),
        (
            8,
            PhaseKind::StepFinish {
                reason: "tool-calls".into(),
            },
        ),
    ];

    for refused in [step_finish(&other), step_finish(&theirs)] {
        match end_step(
            &*store,
            &after,
            &[step_finish(&after), refused],
            &marks,
            None,
        )
        .await
        {
            Err(LedgerError::Corrupt { what, .. }) => assert!(what.starts_with("part "), "{what}"),
            other => panic!("expected a refused part, got {other:?}"),
        }
    }
    let msgs = store.messages(&s.id).await.unwrap();
    assert_eq!(
        msgs[0].info, before,
        "a refused end leaves the header as it was"
    );
    assert!(msgs.iter().all(|m| m.parts.is_empty()));
    assert!(store.phases(&s.id).await.unwrap().is_empty());

    // A call's pending and running states in one write (no header): both
    // timeline rows, in order, and the row holds the last; a part of
    // another session in the same write refuses it all, audit rows too.
    let (pending, running) = started(&after, json!({"filePath": "a"}));
    let call = both(&pending, &running);
    let stray = step_finish(&theirs);
    let mut with_stray = call.to_vec();
    with_stray.push(PartChange {
        part: &stray,
        timeline: None,
    });
    let audit = [entry(&s.id, "allowed")];
    let refused = StepWrite {
        parts: &with_stray,
        audit: &audit,
        ..StepWrite::default()
    };
    assert!(matches!(
        store.write_step(&refused, None).await,
        Err(LedgerError::Corrupt { .. })
    ));
    assert!(store.part_events(&s.id).await.unwrap().is_empty());
    assert!(store.audit_trail(&s.id).await.unwrap().is_empty());
    let started = StepWrite {
        parts: &call,
        audit: &audit,
        ..StepWrite::default()
    };
    assert!(store.write_step(&started, None).await.unwrap());
    let timeline = store.part_events(&s.id).await.unwrap();
    let states: Vec<&str> = timeline
        .iter()
        .map(|e| e.part.tool_state().unwrap().status())
        .collect();
    assert_eq!(states, ["pending", "running"]);
    assert_eq!(store.audit_trail(&s.id).await.unwrap().len(), 1);
    let msgs = store.messages(&s.id).await.unwrap();
    assert_eq!(msgs[0].parts, vec![running.clone()]);

    // The end: the call's result, the step-finish, the header and the
    // marks, together.
    let mut completed = running.clone();
    if let PartBody::Tool { state, .. } = &mut completed.body {
        *state = state
            .complete(
                json!({"filePath": "a"}),
                "ok".into(),
                "a".into(),
                json!({}),
                10,
            )
            .unwrap();
    }
    let finish = step_finish(&after);
    let end = [
        PartChange {
            part: &completed,
            timeline: Some(TimelineRow::default()),
        },
        PartChange {
            part: &finish,
            timeline: None,
        },
    ];
    let write = StepWrite {
        header: Some(&after),
        parts: &end,
        audit: &[],
        marks: &marks,
    };
    assert!(store.write_step(&write, None).await.unwrap());
    let msgs = store.messages(&s.id).await.unwrap();
    assert_eq!(msgs[0].info, after);
    assert_eq!(msgs[0].parts, vec![completed, finish]);
    let timeline = store.part_events(&s.id).await.unwrap();
    assert_eq!(timeline.len(), 3);
    assert_eq!(timeline[2].part.tool_state().unwrap().status(), "completed");
    let phases = store.phases(&s.id).await.unwrap();
    assert_eq!(
        phases
            .iter()
            .map(|p| (p.at, p.kind.clone(), p.message_id.clone()))
            .collect::<Vec<_>>(),
        marks
            .iter()
            .map(|(at, k)| (*at, k.clone(), Some(after.id().clone())))
            .collect::<Vec<_>>()
    );
}

/// Two stores on one ledger, each with several callers, all taking one
/// session's lease at once: exactly one fence between them.
pub(crate) async fn two_stores_taking_one_lease_at_once_get_one_fence(place: Place) {
    let stores = [place.open().await, place.open().await];
    let s = session(1);
    stores[0].create_session(&s).await.unwrap();
    let mut takers = Vec::new();
    for n in 0..8 {
        let store = stores[n % 2].clone();
        let id = s.id.clone();
        takers.push(tokio::spawn(async move {
            store
                .acquire_lease(&id, &format!("h{n}"), 60_000, Arc::new(|_: &str| false))
                .await
                .unwrap()
        }));
    }
    let mut won = Vec::new();
    let mut refused = Vec::new();
    for t in takers {
        match t.await.unwrap() {
            Ok(fence) => won.push(fence),
            Err(held) => refused.push(held.holder),
        }
    }
    assert_eq!(won.len(), 1, "one fence between them: {won:?}");
    assert_eq!(won[0].epoch, 1);
    assert_eq!(refused.len(), 7);
    assert!(refused.iter().all(|h| *h == won[0].holder), "{refused:?}");
    stores[1].check_fence(&s.id, &won[0]).await.unwrap();
}

/// Rule changes and numbered appends (tool states with their audit, audit,
/// phases) from two stores at once all land: no change is lost, no number given twice.
pub(crate) async fn writers_at_once_all_land(place: Place) {
    let stores = [place.open().await, place.open().await];
    let s = session(1);
    stores[0].create_session(&s).await.unwrap();
    let message = user(&s.id);
    assert!(stores[0].put_message(&message, None).await.unwrap());
    let mut writers = Vec::new();
    for n in 0..12 {
        let store = stores[n % 2].clone();
        let id = s.id.clone();
        let call = tool(&message);
        writers.push(tokio::spawn(async move {
            // A tool call's state with its audit entry: numbered twice.
            store
                .put_part(
                    &call,
                    Some(TimelineRow::default()),
                    &[entry(&id, &format!("p{n}"))],
                    None,
                )
                .await
                .unwrap();
            store
                .update_permission(
                    &id,
                    None,
                    Box::new(move |r: &mut Vec<Rule>| r.push(rule(n))),
                )
                .await
                .unwrap()
                .expect("the session is there");
            store
                .audit(&id, &[entry(&id, &format!("d{n}"))], None)
                .await
                .unwrap();
            store
                .mark_phases(&id, None, &[(n as i64, PhaseKind::FirstToken)], None)
                .await
                .unwrap();
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let mut rules: Vec<String> = stores[1]
        .session(&s.id)
        .await
        .unwrap()
        .unwrap()
        .permission
        .into_iter()
        .map(|r| r.permission)
        .collect();
    rules.sort();
    let mut want: Vec<String> = (0..12).map(|n| rule(n).permission).collect();
    want.sort();
    assert_eq!(rules, want);
    let trail = stores[0].audit_trail(&s.id).await.unwrap();
    assert_eq!(
        trail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=24).collect::<Vec<i64>>()
    );
    let mut decisions: Vec<String> = trail.into_iter().map(|e| e.decision).collect();
    decisions.sort();
    let mut want: Vec<String> = (0..12)
        .flat_map(|n| [format!("d{n}"), format!("p{n}")])
        .collect();
    want.sort();
    let events = stores[1].part_events(&s.id).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<i64>>()
    );
    assert_eq!(stores[1].messages(&s.id).await.unwrap()[0].parts.len(), 12);
    assert_eq!(decisions, want);
    let phases = stores[0].phases(&s.id).await.unwrap();
    assert_eq!(
        phases.iter().map(|p| p.seq).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<i64>>()
    );
}

/// A session read while another store keeps adding messages with a part
/// each reads as one moment of it: every read succeeds, each part with its
/// message, and no read sees fewer messages than the one before.
pub(crate) async fn a_read_is_one_moment_while_another_store_writes(place: Place) {
    const WRITES: usize = 150;
    let (writer, reader) = (place.open().await, place.open().await);
    let s = session(1);
    writer.create_session(&s).await.unwrap();
    let id = s.id.clone();
    let writing = tokio::spawn(async move {
        for n in 0..WRITES {
            let message = user(&id);
            assert!(writer.put_message(&message, None).await.unwrap());
            let text = part_of(
                &message,
                PartBody::Text {
                    text: n.to_string(),
                    synthetic: false,
                    time: None,
                    ignored: false,
                },
            );
            writer.put_part(&text, None, &[], None).await.unwrap();
        }
    });
    let mut seen = 0;
    loop {
        let done = writing.is_finished();
        let messages = reader
            .messages(&s.id)
            .await
            .unwrap_or_else(|e| panic!("a read beside a writer failed after {seen} messages: {e}"));
        assert!(messages.len() >= seen, "a later read saw fewer messages");
        seen = messages.len();
        for m in &messages {
            assert!(m.parts.iter().all(|p| &p.message_id == m.info.id()));
        }
        if done {
            break;
        }
    }
    writing.await.unwrap();
    assert_eq!(seen, WRITES);
}

/// A session with something of every kind: messages, a text part, a tool
/// call through three states (timeline), audit entries of two calls (one
/// with a guest hash), phase marks with and without a message.
pub(crate) async fn fill(store: &dyn Store, n: i64) -> SessionId {
    let s = session(n);
    store.create_session(&s).await.unwrap();
    let kept = rule(n as usize);
    store
        .update_permission(&s.id, None, Box::new(move |r: &mut Vec<Rule>| r.push(kept)))
        .await
        .unwrap();
    let first = user(&s.id);
    let second = user(&s.id);
    assert!(store.put_message(&first, None).await.unwrap());
    assert!(store.put_message(&second, None).await.unwrap());
    let text = part_of(
        &first,
        serde_json::from_value(json!({"type": "text", "text": format!("hello {n}")})).unwrap(),
    );
    store.put_part(&text, None, &[], None).await.unwrap();
    let mut call = tool(&second);
    let mut guest = entry(&s.id, "allowed");
    guest.message_id = Some(second.id().clone());
    guest.stage = "before".into();
    guest.subject = "plugin:guard".into();
    guest.plugin_hash = Some("sha256:abc".into());
    guest.duration_us = Some(120);
    guest.at = 7;
    store
        .put_part(
            &call,
            Some(TimelineRow::default()),
            &[entry(&s.id, "allowed"), guest],
            None,
        )
        .await
        .unwrap();
    let running = ToolState::pending()
        .start(json!({"path": "a.txt"}), 10)
        .unwrap();
    // A before hook rewrote the arguments: the call ends with others than
    // it started with, and its last row keeps the first ones.
    let done = running
        .complete(
            json!({"path": "b.txt"}),
            "contents".into(),
            "b.txt".into(),
            json!({"lines": 1}),
            25,
        )
        .unwrap();
    let started = json!({"path": "a.txt"});
    for (state, started_with) in [(running, None), (done, Some(&started))] {
        if let PartBody::Tool { state: s, .. } = &mut call.body {
            *s = state;
        }
        let row = TimelineRow {
            started_with,
            at: None,
        };
        store.put_part(&call, Some(row), &[], None).await.unwrap();
    }
    let mut other = entry(&s.id, "denied");
    other.call_id = Some("c2".into());
    other.rule = Some("bash * deny".into());
    store.audit(&s.id, &[other], None).await.unwrap();
    store
        .mark_phases(
            &s.id,
            Some(second.id()),
            &[
                (11, PhaseKind::ModelRequest { attempt: 1 }),
                (
                    12,
                    PhaseKind::RetryWait {
                        attempt: 1,
                        until: 40,
                        message: "overloaded".into(),
                    },
                ),
                (13, PhaseKind::FirstToken),
            ],
            None,
        )
        .await
        .unwrap();
    store
        .mark_phases(
            &s.id,
            None,
            &[(
                14,
                PhaseKind::StepFinish {
                    reason: "stop".into(),
                },
            )],
            None,
        )
        .await
        .unwrap();
    s.id
}

/// A session exported and imported into another ledger reads back equal in
/// every way the interface reads it, its numbers and times kept; a second
/// import writes nothing.
pub(crate) async fn a_session_moves_whole(from: Place, to: Place) {
    let a = from.open().await;
    let b = to.open().await;
    let id = fill(&*a, 1).await;
    let export = a.export_session(&id).await.unwrap().expect("exported");
    assert_eq!(export.messages.len(), 2);
    assert_eq!(export.timeline.len(), 3);
    assert_eq!(export.audit.len(), 3);
    assert_eq!(export.phases.len(), 4);
    // The call replays as it ran: started with the model's arguments,
    // ended with the hook's, on both sides of the move.
    let inputs = |events: &[PartEvent]| -> Vec<serde_json::Value> {
        events
            .iter()
            .filter_map(|e| e.part.tool_state().map(|s| s.input().clone()))
            .collect()
    };
    assert_eq!(
        inputs(&export.timeline),
        vec![json!({}), json!({"path": "a.txt"}), serde_json::Value::Null]
    );
    assert_eq!(
        export
            .last_inputs()
            .into_values()
            .cloned()
            .collect::<Vec<_>>(),
        vec![json!({"path": "b.txt"})]
    );
    assert!(b.import_session(&export).await.unwrap());
    assert!(!b.import_session(&export).await.unwrap());
    assert_eq!(b.export_session(&id).await.unwrap().as_ref(), Some(&export));
    assert_eq!(b.session(&id).await.unwrap(), a.session(&id).await.unwrap());
    assert_eq!(
        b.messages(&id).await.unwrap(),
        a.messages(&id).await.unwrap()
    );
    assert_eq!(
        b.part_events(&id).await.unwrap(),
        a.part_events(&id).await.unwrap()
    );
    assert_eq!(
        b.audit_trail(&id).await.unwrap(),
        a.audit_trail(&id).await.unwrap()
    );
    assert_eq!(b.phases(&id).await.unwrap(), a.phases(&id).await.unwrap());
    // The moved session keeps working: numbers go on from where they were.
    b.audit(&id, &[entry(&id, "later")], None).await.unwrap();
    assert_eq!(
        b.audit_trail(&id).await.unwrap().last().map(|e| e.seq),
        Some(4)
    );
}

/// A part reads back whole at every size, through rewrites that grow and
/// shrink it, in the messages and in the timeline (a backend may keep large
/// bodies apart from their rows: SQLite does over 900 bytes).
pub(crate) async fn parts_of_every_size_read_back_whole_through_rewrites(place: Place) {
    let store = place.open().await;
    let s = session(1);
    store.create_session(&s).await.unwrap();
    let m = user(&s.id);
    assert!(store.put_message(&m, None).await.unwrap());
    let mut grown = part_of(&m, text(1));
    for n in [
        10, 899, 900, 901, 1024, 5000, 65_536, 300_000, 10, 70_000, 0,
    ] {
        grown.body = text(n);
        store.put_part(&grown, None, &[], None).await.unwrap();
        let read = store.messages(&s.id).await.unwrap();
        assert_eq!(read[0].parts, [grown.clone()], "{n} bytes");
    }
    // A tool call whose output is large: its timeline carries it too.
    let mut call = tool(&m);
    store
        .put_part(&call, Some(TimelineRow::default()), &[], None)
        .await
        .unwrap();
    let output = "y".repeat(64 * 1024);
    if let PartBody::Tool { state, .. } = &mut call.body {
        *state = ToolState::Completed {
            input: json!({"path": "big"}),
            output: output.clone(),
            title: String::new(),
            metadata: json!({}),
            time: warden_protocol::tool_state::Span { start: 1, end: 2 },
        };
    }
    store
        .put_part(&call, Some(TimelineRow::default()), &[], None)
        .await
        .unwrap();
    let read = store.messages(&s.id).await.unwrap();
    assert_eq!(read[0].parts, [grown.clone(), call.clone()]);
    // The timeline keeps states, not content; its envelope (the tool's name)
    // comes from the part row, wherever that keeps a large body.
    let timeline = store.part_events(&s.id).await.unwrap();
    let states: Vec<(&str, &str)> = timeline
        .iter()
        .map(|e| match &e.part.body {
            PartBody::Tool { tool, state, .. } => (tool.as_str(), state.status()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(states, [("read", "pending"), ("read", "completed")]);
}

/// Run each named check on a fresh SQLite file and a fresh PostgreSQL database.
/// Many sessions' steps at once (what group commit puts in one
/// transaction): every good write lands whole, numbered per session from
/// 1, and each bad one fails alone, leaving nothing: a write under a fence
/// taken over, a header of a session that is gone, a part of another
/// session's message.
pub(crate) async fn steps_of_many_sessions_at_once_land_and_a_bad_one_fails_alone(place: Place) {
    const SESSIONS: usize = 40;
    let alive = || Arc::new(|_: &str| false);
    let store = place.open().await;
    let other = place.open().await;
    let mut sessions = Vec::new();
    for n in 0..SESSIONS {
        let s = session(n as i64);
        store.create_session(&s).await.unwrap();
        let fence = store
            .acquire_lease(&s.id, "a", 60_000, alive())
            .await
            .unwrap()
            .unwrap();
        let message = user(&s.id);
        assert!(store.put_message(&message, Some(&fence)).await.unwrap());
        sessions.push((s, fence, message));
    }
    // Session 3's lease changes hands: its holder's next write is refused.
    let (lost, _, _) = &sessions[3];
    store.release_lease(&lost.id, &sessions[3].1).await.unwrap();
    other
        .acquire_lease(&lost.id, "b", 60_000, alive())
        .await
        .unwrap()
        .unwrap();
    let gone = session(99);
    let barrier = Arc::new(tokio::sync::Barrier::new(SESSIONS + 2));
    let mut writers = Vec::new();
    for (n, (s, fence, message)) in sessions.iter().cloned().enumerate() {
        let (store, barrier) = (store.clone(), barrier.clone());
        // Session 5's write names a part of session 6's message.
        let stray = (n == 5).then(|| step_finish(&sessions[6].2));
        writers.push(tokio::spawn(async move {
            let (pending, running) = started(&message, json!({"n": n}));
            let mut parts = both(&pending, &running).to_vec();
            if let Some(stray) = &stray {
                parts.push(PartChange {
                    part: stray,
                    timeline: None,
                });
            }
            let audit = [entry(&s.id, &format!("a{n}"))];
            let marks = [(n as i64, PhaseKind::FirstToken)];
            let write = StepWrite {
                header: Some(&message),
                parts: &parts,
                audit: &audit,
                marks: &marks,
            };
            barrier.wait().await;
            store.write_step(&write, Some(&fence)).await
        }));
    }
    let missing = {
        let (store, barrier, gone) = (store.clone(), barrier.clone(), gone.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store.put_message(&user(&gone.id), None).await
        })
    };
    barrier.wait().await;
    let mut results = Vec::new();
    for w in writers {
        results.push(w.await.unwrap());
    }
    assert!(
        !missing.await.unwrap().unwrap(),
        "a header of a missing session is not written"
    );
    for (n, ((s, _, _), result)) in sessions.iter().zip(results).enumerate() {
        let events = store.part_events(&s.id).await.unwrap();
        let trail = store.audit_trail(&s.id).await.unwrap();
        let phases = store.phases(&s.id).await.unwrap();
        let parts = store.messages(&s.id).await.unwrap()[0].parts.len();
        match n {
            3 => fenced(&s.id, result),
            5 => assert!(
                matches!(result, Err(LedgerError::Corrupt { .. })),
                "{result:?}"
            ),
            _ => {
                assert!(result.unwrap(), "session {n}'s step landed");
                assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
                assert_eq!(
                    trail
                        .iter()
                        .map(|e| (e.seq, e.decision.as_str()))
                        .collect::<Vec<_>>(),
                    [(1, format!("a{n}").as_str())]
                );
                assert_eq!(phases.len(), 1);
                assert_eq!(parts, 1, "the call's row, once");
                continue;
            }
        }
        assert!(
            events.is_empty() && trail.is_empty() && phases.is_empty() && parts == 0,
            "session {n}'s refused write left nothing"
        );
    }
    assert!(store.session(&gone.id).await.unwrap().is_none());
}

macro_rules! on_every_backend {
    ($($check:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::Place::sqlite()).await
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::Place::postgres()).await
                }
            )*
        }
    };
}

on_every_backend!(
    every_write_with_a_taken_over_fence_is_refused_and_changes_nothing,
    lease_epochs_only_grow,
    absence_is_a_value_and_a_refused_part_takes_its_audit_with_it,
    two_stores_taking_one_lease_at_once_get_one_fence,
    writers_at_once_all_land,
    a_step_is_written_whole_or_not_at_all,
    a_read_is_one_moment_while_another_store_writes,
    parts_of_every_size_read_back_whole_through_rewrites,
    steps_of_many_sessions_at_once_land_and_a_bad_one_fails_alone,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_whole_from_sqlite_to_postgres() {
    a_session_moves_whole(Place::sqlite(), Place::postgres()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_whole_from_postgres_to_sqlite() {
    a_session_moves_whole(Place::postgres(), Place::sqlite()).await
}

/// A database whose default isolation is stricter than READ COMMITTED (an
/// operator's choice warden does not control) still takes writers at once:
/// the store sets its own level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_at_once_land_on_a_database_that_defaults_to_repeatable_read() {
    let url = warden_pg_harness::database();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let db = url.rsplit('/').next().unwrap().to_string();
    client
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" SET default_transaction_isolation = 'repeatable read'"
        ))
        .await
        .unwrap();
    writers_at_once_all_land(Place::Postgres(url)).await
}

/// SQLite keeps a large body's chunks in `part_body` only while its part
/// names them:
/// a rewrite that shrinks the part, or deleting its session, leaves none
/// behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_no_large_body_its_part_no_longer_names() {
    let place = Place::sqlite();
    let store = place.open().await;
    let Place::Sqlite(dir) = &place else {
        unreachable!()
    };
    let bodies = || {
        rusqlite::Connection::open(dir.path().join("l.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM part_body", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    let s = session(1);
    store.create_session(&s).await.unwrap();
    let m = user(&s.id);
    store.put_message(&m, None).await.unwrap();
    let mut p = part_of(&m, text(4900));
    store.put_part(&p, None, &[], None).await.unwrap();
    assert_eq!(
        bodies(),
        5,
        "4,900 bytes and the part's fields, in chunks of 1,000"
    );
    p.body = text(5900);
    store.put_part(&p, None, &[], None).await.unwrap();
    assert_eq!(bodies(), 6, "the rewrite's chunks replaced the first's");
    p.body = text(10);
    store.put_part(&p, None, &[], None).await.unwrap();
    assert_eq!(bodies(), 0, "shrunk into its row");
    p.body = text(1900);
    store.put_part(&p, None, &[], None).await.unwrap();
    store
        .put_part(&part_of(&m, text(2900)), None, &[], None)
        .await
        .unwrap();
    assert_eq!(bodies(), 2 + 3);
    assert!(store.delete_session(&s.id, None).await.unwrap());
    assert_eq!(bodies(), 0, "gone with the session");
}
