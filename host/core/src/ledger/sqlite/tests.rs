//! The storage interface's contract, checked on the SQLite backend through
//! `dyn Store` (what the core holds): fencing, epochs, absence as a value,
//! one transaction per write.

use std::sync::Arc;

use warden_protocol::{
    MessageId, MessageInfo, MessageTime, ModelRef, Part, PartBody, Rule, SessionId, SessionInfo,
    SessionTime, ToolState, UserInfo,
};

use super::SqliteStore;
use crate::ledger::phase::PhaseKind;
use crate::ledger::store::{Fence, Store};
use crate::ledger::{AuditEntry, LedgerError, id};

fn session(n: i64) -> SessionInfo {
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

fn user(session: &SessionId) -> MessageInfo {
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

fn tool(message: &MessageInfo) -> Part {
    Part {
        id: id::ascending("prt").into(),
        session_id: message.session_id().clone(),
        message_id: message.id().clone(),
        body: PartBody::Tool {
            call_id: "c1".into(),
            tool: "read".into(),
            state: ToolState::pending(),
            provider_executed: false,
            ignored: false,
        },
    }
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

fn fenced<T: std::fmt::Debug>(session: &SessionId, r: Result<T, LedgerError>) {
    match r {
        Err(LedgerError::Fenced { session: s }) => assert_eq!(&s, session),
        other => panic!("expected a fenced write, got {other:?}"),
    }
}

/// Two stores on one file stand for two processes. After B takes the
/// lease over, every kind of write A makes with its old fence is refused
/// and changes nothing; B's writes with its own fence go through.
#[tokio::test]
async fn every_write_with_a_taken_over_fence_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let a: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let b: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
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
    fenced(&s.id, a.put_part(&tool(&first), true, &[], Some(&fa)).await);
    fenced(
        &s.id,
        a.put_part(&tool(&first), true, &[entry(&s.id, "allowed")], Some(&fa))
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

    b.put_part(&tool(&first), true, &[entry(&s.id, "allowed")], Some(&fb))
        .await
        .unwrap();
    assert_eq!(b.messages(&s.id).await.unwrap()[0].parts.len(), 1);
    assert_eq!(b.audit_trail(&s.id).await.unwrap().len(), 1);
    assert_eq!(b.part_events(&s.id).await.unwrap().len(), 1);
}

/// Epochs only grow: renewing keeps one, giving a lease back keeps it on
/// the row, and every new holder (or the same holder after a release) gets
/// a higher one. A held, unexpired lease is refused to others with its holder.
#[tokio::test]
async fn lease_epochs_only_grow() {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
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

    store.release_lease(&s.id, &a1).await.unwrap();
    assert!(store.leases().await.unwrap().is_empty());
    let a2 = store
        .acquire_lease(&s.id, "a", -1, alive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a2.epoch, 2, "taken anew after a release: a new epoch");
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
#[tokio::test]
async fn absence_is_a_value_and_a_refused_part_takes_its_audit_with_it() {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
    let ghost = SessionId("ses_none".into());
    assert_eq!(store.session(&ghost).await.unwrap(), None);
    assert!(!store.touch_session(&ghost, None).await.unwrap());
    assert!(!store.delete_session(&ghost, None).await.unwrap());
    assert!(!store.put_message(&user(&ghost), None).await.unwrap());
    assert!(
        store
            .update_permission(&ghost, None, Box::new(|_: &mut Vec<Rule>| {}))
            .await
            .unwrap()
            .is_none()
    );

    let s = session(1);
    store.create_session(&s).await.unwrap();
    let unwritten = user(&s.id);
    match store
        .put_part(&tool(&unwritten), true, &[entry(&s.id, "allowed")], None)
        .await
    {
        Err(LedgerError::Corrupt { what, .. }) => assert!(what.starts_with("part "), "{what}"),
        other => panic!("expected a refused part, got {other:?}"),
    }
    assert!(store.audit_trail(&s.id).await.unwrap().is_empty());
    assert!(store.part_events(&s.id).await.unwrap().is_empty());

    // And the session's rules change in place, returning the session after.
    let rule = Rule {
        permission: "read".into(),
        pattern: "*".into(),
        action: warden_protocol::Action::Allow,
    };
    let kept = rule.clone();
    let after = store
        .update_permission(&s.id, None, Box::new(move |r: &mut Vec<Rule>| r.push(kept)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.permission, vec![rule]);
    assert_eq!(store.sessions().await.unwrap(), vec![after]);
}
