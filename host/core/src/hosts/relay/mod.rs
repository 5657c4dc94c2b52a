//! Events across hosts: the relay between the hosts sharing one ledger,
//! through the ledger's [`Outbox`] (PostgreSQL's `relay_outbox`). Only
//! this module carries anything between hosts: events, relayed answers
//! and [`Notice`]s; the bus hands it what to send and takes what arrives,
//! and the ledger keeps the rows.
//!
//! **Out.** Every event a host publishes on its bus (see `bus/`) is handed
//! to one writer task per host, which appends it to the outbox with the
//! host's origin id, a batch per transaction (whatever queued up while the
//! previous batch was written, at most [`BATCH`]). The outbox numbers rows
//! in commit order, and within one host the writer is one task appending
//! in publish order; a session runs on one host at a time, so a session's
//! events keep their order.
//!
//! **In.** One listening connection per host is woken by every append (and,
//! as a backstop, every [`BACKSTOP`]) and reads the rows past the last one
//! it read, in order: those of other origins it publishes with
//! `Bus::publish_relayed` (so they are not relayed again) and delivers
//! relayed answers to the question service; this host's own rows it hands
//! back with their numbers (`Bus::publish_numbered`), so a client stream
//! can read every host's events in one order and resume from a number.
//! When the connection drops it reconnects (backing off to 2 s) and reads
//! on from where it was: a host that missed wake-ups catches up from the
//! table. A host starts reading at the newest row there when it starts:
//! history before that is in the ledger itself.
//!
//! **Streamed text.** Every streamed delta is an event. The writer relays
//! each (a client on another host sees text stream as it does on this one),
//! but merges consecutive deltas of one part that queued up while the
//! previous batch was written into one event (the part as it is after them
//! and their text joined), so a host writing slower than a model streams
//! falls behind by batches, not by rows.
//!
//! **A stale runner's late events are dropped.** Each event carries the
//! lease epoch its host held the session at (if it held it); readers keep
//! the highest epoch seen per session ([`Epochs`]) and drop events of a
//! lower one, so a client never sees a session go back to a state its new
//! runner already moved it past.
//!
//! **Bounded.** Every [`PRUNE_EVERY`] rows a writer prunes the outbox to
//! what it keeps (the newest 100 000 events of all hosts on PostgreSQL). A
//! reader further behind than that misses the rest, which the ledger's
//! REST reads still show.
//!
//! A batch the writer cannot append (the database is unreachable) is tried
//! three times and then dropped with a warning in the log: events are
//! notices of changes the ledger has recorded, never the record itself.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use warden_ledger::outbox::{Epochs, Item, Listener, Outbox, Row};
use warden_protocol::Event;

use super::Notice;
use crate::bus::{Bus, Outgoing, RelayedAnswer};
use crate::ledger::{LedgerError, id};

/// Most events appended in one transaction.
pub const BATCH: usize = 512;
/// Rows a writer appends between two prunings.
const PRUNE_EVERY: usize = 1000;
/// Rows read per query when catching up.
const PAGE: i64 = 1000;
/// A listener reads the outbox at least this often, woken or not.
const BACKSTOP: Duration = Duration::from_secs(5);

/// Connect `bus` to the other hosts through `outbox`: spawn this host's
/// writer and listener on the current runtime. They live as long as the
/// runtime does.
pub fn start(outbox: Arc<dyn Outbox>, bus: &Bus) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "the ledger at {} was opened outside a runtime: no events are relayed",
            outbox.name()
        );
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
        outbox.clone(),
        origin.clone(),
        outgoing,
        listening,
    ));
    runtime.spawn(listen_loop(outbox, origin, bus.clone(), ready));
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
            Outgoing::Event(e, epoch) => Some(Item::event(e.session_id().as_str(), &e, epoch)),
            Outgoing::Answer(a) => Some(Item {
                session: a.session_id.to_string(),
                kind: "answer",
                body: serde_json::to_string(&a).ok()?,
                epoch: None,
            }),
            Outgoing::Notice(n) => Some(Item {
                session: n.session_id().to_string(),
                kind: "notice",
                body: serde_json::to_string(&n).ok()?,
                epoch: None,
            }),
            Outgoing::Flush(_) => None,
        })
        .collect()
}

async fn write_loop(
    outbox: Arc<dyn Outbox>,
    origin: String,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    listening: tokio::sync::oneshot::Receiver<()>,
) {
    let _ = listening.await;
    let name = outbox.name().to_string();
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
            match outbox.append(&origin, &items).await {
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
            if let Err(e) = outbox.prune().await {
                tracing::warn!("cannot prune the event relay of {name}: {e}");
            }
        }
    }
}

async fn listen_loop(
    outbox: Arc<dyn Outbox>,
    origin: String,
    bus: Bus,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut last = None;
    let mut epochs = Epochs::default();
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = listen(
            outbox.as_ref(),
            &origin,
            &bus,
            (&mut last, &mut epochs),
            &mut backoff,
            &mut ready,
        )
        .await;
        if let Err(e) = result {
            tracing::warn!(
                "the event relay lost its connection to {} ({e}); reconnecting",
                outbox.name()
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Listen on one connection until it drops, publishing what other hosts
/// append. `last`: the last row read (kept across reconnections).
async fn listen(
    outbox: &dyn Outbox,
    origin: &str,
    bus: &Bus,
    (last, epochs): (&mut Option<i64>, &mut Epochs),
    backoff: &mut Duration,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), LedgerError> {
    let mut listener = outbox.listen().await?;
    if last.is_none() {
        *last = Some(listener.newest().await?);
    }
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    *backoff = Duration::from_millis(100);
    loop {
        catch_up(listener.as_mut(), origin, bus, last, epochs).await?;
        tokio::select! {
            appended = listener.appended() => if !appended { return Ok(()) },
            _ = tokio::time::sleep(BACKSTOP) => {}
        }
    }
}

/// Publish every row past `last` of another origin, in order.
async fn catch_up(
    listener: &mut dyn Listener,
    origin: &str,
    bus: &Bus,
    last: &mut Option<i64>,
    epochs: &mut Epochs,
) -> Result<(), LedgerError> {
    loop {
        let rows = listener.read_after(last.unwrap_or(0), PAGE).await?;
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
        "notice" => match serde_json::from_str::<Notice>(&row.body) {
            Ok(notice) => bus.deliver_notice(notice),
            Err(e) => tracing::warn!("relayed notice {} is unreadable ({e}); skipped", row.seq),
        },
        other => tracing::warn!(
            "relayed row {} is of unknown kind {other}; skipped",
            row.seq
        ),
    }
}

#[cfg(test)]
mod tests;
