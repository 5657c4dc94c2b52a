use std::time::Instant;

use warden_protocol::SessionId;

use super::*;
use crate::postgres::PgStore;

fn warning(session: &str, n: usize) -> Item {
    let event = Event::SessionWarning {
        session_id: SessionId(session.into()),
        message: n.to_string(),
    };
    Item::event(session, &event, None)
}

/// The classic pitfall of tailing a table by a sequence: numbers are given
/// at insert and committed in another order, so a reader that has read up
/// to n skips n-1 when it commits later. Four writers append at once while a
/// reader tails the outbox by `seq`; with appends serialized until their
/// commit, what the reader saw is exactly the table, in order, and each
/// writer's rows are in the order it appended them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[expect(
    clippy::print_stderr,
    reason = "the per-event cost is reported, not asserted"
)]
async fn a_reader_tailing_the_outbox_never_skips_a_row_of_concurrent_writers() {
    const WRITERS: usize = 4;
    const EACH: usize = 150;
    let store = PgStore::open(&warden_pg_harness::database()).await.unwrap();
    let pool = store.pool.clone();
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut client = pool.get().await.unwrap();
                for n in 0..EACH {
                    append(
                        &mut client,
                        &format!("host{w}"),
                        &[warning(&format!("ses_{w}"), n)],
                    )
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    let reader = store.client().await.unwrap();
    let mut seen: Vec<Row> = Vec::new();
    let mut done = false;
    loop {
        let after = seen.last().map_or(0, |r| r.seq);
        let rows = read_after(&reader, after, 1000).await.unwrap();
        seen.extend(rows);
        if done {
            break;
        }
        // One more read after the last writer finished.
        done = writers.iter().all(|w| w.is_finished());
    }
    let elapsed = started.elapsed();
    for w in writers {
        w.await.unwrap();
    }
    let table = read_after(&reader, 0, 100_000).await.unwrap();
    assert_eq!(table.len(), WRITERS * EACH);
    assert_eq!(
        seen.iter().map(|r| r.seq).collect::<Vec<_>>(),
        table.iter().map(|r| r.seq).collect::<Vec<_>>(),
        "the tailing reader skipped rows that committed after a larger number"
    );
    for w in 0..WRITERS {
        let mine: Vec<String> = seen
            .iter()
            .filter(|r| r.origin == format!("host{w}"))
            .map(|r| match serde_json::from_str(&r.body).unwrap() {
                Event::SessionWarning { message, .. } => message,
                other => panic!("{other:?}"),
            })
            .collect();
        let expected: Vec<String> = (0..EACH).map(|n| n.to_string()).collect();
        assert_eq!(mine, expected, "writer {w}'s rows out of order");
    }
    // The cost of one relayed event appended alone (its own transaction),
    // for the report; not asserted.
    eprintln!(
        "relay: {} single-event appends by {WRITERS} writers in {elapsed:?}: {:?} per event",
        WRITERS * EACH,
        elapsed / (WRITERS * EACH) as u32
    );
}
