use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast;
use warden_ledger::postgres::outbox::LISTENER_NAME;
use warden_protocol::SessionId;

use super::*;
use crate::ledger::Store;
use crate::ledger::postgres::PgStore;

/// A plain connection to `url`, for what only SQL can do to the outbox's
/// hosts (cutting their connections).
async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn delta(part: &str, text: &str, delta: &str) -> Outgoing {
    let part = serde_json::from_value(json!({
        "id": part, "sessionID": "ses_a", "messageID": "msg_1", "type": "text", "text": text
    }))
    .unwrap();
    Outgoing::Event(
        Arc::new(Event::PartUpdated {
            part,
            delta: Some(delta.into()),
        }),
        Some(1),
    )
}

/// Consecutive deltas of one part become one event carrying the part as
/// it is after them and their text joined; a delta of another part, or a
/// change that is not a delta, keeps its own row.
#[test]
fn queued_deltas_of_one_part_are_merged() {
    let done = Outgoing::Event(
        Arc::new(Event::SessionWarning {
            session_id: SessionId("ses_a".into()),
            message: "x".into(),
        }),
        None,
    );
    let items = encode(vec![
        delta("prt_1", "a", "a"),
        delta("prt_1", "ab", "b"),
        delta("prt_1", "abc", "c"),
        delta("prt_2", "z", "z"),
        done,
        delta("prt_2", "zy", "y"),
    ]);
    let events: Vec<Event> = items
        .iter()
        .map(|i| serde_json::from_str(&i.body).unwrap())
        .collect();
    let summary: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::PartUpdated { part, delta } => match &part.body {
                warden_protocol::PartBody::Text { text, .. } => {
                    format!("{} {text} +{}", part.id, delta.as_deref().unwrap_or(""))
                }
                _ => unreachable!("only text parts here"),
            },
            other => other.kind().to_string(),
        })
        .collect();
    assert_eq!(
        summary,
        [
            "prt_1 abc +abc",
            "prt_2 z +z",
            "session.warning",
            "prt_2 zy +y"
        ]
    );
}

/// Receive the next event from another host, or fail after a minute.
async fn next(rx: &mut broadcast::Receiver<Arc<crate::bus::Elsewhere>>) -> (i64, Event) {
    loop {
        let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("an event from the other host within a minute")
            .unwrap();
        if let crate::bus::Elsewhere::Event { seq, event } = &*got {
            return (*seq, Event::clone(event));
        }
    }
}

fn note(n: usize) -> Event {
    Event::SessionWarning {
        session_id: SessionId("ses_a".into()),
        message: n.to_string(),
    }
}

/// Host B's listening connection is cut; host A publishes while it is down
/// (no notification reaches B); B reconnects and publishes everything it
/// missed, in order, read from the outbox. A's own events are not handed
/// back to A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_missed_notifications_catches_up_from_the_outbox() {
    let url = warden_pg_harness::database();
    let a = crate::bus::Bus::new();
    let b = crate::bus::Bus::new();
    let store_a = PgStore::open(&url).await.unwrap();
    let store_b = PgStore::open(&url).await.unwrap();
    start(store_a.outbox().unwrap(), &a);
    start(store_b.outbox().unwrap(), &b);
    let mut on_a = a.subscribe_elsewhere();
    let mut on_b = b.subscribe_elsewhere();
    // B is listening once an event published on A reaches it.
    let mut ready = 0;
    let first = loop {
        a.publish(note(ready));
        let got = tokio::time::timeout(Duration::from_millis(500), on_b.recv()).await;
        if let Ok(Ok(e)) = got
            && let crate::bus::Elsewhere::Event { seq, .. } = &*e
        {
            break *seq;
        }
        ready += 1;
        assert!(ready < 120, "host B never received host A's events");
    };
    // Drain what B had yet to receive of the readiness probes.
    let c = sql(&url).await;
    // (Read with plain SQL: a listener opened here would be counted below
    // until its connection's backend has gone.)
    let probes: i64 = c
        .query_one("SELECT COALESCE(MAX(seq), 0) FROM relay_outbox", &[])
        .await
        .unwrap()
        .get(0);
    let mut last = first;
    while last < probes {
        last = next(&mut on_b).await.0;
    }
    // Cut every listening connection of this database (B's among them).
    let cut = c
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
            &[&LISTENER_NAME],
        )
        .await
        .unwrap();
    assert_eq!(cut.len(), 2, "one listener per host");
    const MISSED: usize = 20;
    for n in 0..MISSED {
        a.publish(note(1000 + n));
    }
    let mut got = Vec::new();
    for _ in 0..MISSED {
        let (seq, event) = next(&mut on_b).await;
        assert!(seq > last, "relay numbers go up");
        last = seq;
        got.push(event);
    }
    assert_eq!(got, (0..MISSED).map(|n| note(1000 + n)).collect::<Vec<_>>());
    // The rows were committed before B's new listening connection started:
    // B read them from the table, not from a notification.
    let missed_before_reconnect: bool = c
        .query_one(
            "SELECT (SELECT max(at) FROM relay_outbox) < \
               (SELECT (extract(epoch from min(backend_start)) * 1000)::bigint \
                  FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database())",
            &[&LISTENER_NAME],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        missed_before_reconnect,
        "the events were appended while B's listener was down"
    );
    // A never hears its own events back.
    assert!(matches!(
        on_a.try_recv(),
        Err(broadcast::error::TryRecvError::Empty)
    ));
}

/// A runner paused with events not yet appended appends them after the host
/// that took its session over appended newer ones: readers drop them (their
/// lease epoch is lower than one already seen for the session), and keep
/// events of other sessions and events of no epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_runner_s_late_events_are_dropped_by_every_reader() {
    let store = PgStore::open(&warden_pg_harness::database()).await.unwrap();
    let outbox = store.outbox().unwrap();
    let at = |session: &str, n: usize, epoch: Option<i64>| {
        let said = Event::SessionWarning {
            session_id: SessionId(session.into()),
            message: n.to_string(),
        };
        Item::event(session, &said, epoch)
    };
    // The new runner (epoch 2) first, then the old one's late rows (epoch 1).
    outbox
        .append(
            "host-c",
            &[at("ses_a", 1, Some(2)), at("ses_b", 2, Some(1))],
        )
        .await
        .unwrap();
    outbox
        .append(
            "host-b",
            &[
                at("ses_a", 3, Some(1)),
                at("ses_a", 4, None),
                at("ses_b", 5, Some(1)),
            ],
        )
        .await
        .unwrap();
    outbox
        .append("host-c", &[at("ses_a", 6, Some(2))])
        .await
        .unwrap();

    let bus = crate::bus::Bus::new();
    let mut seen = bus.subscribe();
    let mut listener = outbox.listen().await.unwrap();
    let (mut last, mut epochs) = (Some(0), Epochs::default());
    catch_up(
        listener.as_mut(),
        "host-reader",
        &bus,
        &mut last,
        &mut epochs,
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while let Ok(e) = seen.try_recv() {
        if let Event::SessionWarning { message, .. } = &*e {
            got.push(message.clone());
        }
    }
    assert_eq!(
        got,
        ["1", "2", "4", "5", "6"],
        "the late epoch-1 row of ses_a is dropped"
    );
    // A client resuming from the outbox sees the same.
    let replayed: Vec<String> = store
        .replay(0, Some(&SessionId("ses_a".into())))
        .await
        .unwrap()
        .unwrap()
        .events
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::SessionWarning { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(replayed, ["1", "4", "6"]);
}
