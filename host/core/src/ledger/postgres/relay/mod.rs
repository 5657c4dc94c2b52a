//! The event relay between hosts sharing one PostgreSQL ledger.
//!
//! **Out.** Every event a host publishes on its bus (see `bus.rs`) is handed
//! to one writer task per host, which appends it to `relay_outbox` with the
//! host's origin id, a batch per transaction (whatever queued up while the
//! previous batch was written, at most [`BATCH`]), and `NOTIFY`s
//! [`CHANNEL`] in the same transaction (delivered at its commit).
//!
//! **Order is commit order.** `seq` is a `BIGSERIAL`, assigned at insert; two
//! transactions inserting at once could commit in the other order, and a
//! reader that has read up to 12 would then skip 11 when it commits later.
//! So every append first takes a transaction-scoped advisory lock
//! ([`RELAY_LOCK`]) and holds it until its commit: numbers are taken and
//! committed one transaction at a time, so when a reader sees `seq = n`
//! every smaller number has committed or was rolled back for good. Within
//! one host the writer is one task, appending in publish order, and a session
//! runs on one host at a time, so a session's events keep their order.
//! (`tests.rs` here has the test with concurrent writers.)
//!
//! **In.** One dedicated connection per host (not the pool's) `LISTEN`s on
//! [`CHANNEL`]; each notification (and, as a backstop, every
//! [`BACKSTOP`]) makes it read the rows past the last one it read, in order,
//! and publish those of other origins with [`Bus::publish_relayed`] (so they
//! are not relayed again) and deliver relayed answers to the question
//! service; this host's own rows it hands back with their numbers
//! ([`Bus::publish_numbered`]), so a client stream can read every host's
//! events in one order and resume from a number ([`replay`]). When the connection drops it reconnects (backing off to 2 s) and
//! reads on from where it was: a host that missed notifications catches up
//! from the table. A host starts reading at the newest row there when it
//! starts: history before that is in the ledger itself.
//!
//! **Streamed text.** Every streamed delta is an event. The writer relays
//! each (a client on another host sees text stream as it does on this one),
//! but merges consecutive deltas of one part that queued up while the
//! previous batch was written into one event (the part as it is after them
//! and their text joined), so a host writing slower than a model streams
//! falls behind by batches, not by rows.
//!
//! **A stale runner's late events are dropped.** A host paused (SIGSTOP)
//! with events not yet appended appends them when it resumes, after the
//! host that took its sessions over appended newer ones. Each event carries
//! the lease epoch its host held the session at (if it held it); readers
//! keep the highest epoch seen per session and drop events of a lower one,
//! so a client never sees a session go back to a state its new runner
//! already moved it past.
//!
//! **Bounded.** Every [`PRUNE_EVERY`] rows a writer deletes the rows more
//! than [`KEEP`] behind the newest: the outbox holds the last 100 000
//! events of all hosts. A reader further behind than that (a listener down
//! that long) misses the rest, which the ledger's REST reads still show.
//!
//! A batch the writer cannot append (the database is unreachable) is tried
//! three times and then dropped with a warning in the log: events are
//! notices of changes the ledger has recorded, never the record itself.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};
use warden_protocol::Event;

use super::{PgClient, Result};
use crate::bus::{Bus, Outgoing, RelayedAnswer};
use crate::ledger::id;

/// The notification channel every host listens on.
pub const CHANNEL: &str = "warden_relay";
/// The advisory lock appends take until their commit (any fixed number).
const RELAY_LOCK: i64 = 0x0077_6172_6465_6e72; // "wardenr"
/// How many rows behind the newest the outbox keeps.
pub const KEEP: i64 = 100_000;
/// Rows a writer appends between two prunings.
const PRUNE_EVERY: usize = 1000;
/// Most events appended in one transaction.
pub const BATCH: usize = 512;
/// Rows read per query when catching up.
const PAGE: i64 = 1000;
/// A listener reads the outbox at least this often, notified or not.
const BACKSTOP: Duration = Duration::from_secs(5);
/// What the listening connection calls itself (`pg_stat_activity`).
pub const LISTENER_NAME: &str = "warden relay listener";

/// One row to append: the session, what it is (`event` or `answer`) and its
/// JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub session: String,
    pub kind: &'static str,
    pub body: String,
    /// The lease epoch the session was held at by the host appending it.
    pub epoch: Option<i64>,
}

/// One row of the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seq: i64,
    pub origin: String,
    pub session: String,
    pub kind: String,
    pub body: String,
    pub epoch: Option<i64>,
}

/// The highest lease epoch seen per session, to drop events of a runner
/// that has lost its session since (see the module's notes).
#[derive(Debug, Default)]
pub struct Epochs(std::collections::HashMap<String, i64>);

impl Epochs {
    /// Whether an event of `session` at `epoch` is current (and remember it).
    pub fn current(&mut self, session: &str, epoch: Option<i64>) -> bool {
        let Some(epoch) = epoch else {
            return true;
        };
        match self.0.get_mut(session) {
            Some(seen) if *seen > epoch => false,
            Some(seen) => {
                *seen = epoch;
                true
            }
            None => {
                self.0.insert(session.to_string(), epoch);
                true
            }
        }
    }
}

/// Connect `bus` to the other hosts: spawn this host's writer and listener
/// on the current runtime. They live as long as the runtime does.
pub(super) fn start(pool: Pool, config: tokio_postgres::Config, name: String, bus: &Bus) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("the ledger at {name} was opened outside a runtime: no events are relayed");
        return;
    };
    let Some(outgoing) = bus.connect_relay() else {
        return;
    };
    let origin = id::ascending("host");
    // The writer appends nothing before the listener has chosen where it
    // starts reading, so this host's own events all come back numbered.
    let (ready, listening) = tokio::sync::oneshot::channel();
    runtime.spawn(write_loop(
        pool,
        origin.clone(),
        outgoing,
        name.clone(),
        listening,
    ));
    runtime.spawn(listen_loop(config, origin, bus.clone(), name, ready));
}

/// Merge consecutive deltas of one part into one event, and encode.
pub fn encode(batch: Vec<Outgoing>) -> Vec<Item> {
    let mut merged: Vec<Outgoing> = Vec::with_capacity(batch.len());
    for next in batch {
        if let (Some(Outgoing::Event(prev, prev_epoch)), Outgoing::Event(new, epoch)) =
            (merged.last_mut(), &next)
            && let (
                Event::PartUpdated {
                    part: a,
                    delta: Some(da),
                },
                Event::PartUpdated {
                    part: b,
                    delta: Some(db),
                },
            ) = (&**prev, &**new)
            && a.id == b.id
            && a.session_id == b.session_id
            && prev_epoch == epoch
        {
            *prev = Arc::new(Event::PartUpdated {
                part: b.clone(),
                delta: Some(format!("{da}{db}")),
            });
            continue;
        }
        merged.push(next);
    }
    merged
        .into_iter()
        .filter_map(|o| match o {
            Outgoing::Event(e, epoch) => Some(Item {
                session: e.session_id().to_string(),
                kind: "event",
                body: serde_json::to_string(&*e).ok()?,
                epoch,
            }),
            Outgoing::Answer(a) => Some(Item {
                session: a.session_id.to_string(),
                kind: "answer",
                body: serde_json::to_string(&a).ok()?,
                epoch: None,
            }),
            Outgoing::Flush(_) => None,
        })
        .collect()
}

const INSERT: &str = "INSERT INTO relay_outbox (origin, session_id, kind, body, epoch, at) \
     SELECT $1, s, k, b, e, (extract(epoch from clock_timestamp()) * 1000)::bigint \
     FROM unnest($2::text[], $3::text[], $4::text[], $5::int8[]) WITH ORDINALITY AS t(s, k, b, e, n) ORDER BY n";

/// Append `items` from `origin` in one transaction, in order, under the
/// relay's lock, and notify the listeners at its commit.
pub async fn append(client: &mut PgClient, origin: &str, items: &[Item]) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let sessions: Vec<&str> = items.iter().map(|i| i.session.as_str()).collect();
    let kinds: Vec<&str> = items.iter().map(|i| i.kind).collect();
    let bodies: Vec<&str> = items.iter().map(|i| i.body.as_str()).collect();
    let epochs: Vec<Option<i64>> = items.iter().map(|i| i.epoch).collect();
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&RELAY_LOCK])
        .await?;
    tx.execute(
        &tx.prepare_cached(INSERT).await?,
        &[&origin, &sessions, &kinds, &bodies, &epochs],
    )
    .await?;
    tx.execute("SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
    tx.commit().await?;
    Ok(())
}

/// Delete the rows more than [`KEEP`] behind the newest.
pub async fn prune(client: &PgClient) -> Result<u64> {
    Ok(client
        .execute(
            "DELETE FROM relay_outbox WHERE seq <= (SELECT max(seq) FROM relay_outbox) - $1",
            &[&KEEP],
        )
        .await?)
}

/// The rows past `after`, in order, at most `limit`.
pub async fn read_after(
    client: &tokio_postgres::Client,
    after: i64,
    limit: i64,
) -> Result<Vec<Row>> {
    Ok(client
        .query(
            "SELECT seq, origin, session_id, kind, body, epoch FROM relay_outbox WHERE seq > $1 ORDER BY seq LIMIT $2",
            &[&after, &limit],
        )
        .await?
        .iter()
        .map(|r| Row {
            seq: r.get(0),
            origin: r.get(1),
            session: r.get(2),
            kind: r.get(3),
            body: r.get(4),
            epoch: r.get(5),
        })
        .collect())
}

/// The events past `after` (of one session, or all), in order, at most
/// [`PAGE`], and the oldest number the outbox still keeps.
pub async fn replay(
    client: &tokio_postgres::Client,
    after: i64,
    session: Option<&str>,
) -> Result<crate::ledger::store::Replay> {
    let oldest: i64 = client
        .query_one("SELECT coalesce(min(seq), 0) FROM relay_outbox", &[])
        .await?
        .get(0);
    let rows = client
        .query(
            "SELECT seq, body, session_id, epoch FROM relay_outbox WHERE seq > $1 AND kind = 'event' \
             AND ($2::text IS NULL OR session_id = $2) ORDER BY seq LIMIT $3",
            &[&after, &session, &PAGE],
        )
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    let mut epochs = Epochs::default();
    for r in rows {
        let seq: i64 = r.get(0);
        let body: String = r.get(1);
        if !epochs.current(r.get(2), r.get(3)) {
            continue;
        }
        match serde_json::from_str::<Event>(&body) {
            Ok(e) => events.push((seq, e)),
            Err(e) => tracing::warn!("relayed event {seq} is unreadable ({e}); skipped"),
        }
    }
    Ok(crate::ledger::store::Replay {
        oldest,
        events,
        more: false,
    }
    .with_more(PAGE))
}

/// The newest row's number (0 for none).
pub async fn newest(client: &tokio_postgres::Client) -> Result<i64> {
    Ok(client
        .query_one("SELECT coalesce(max(seq), 0) FROM relay_outbox", &[])
        .await?
        .get(0))
}

async fn write_loop(
    pool: Pool,
    origin: String,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    name: String,
    listening: tokio::sync::oneshot::Receiver<()>,
) {
    let _ = listening.await;
    let mut since_prune = 0;
    while let Some(first) = outgoing.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match outgoing.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (flushes, batch): (Vec<Outgoing>, Vec<Outgoing>) = batch
            .into_iter()
            .partition(|o| matches!(o, Outgoing::Flush(_)));
        let items = encode(batch);
        let mut tries = 0;
        loop {
            let result = match pool.get().await {
                Ok(mut client) => append(&mut client, &origin, &items).await,
                Err(e) => Err(crate::ledger::LedgerError::Storage(e.to_string())),
            };
            match result {
                Ok(()) => break,
                Err(e) if tries < 3 => {
                    tries += 1;
                    tracing::warn!("cannot relay events through {name} ({e}); trying again");
                    tokio::time::sleep(Duration::from_millis(200 * tries)).await;
                }
                Err(e) => {
                    tracing::warn!(
                        "dropped {} events other hosts will not see: cannot relay them through {name} ({e})",
                        items.len()
                    );
                    break;
                }
            }
        }
        // Appended (or given up on): whoever waits for this may go on.
        for flush in flushes {
            if let Outgoing::Flush(done) = flush {
                let _ = done.send(());
            }
        }
        since_prune += items.len();
        if since_prune >= PRUNE_EVERY {
            since_prune = 0;
            if let Ok(client) = pool.get().await
                && let Err(e) = prune(&client).await
            {
                tracing::warn!("cannot prune the event relay of {name}: {e}");
            }
        }
    }
}

async fn listen_loop(
    config: tokio_postgres::Config,
    origin: String,
    bus: Bus,
    name: String,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut last = None;
    let mut epochs = Epochs::default();
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        if let Err(e) = listen(
            &config,
            &origin,
            &bus,
            (&mut last, &mut epochs),
            &mut backoff,
            &mut ready,
        )
        .await
        {
            tracing::warn!("the event relay lost its connection to {name} ({e}); reconnecting");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Listen on one connection until it drops, publishing what other hosts
/// append. `last`: the last row read (kept across reconnections).
async fn listen(
    config: &tokio_postgres::Config,
    origin: &str,
    bus: &Bus,
    (last, epochs): (&mut Option<i64>, &mut Epochs),
    backoff: &mut Duration,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<()> {
    let mut config = config.clone();
    config.application_name(LISTENER_NAME);
    let (client, mut connection) = config.connect(NoTls).await?;
    let (wake_tx, mut wake) = mpsc::unbounded_channel::<()>();
    // Drives the connection and turns notifications into wake-ups; ends (and
    // so closes `wake`) when the connection does.
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    let _ = wake_tx.send(());
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    let result = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        if last.is_none() {
            *last = Some(newest(&client).await?);
        }
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        *backoff = Duration::from_millis(100);
        loop {
            catch_up(&client, origin, bus, last, epochs).await?;
            tokio::select! {
                woke = wake.recv() => if woke.is_none() { return Ok(()) },
                _ = tokio::time::sleep(BACKSTOP) => {}
            }
            while wake.try_recv().is_ok() {}
        }
    }
    .await;
    driver.abort();
    result
}

/// Publish every row past `last` of another origin, in order.
async fn catch_up(
    client: &tokio_postgres::Client,
    origin: &str,
    bus: &Bus,
    last: &mut Option<i64>,
    epochs: &mut Epochs,
) -> Result<()> {
    loop {
        let rows = read_after(client, last.unwrap_or(0), PAGE).await?;
        for row in &rows {
            *last = Some(row.seq);
            if row.kind == "event" && !epochs.current(&row.session, row.epoch) {
                // A runner's late event, after another took its session over.
                continue;
            }
            if row.origin != origin {
                deliver(bus, row);
            } else if row.kind == "event"
                && let Ok(event) = serde_json::from_str::<Event>(&row.body)
            {
                // This host's own, back in the relay's order: for the client
                // streams only (its own subscribers had it when published).
                bus.publish_numbered(row.seq, Arc::new(event));
            }
        }
        if (rows.len() as i64) < PAGE {
            return Ok(());
        }
    }
}

fn deliver(bus: &Bus, row: &Row) {
    match row.kind.as_str() {
        "event" => match serde_json::from_str::<Event>(&row.body) {
            Ok(event) => bus.publish_relayed(event, row.seq),
            Err(e) => tracing::warn!("relayed event {} is unreadable ({e}); skipped", row.seq),
        },
        "answer" => match serde_json::from_str::<RelayedAnswer>(&row.body) {
            Ok(answer) => bus.deliver_answer(answer),
            Err(e) => tracing::warn!("relayed answer {} is unreadable ({e}); skipped", row.seq),
        },
        other => tracing::warn!(
            "relayed row {} is of unknown kind {other}; skipped",
            row.seq
        ),
    }
}

#[cfg(test)]
mod tests;
