//! The bare PostgreSQL floor: what the database itself costs for one small
//! write, with a bare tokio-postgres client on one connection, no pool, no
//! fence, no warden code, on the same loopback cluster the ledger rows use.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio_postgres::NoTls;

/// One write's two forms, `n` samples each after `warm`.
pub struct Bare {
    /// `BEGIN`, `INSERT` (a prepared statement, the body a parameter),
    /// `COMMIT`: three round trips, as a client writes a transaction.
    pub three_trips: Vec<Duration>,
    /// The same three statements as one simple query: one round trip.
    pub one_trip: Vec<Duration>,
}

pub async fn transactions(url: &str, n: usize, warm: usize) -> Result<Bare> {
    let (mut client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    let driver = tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE bare (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        .await?;
    let insert = client
        .prepare("INSERT INTO bare (body) VALUES ($1)")
        .await?;
    let body = "x".repeat(1024);

    let mut three_trips = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t = Instant::now();
        let tx = client.transaction().await?;
        tx.execute(&insert, &[&body]).await?;
        tx.commit().await?;
        if i >= warm {
            three_trips.push(t.elapsed());
        }
    }

    // The body is `x`s: nothing to quote.
    let batch = format!("BEGIN; INSERT INTO bare (body) VALUES ('{body}'); COMMIT");
    let mut one_trip = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t = Instant::now();
        client.batch_execute(&batch).await?;
        if i >= warm {
            one_trip.push(t.elapsed());
        }
    }

    drop(client);
    // The connection's task ends when its client is gone.
    let _ = driver.await;
    Ok(Bare {
        three_trips,
        one_trip,
    })
}
