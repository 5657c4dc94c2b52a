//! The PostgreSQL outbox: `relay_outbox`, the rows the hosts sharing this
//! database relay their events through (the relay itself is the core's
//! `relay` module; see [`crate::outbox`]).
//!
//! **Order is commit order.** `seq` is a `BIGSERIAL`, assigned at insert; two
//! transactions inserting at once could commit in the other order, and a
//! reader that has read up to 12 would then skip 11 when it commits later.
//! So every append first takes a transaction-scoped advisory lock
//! ([`RELAY_LOCK`]) and holds it until its commit: numbers are taken and
//! committed one transaction at a time, so when a reader sees `seq = n`
//! every smaller number has committed or was rolled back for good. Each
//! append `NOTIFY`s [`CHANNEL`] in its transaction (delivered at its
//! commit). (`tests.rs` here has the test with concurrent writers.)
//!
//! **Listening.** A listener is a dedicated connection (not the pool's)
//! that `LISTEN`s on [`CHANNEL`], named [`LISTENER_NAME`] in
//! `pg_stat_activity`.
//!
//! **Bounded.** Pruning deletes the rows more than [`KEEP`] behind the
//! newest: the outbox holds the last 100 000 events of all hosts.

use async_trait::async_trait;
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};
use warden_protocol::Event;

use super::{PgClient, Result};
use crate::outbox::{Epochs, Item, Listener, Outbox, Row};

/// The notification channel every host listens on.
pub const CHANNEL: &str = "warden_relay";
/// The advisory lock appends take until their commit (any fixed number).
const RELAY_LOCK: i64 = 0x0077_6172_6465_6e72; // "wardenr"
/// How many rows behind the newest the outbox keeps.
pub const KEEP: i64 = 100_000;
/// Events replayed per read.
const PAGE: i64 = 1000;
/// What the listening connection calls itself (`pg_stat_activity`).
pub const LISTENER_NAME: &str = "warden relay listener";

const INSERT: &str = "INSERT INTO relay_outbox (origin, session_id, kind, body, epoch, at) \
     SELECT $1, s, k, b, e, (extract(epoch from clock_timestamp()) * 1000)::bigint \
     FROM unnest($2::text[], $3::text[], $4::text[], $5::int8[]) WITH ORDINALITY AS t(s, k, b, e, n) ORDER BY n";

/// The outbox of one PostgreSQL ledger.
pub(super) struct PgOutbox {
    pub pool: Pool,
    pub config: tokio_postgres::Config,
    pub name: String,
}

#[async_trait]
impl Outbox for PgOutbox {
    fn name(&self) -> &str {
        &self.name
    }

    async fn append(&self, origin: &str, items: &[Item]) -> Result<()> {
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| crate::LedgerError::Storage(e.to_string()))?;
        append(&mut client, origin, items).await
    }

    async fn prune(&self) -> Result<u64> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| crate::LedgerError::Storage(e.to_string()))?;
        prune(&client).await
    }

    async fn listen(&self) -> Result<Box<dyn Listener>> {
        let mut config = self.config.clone();
        config.application_name(LISTENER_NAME);
        let (client, mut connection) = config.connect(NoTls).await?;
        let (wake_tx, wake) = mpsc::unbounded_channel::<()>();
        // Drives the connection and turns notifications into wake-ups; ends
        // (and so closes `wake`) when the connection does.
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => {
                        let _ = wake_tx.send(());
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        Ok(Box::new(PgListener {
            client,
            wake,
            driver,
        }))
    }
}

/// One `LISTEN`ing connection.
struct PgListener {
    client: tokio_postgres::Client,
    wake: mpsc::UnboundedReceiver<()>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for PgListener {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

#[async_trait]
impl Listener for PgListener {
    async fn newest(&mut self) -> Result<i64> {
        newest(&self.client).await
    }

    async fn read_after(&mut self, after: i64, limit: i64) -> Result<Vec<Row>> {
        read_after(&self.client, after, limit).await
    }

    async fn appended(&mut self) -> bool {
        let woke = self.wake.recv().await.is_some();
        while self.wake.try_recv().is_ok() {}
        woke
    }
}

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
/// [`PAGE`], and the oldest number the outbox still keeps. A stale
/// runner's late events are dropped as the relay's readers drop them.
pub async fn replay(
    client: &tokio_postgres::Client,
    after: i64,
    session: Option<&str>,
) -> Result<crate::store::Replay> {
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
    Ok(crate::store::Replay {
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

#[cfg(test)]
mod tests;
