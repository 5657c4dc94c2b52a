//! Connections, as a server on a public address needs them: every one is
//! bounded in time and count before a byte of it is authenticated.
//!
//! Long: one mechanic, a connection's life from accept to close, whose bounds are checked against each other.
//!
//! - **Timeouts.** A connection waiting for a request (the first, or the
//!   next one on a kept-alive connection) is closed after
//!   [`Limits::idle_timeout`]; one whose request headers have begun must
//!   finish them within [`Limits::header_timeout`], and no header block may
//!   be larger than [`Limits::max_header_bytes`] (431). A request's body
//!   must have arrived in full within [`Limits::body_timeout`] of its
//!   headers, or the request fails (408) and the connection closes. A
//!   request being answered (a prompt waiting for the model, an event
//!   stream) is never timed out here.
//! - **Caps.** At most [`Limits::max_connections`] connections at once, and
//!   [`Limits::max_connections_per_peer`] from one IP address. A
//!   connection over a cap first pushes out the connection (of that peer,
//!   for the peer's cap) that has waited longest without a request under
//!   way: a half-sent request or an idle keep-alive, exactly what a slow or
//!   hostile client holds. Only when every connection is answering a
//!   request is the new one refused: `503 Service Unavailable` with
//!   `Retry-After`, and a warning in the log (one line per
//!   [`LOG_EVERY`], counting the refusals since the last).
//!
//! The caller raises the process's file limit first (see `warden serve`),
//! and keeps `max_connections` below it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::Request;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tower::ServiceExt as _;

/// How often a refusal (or a push-out) is logged at most; the line counts
/// the ones since the last.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// How long a stopping server waits for its connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The most refusals being written at once; past that, a connection over
/// the cap is closed without an answer.
const MAX_REFUSING: usize = 64;

/// The bounds every connection is held to.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 8192,
            max_connections_per_peer: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
        }
    }
}

/// What a connection is doing, as the caps and the timeouts see it.
const IDLE: u8 = 0;
const READING: u8 = 1;
const BUSY: u8 = 2;

/// One connection's phase and since when (ms since the server started).
struct Phase {
    phase: AtomicU8,
    since: AtomicU64,
    in_flight: AtomicUsize,
    epoch: Instant,
}

impl Phase {
    fn new(epoch: Instant) -> Phase {
        let p = Phase {
            phase: AtomicU8::new(IDLE),
            since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            epoch,
        };
        p.set(IDLE);
        p
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn set(&self, phase: u8) {
        self.since.store(self.now(), Ordering::Relaxed);
        self.phase.store(phase, Ordering::Release);
    }

    /// Bytes arrived: a request begins, if none was under way.
    fn bytes_arrived(&self) {
        if self.phase.load(Ordering::Acquire) == IDLE {
            self.set(READING);
        }
    }

    fn request_began(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.set(BUSY);
    }

    fn request_ended(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.set(IDLE);
        }
    }

    /// How long it has waited without a request under way; `None` while
    /// one is.
    fn waiting(&self) -> Option<(u8, Duration)> {
        let phase = self.phase.load(Ordering::Acquire);
        (phase != BUSY).then(|| {
            let since = self.since.load(Ordering::Relaxed);
            (
                phase,
                Duration::from_millis(self.now().saturating_sub(since)),
            )
        })
    }
}

struct Entry {
    peer: IpAddr,
    phase: Arc<Phase>,
    push_out: Arc<Notify>,
}

#[derive(Default)]
struct Table {
    conns: HashMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
    next: u64,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&entry.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// The connection (of `peer`, when given) that has waited longest with
    /// no request under way.
    fn longest_waiting(&self, peer: Option<IpAddr>) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, e)| peer.is_none_or(|p| e.peer == p))
            .filter_map(|(id, e)| e.phase.waiting().map(|(_, waited)| (*id, waited)))
            .max_by_key(|(_, waited)| *waited)
            .map(|(id, _)| id)
    }
}

/// Why a connection was refused or pushed out, for the log.
#[derive(Clone, Copy)]
enum Over {
    Total,
    Peer,
}

/// Logs at most one line per [`LOG_EVERY`], counting what it held back.
#[derive(Default)]
struct Throttled {
    last: Mutex<Option<Instant>>,
    held: AtomicUsize,
}

impl Throttled {
    /// `Some(n)`: log now, `n` held back since the last line.
    fn due(&self) -> Option<usize> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(t) if t.elapsed() < LOG_EVERY => {
                self.held.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(Instant::now());
                Some(self.held.swap(0, Ordering::Relaxed))
            }
        }
    }
}

struct Server {
    limits: Limits,
    table: Mutex<Table>,
    epoch: Instant,
    refusing: AtomicUsize,
    refusals: Throttled,
    push_outs: Throttled,
    accept_errors: Throttled,
}

/// A connection's place in the table, given back when it ends.
struct Admitted {
    id: u64,
    phase: Arc<Phase>,
    push_out: Arc<Notify>,
    server: Arc<Server>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.server
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(self.id);
    }
}

impl Server {
    /// Make room for a connection from `peer`, or say which cap is full.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Over> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let checks = [
            (
                table.per_peer.get(&peer).copied().unwrap_or(0),
                self.limits.max_connections_per_peer,
                Some(peer),
                Over::Peer,
            ),
            (
                table.conns.len(),
                self.limits.max_connections,
                None,
                Over::Total,
            ),
        ];
        for (count, cap, scope, over) in checks {
            if count < cap {
                continue;
            }
            let Some(victim) = table.longest_waiting(scope) else {
                return Err(over);
            };
            if let Some(entry) = table.remove(victim) {
                entry.push_out.notify_one();
                self.log_push_out(peer, entry.peer, over);
            }
        }
        let id = table.next;
        table.next += 1;
        let phase = Arc::new(Phase::new(self.epoch));
        let push_out = Arc::new(Notify::new());
        table.conns.insert(
            id,
            Entry {
                peer,
                phase: phase.clone(),
                push_out: push_out.clone(),
            },
        );
        *table.per_peer.entry(peer).or_default() += 1;
        Ok(Admitted {
            id,
            phase,
            push_out,
            server: self.clone(),
        })
    }

    fn cap_text(&self, over: Over) -> String {
        match over {
            Over::Total => format!(
                "{} connections are open (server.max_connections)",
                self.limits.max_connections
            ),
            Over::Peer => format!(
                "{} connections are open from that address (server.max_connections_per_peer)",
                self.limits.max_connections_per_peer
            ),
        }
    }

    fn log_push_out(&self, newcomer: IpAddr, victim: IpAddr, over: Over) {
        if let Some(held) = self.push_outs.due() {
            tracing::warn!(
                "closed a connection from {victim} that had no request under way, to make room for one from {newcomer}: {}{}",
                self.cap_text(over),
                more(held, "connections closed so")
            );
        }
    }

    /// Answer 503 and close, without holding the accept loop.
    fn refuse(self: &Arc<Self>, tcp: TcpStream, peer: SocketAddr, over: Over) {
        if let Some(held) = self.refusals.due() {
            tracing::warn!(
                "refused a connection from {peer} with 503: {}, each answering a request{}",
                self.cap_text(over),
                more(held, "refused")
            );
        }
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            return; // dropped: closed with no answer
        }
        let server = self.clone();
        let message = format!(
            "the server is at its connection limit ({}); try again shortly",
            self.cap_text(over)
        );
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), refusal(tcp, &message)).await;
            server.refusing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

fn more(n: usize, what: &str) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more {what} since the last such line)")
    }
}

/// Write the 503, then read what the client sent until it closes, so the
/// close does not reset the connection before the client read the answer.
async fn refusal(mut tcp: TcpStream, message: &str) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = serde_json::json!({"error": {"code": "overloaded", "message": message}}).to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if tcp.write_all(head.as_bytes()).await.is_err()
        || tcp.write_all(body.as_bytes()).await.is_err()
    {
        return;
    }
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut read = 0usize;
    while read < 64 * 1024 {
        match tcp.read(&mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
}

/// Serve `router` on `listener` until `shutdown` completes, then let the
/// open connections finish (for [`SHUTDOWN_GRACE`] at most).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let server = Arc::new(Server {
        limits,
        table: Mutex::new(Table::default()),
        epoch: Instant::now(),
        refusing: AtomicUsize::new(0),
        refusals: Throttled::default(),
        push_outs: Throttled::default(),
        accept_errors: Throttled::default(),
    });
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors (or a connection reset before it
                // was taken): wait a little instead of spinning.
                if let Some(held) = server.accept_errors.due() {
                    tracing::warn!(
                        "cannot accept a connection: {e}{}",
                        more(held, "accept errors")
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match server.admit(peer.ip()) {
            Ok(admitted) => {
                tokio::spawn(connection(tcp, admitted, router.clone(), stopping.clone()));
            }
            Err(over) => server.refuse(tcp, peer, over),
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while Instant::now() < deadline {
        if server
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .conns
            .is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The size of a request's head as it came: its request line and headers.
fn head_bytes<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    line + headers
}

/// The answer to a head larger than `server.max_header_bytes`, as hyper
/// gives it when its buffer fills first.
fn head_too_large(limit: usize) -> axum::response::Response {
    let body = serde_json::json!({"error": {
        "code": "headers_too_large",
        "message": format!("the request's headers are over {limit} bytes (server.max_header_bytes); send smaller headers"),
    }});
    let mut response = axum::response::IntoResponse::into_response(axum::Json(body));
    *response.status_mut() = axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// One connection: served by hyper, closed when it waits too long, when it
/// is pushed out, or when the server stops (after its request).
async fn connection(
    tcp: TcpStream,
    admitted: Admitted,
    router: Router,
    mut stopping: watch::Receiver<bool>,
) {
    // An event stream writes small frames one after another, and Nagle's
    // algorithm would hold each behind the client's delayed ACK (up to
    // 40 ms on Linux), long enough for a prompt's answer to overtake its
    // own events on the other connection.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
    }
    let limits = admitted.server.limits.clone();
    let phase = admitted.phase.clone();
    let io = TokioIo::new(Watched {
        inner: tcp,
        phase: phase.clone(),
    });
    let body_timeout = limits.body_timeout;
    let max_header_bytes = limits.max_header_bytes;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let phase = phase.clone();
        phase.request_began();
        let ended = RequestEnded(phase);
        // hyper's cap is on its read buffer, which a head that arrived
        // whole in one read can overshoot: the head is measured again here.
        let too_large = head_bytes(&req) > max_header_bytes;
        let req = req.map(|body| Body::new(Deadline::new(body, body_timeout)));
        let router = router.clone();
        async move {
            let response = match too_large {
                true => head_too_large(max_header_bytes),
                false => match router.oneshot(req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                },
            };
            // The request is under way until its answer's body is done.
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _ = &ended;
                    frame
                }))
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // The timeouts are this module's (below): hyper's own would also
        // count a kept-alive connection's idle time as header time.
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let check = match admitted.phase.waiting() {
            Some((READING, waited)) => limits.header_timeout.saturating_sub(waited),
            Some((_, waited)) => limits.idle_timeout.saturating_sub(waited),
            None => limits.header_timeout.min(limits.idle_timeout),
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "a connection ended with an error");
                }
                break;
            }
            _ = admitted.push_out.notified() => break,
            changed = stopping.changed(), if !draining => {
                if changed.is_err() || *stopping.borrow() {
                    conn.as_mut().graceful_shutdown();
                    draining = true;
                }
            }
            _ = tokio::time::sleep(check) => {
                let expired = match admitted.phase.waiting() {
                    Some((READING, waited)) => waited >= limits.header_timeout,
                    Some((_, waited)) => waited >= limits.idle_timeout,
                    None => false,
                };
                if expired {
                    tracing::debug!("closed a connection that sent no (complete) request in time");
                    break;
                }
            }
        }
    }
}

/// Ends a request's busy time when dropped (with its answer's body).
struct RequestEnded(Arc<Phase>);

impl Drop for RequestEnded {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The TCP stream, noting when a request's first bytes arrive.
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.phase.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request body that must arrive in full within a time of its headers.
struct Deadline {
    inner: Incoming,
    timer: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn new(inner: Incoming, timeout: Duration) -> Deadline {
        Deadline {
            inner,
            timer: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

/// The error a late body ends with (the handler answers 408 for it).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} of its headers (server.body_timeout_ms)")]
pub struct BodyTimedOut(pub Duration);

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // What has arrived is taken before the clock is looked at.
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => return Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {}
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// Whether a body error is a [`BodyTimedOut`] (somewhere in its sources).
pub(crate) fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimedOut>() {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_measured_as_it_came_and_refused_over_the_cap() {
        let req = Request::builder()
            .method("GET")
            .uri("/health")
            .header("host", "x")
            .header("x-big", "a".repeat(70 * 1024))
            .body(())
            .unwrap();
        let bytes = head_bytes(&req);
        assert!((70 * 1024..70 * 1024 + 64).contains(&bytes), "{bytes}");
        let refused = head_too_large(64 * 1024);
        assert_eq!(refused.status(), 431);
        assert_eq!(refused.headers()["connection"], "close");
    }

    fn table_with(peers: &[(IpAddr, u8, u64)]) -> (Table, Instant) {
        let epoch = Instant::now() - Duration::from_secs(100);
        let mut t = Table::default();
        for (i, (peer, phase, since)) in peers.iter().enumerate() {
            let p = Arc::new(Phase::new(epoch));
            p.phase.store(*phase, Ordering::Relaxed);
            p.since.store(*since, Ordering::Relaxed);
            t.conns.insert(
                i as u64,
                Entry {
                    peer: *peer,
                    phase: p,
                    push_out: Arc::new(Notify::new()),
                },
            );
            *t.per_peer.entry(*peer).or_default() += 1;
        }
        t.next = peers.len() as u64;
        (t, epoch)
    }

    #[test]
    fn the_connection_pushed_out_is_the_one_waiting_longest_never_a_busy_one() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let (t, _) = table_with(&[
            (a, BUSY, 0),         // oldest, but answering a request
            (a, READING, 50_000), // half-sent request since 50 s
            (b, IDLE, 10_000),    // idle since 90 s
            (a, IDLE, 90_000),
        ]);
        assert_eq!(t.longest_waiting(None), Some(2));
        assert_eq!(t.longest_waiting(Some(a)), Some(1));
        let (busy, _) = table_with(&[(a, BUSY, 0), (a, BUSY, 0)]);
        assert_eq!(busy.longest_waiting(Some(a)), None);
    }

    #[test]
    fn removing_a_connection_gives_back_its_peer_s_count() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let (mut t, _) = table_with(&[(a, IDLE, 0), (a, IDLE, 0)]);
        t.remove(0);
        assert_eq!(t.per_peer[&a], 1);
        t.remove(1);
        assert!(!t.per_peer.contains_key(&a));
        assert!(t.remove(1).is_none(), "a second removal is a no-op");
    }

    #[test]
    fn a_throttled_log_says_how_many_it_held_back() {
        let t = Throttled::default();
        assert_eq!(t.due(), Some(0));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        *t.last.lock().unwrap() = Some(Instant::now() - LOG_EVERY);
        assert_eq!(t.due(), Some(2));
    }
}
