//! JSON-RPC 2.0 over newline-delimited JSON, as ACP carries it on stdio:
//! one message per line, no batches.
//!
//! [`read_message`] turns a line into a [`Incoming`] message or the error
//! to answer it with; [`Peer`] writes messages (one writer task, so lines
//! never interleave) and tracks the requests warden sends the client
//! (`session/request_permission`) until their answers come back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{Error, RequestId};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The longest line accepted: a prompt with embedded files fits; a line
/// past it is answered with a parse error and skipped.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The most bytes queued for a client that does not read: past it the
/// connection is ended (its runs aborted), never grown without bound.
pub const MAX_QUEUED: usize = 64 * 1024 * 1024;

/// JSON-RPC's error codes.
pub mod code {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// ACP's: the session named is not known.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
}

/// A message from the client.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
}

/// A line that is not a message: answered with `error` (to `id`, or `null`
/// when the line had none that could be read).
#[derive(Debug)]
pub struct Malformed {
    pub id: RequestId,
    pub error: Error,
}

fn malformed(id: RequestId, code: i32, message: impl Into<String>) -> Box<Malformed> {
    Box::new(Malformed {
        id,
        error: Error::new(code, message),
    })
}

/// Read what one line holds.
pub fn parse(line: &[u8]) -> Result<Incoming, Box<Malformed>> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        malformed(
            RequestId::Null,
            code::PARSE_ERROR,
            format!("the line is not JSON ({e}); send one JSON-RPC message per line"),
        )
    })?;
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "a batch (a JSON array); ACP sends one message per line, never batches"
        } else {
            "not a JSON-RPC message object"
        };
        return Err(malformed(RequestId::Null, code::INVALID_REQUEST, what));
    };
    let id = match obj.remove("id") {
        None => None,
        Some(v) => Some(serde_json::from_value::<RequestId>(v).map_err(|_| {
            malformed(
                RequestId::Null,
                code::INVALID_REQUEST,
                "the id must be a string, an integer or null",
            )
        })?),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(malformed(
            id.unwrap_or(RequestId::Null),
            code::INVALID_REQUEST,
            "the message needs \"jsonrpc\": \"2.0\"",
        ));
    }
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (obj.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(_), id) => Err(malformed(
            id.unwrap_or(RequestId::Null),
            code::INVALID_REQUEST,
            "the method must be a string",
        )),
        (None, Some(id)) => {
            let result = match (obj.remove("result"), obj.remove("error")) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(serde_json::from_value::<Error>(error)
                    .unwrap_or_else(|_| Error::new(code::INTERNAL_ERROR, "an unreadable error"))),
                _ => {
                    return Err(malformed(
                        id,
                        code::INVALID_REQUEST,
                        "a response needs exactly one of result and error",
                    ));
                }
            };
            Ok(Incoming::Response { id, result })
        }
        (None, None) => Err(malformed(
            RequestId::Null,
            code::INVALID_REQUEST,
            "the message has neither a method nor an id",
        )),
    }
}

/// What [`read_line`] found.
pub enum Line {
    /// A line's bytes, without the newline.
    Text(Vec<u8>),
    /// A line longer than [`MAX_LINE`], skipped to its end.
    TooLong,
    /// The client closed its end.
    End,
}

/// Read one line of at most [`MAX_LINE`] bytes (the rest of a longer one
/// is read and dropped, so the next line starts clean).
pub async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if line.is_empty() {
                Line::End
            } else {
                Line::Text(line)
            });
        }
        let (chunk, done) = match memchr(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            });
        }
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|b| *b == b'\n')
}

type Waiting = HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>;

/// Removes a request given up on from the waiting list, and sends the
/// client `$/cancel_request` for it.
struct Forget<'a> {
    peer: &'a Peer,
    id: RequestId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if self.peer.lock().remove(&self.id).is_some() {
            self.peer
                .notify("$/cancel_request", json!({"requestId": self.id}));
        }
    }
}

/// The client's end of the connection: what warden writes to it. Cheap to clone.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::UnboundedSender<String>,
    waiting: Arc<Mutex<Waiting>>,
    next: Arc<AtomicI64>,
    /// Bytes handed to the writer and not yet written.
    queued: Arc<AtomicUsize>,
    /// Woken each time the writer has written a line.
    drained: Arc<Notify>,
    /// Cancelled when the client can no longer be written to (it closed
    /// its end, or stopped reading past [`MAX_QUEUED`]).
    gone: CancellationToken,
}

impl Peer {
    /// A peer whose lines go to `output`, written by a task of their own;
    /// the task ends when every clone of the peer is dropped.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(
        mut output: W,
    ) -> (Peer, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let queued = Arc::new(AtomicUsize::new(0));
        let gone = CancellationToken::new();
        let drained = Arc::new(Notify::new());
        let writer = tokio::spawn({
            let (queued, gone, drained) = (queued.clone(), gone.clone(), drained.clone());
            async move {
                while let Some(line) = rx.recv().await {
                    let written = async {
                        output.write_all(line.as_bytes()).await?;
                        output.write_all(b"\n").await?;
                        output.flush().await
                    };
                    let result = tokio::select! {
                        r = written => r,
                        _ = gone.cancelled() => return,
                    };
                    queued.fetch_sub(line.len(), Ordering::Relaxed);
                    drained.notify_waiters();
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "cannot write to the ACP client; it has gone");
                        gone.cancel();
                        return;
                    }
                }
            }
        });
        (
            Peer {
                out: tx,
                waiting: Arc::default(),
                next: Arc::new(AtomicI64::new(0)),
                queued,
                drained,
                gone,
            },
            writer,
        )
    }

    fn send(&self, message: Value) {
        if self.gone.is_cancelled() {
            return;
        }
        let line = message.to_string();
        let queued = self.queued.fetch_add(line.len(), Ordering::Relaxed) + line.len();
        if queued > MAX_QUEUED {
            tracing::error!(
                queued,
                "the ACP client stopped reading: over {MAX_QUEUED} bytes wait for it; ending the connection"
            );
            self.gone.cancel();
            return;
        }
        // A client that has gone takes nothing more; the reader sees it end.
        let _ = self.out.send(line);
    }

    /// Resolves when the client can no longer be written to.
    pub async fn gone(&self) {
        self.gone.cancelled().await
    }

    /// Answer a request.
    pub fn respond(&self, id: RequestId, result: Result<Value, Error>) {
        self.send(match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        });
    }

    /// Send a notification.
    pub fn notify(&self, method: &str, params: impl Serialize) {
        match serde_json::to_value(params) {
            Ok(params) => self.send(json!({"jsonrpc": "2.0", "method": method, "params": params})),
            Err(e) => tracing::warn!(error = %e, method, "a notification could not be encoded"),
        }
    }

    /// Send a request and wait for its answer. An error when the client
    /// answers with one or goes away first.
    pub async fn request(&self, method: &str, params: impl Serialize) -> Result<Value, Error> {
        let params = serde_json::to_value(params).map_err(|e| {
            Error::new(code::INTERNAL_ERROR, format!("cannot encode {method}: {e}"))
        })?;
        let id = RequestId::Number(self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id.clone(), tx);
        // A request given up on (its turn ended) is forgotten, and the
        // client told it need not answer; an answer that comes anyway is dropped.
        let forget = Forget {
            peer: self,
            id: id.clone(),
        };
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = rx.await.unwrap_or_else(|_| {
            Err(Error::new(
                code::INTERNAL_ERROR,
                "the client closed the connection before answering",
            ))
        });
        drop(forget);
        answer
    }

    /// Wait while more than half of [`MAX_QUEUED`] waits for the client,
    /// so a long burst (a session's replay) goes at the client's pace.
    pub async fn room(&self) {
        loop {
            // Registered before the check, so a line written in between wakes it.
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.queued.load(Ordering::Relaxed) <= MAX_QUEUED / 2 || self.gone.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = self.gone.cancelled() => return,
            }
        }
    }

    /// Route the client's answer to the request that waits for it; `false`
    /// when no request of that id waits.
    pub fn answered(&self, id: &RequestId, result: Result<Value, Error>) -> bool {
        match self.lock().remove(id) {
            Some(tx) => {
                let _ = tx.send(result);
                true
            }
            None => false,
        }
    }

    /// Fail every request still waiting: the client has gone.
    pub fn hang_up(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(line: &str) -> i32 {
        let e = parse(line.as_bytes()).unwrap_err();
        i32::from(e.error.code)
    }

    #[test]
    fn lines_become_messages_or_the_error_to_answer() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
            Ok(Incoming::Request {
                id: RequestId::Number(1),
                ..
            })
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#),
            Ok(Incoming::Notification { .. })
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Incoming::Response { result: Ok(_), .. })
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"no"}}"#),
            Ok(Incoming::Response { result: Err(_), .. })
        ));
        assert_eq!(code_of("{not json"), code::PARSE_ERROR);
        assert_eq!(code_of("[1,2]"), code::INVALID_REQUEST);
        assert_eq!(code_of("7"), code::INVALID_REQUEST);
        assert_eq!(
            code_of(r#"{"id":1,"method":"initialize"}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1}"#),
            code::INVALID_REQUEST
        );
        let e = parse(br#"{"jsonrpc":"1.0","id":9,"method":"x"}"#).unwrap_err();
        assert_eq!(
            e.id,
            RequestId::Number(9),
            "the id is kept when it could be read"
        );
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_skipped_to_its_end() {
        let mut input = Vec::new();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.extend_from_slice(b"\n{\"a\":1}\nlast");
        let mut reader = tokio::io::BufReader::with_capacity(4096, &input[..]);
        assert!(matches!(
            read_line(&mut reader).await.unwrap(),
            Line::TooLong
        ));
        assert!(
            matches!(read_line(&mut reader).await.unwrap(), Line::Text(t) if t == b"{\"a\":1}")
        );
        assert!(matches!(read_line(&mut reader).await.unwrap(), Line::Text(t) if t == b"last"));
        assert!(matches!(read_line(&mut reader).await.unwrap(), Line::End));
    }

    type Asking = tokio::task::JoinHandle<Result<Value, Error>>;
    type Client = tokio::io::BufReader<tokio::io::DuplexStream>;

    /// A peer that has sent one permission request: the task waiting for
    /// its answer, the client's end, and the request's id.
    async fn one_request() -> (Peer, Asking, Client, RequestId) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (peer, _writer) = Peer::new(server);
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move {
                peer.request("session/request_permission", json!({"x": 1}))
                    .await
            }
        });
        let mut lines = tokio::io::BufReader::new(client);
        let Line::Text(sent) = read_line(&mut lines).await.unwrap() else {
            panic!("nothing sent")
        };
        let Incoming::Request { id, method, .. } = parse(&sent).unwrap() else {
            panic!("not a request")
        };
        assert_eq!(method, "session/request_permission");
        (peer, asking, lines, id)
    }

    #[tokio::test]
    async fn a_request_waits_for_its_own_answer() {
        let (peer, asking, _lines, id) = one_request().await;
        assert!(!peer.answered(&RequestId::Number(99), Ok(Value::Null)));
        assert!(peer.answered(&id, Ok(json!({"ok": true}))));
        assert_eq!(asking.await.unwrap().unwrap(), json!({"ok": true}));
    }

    #[tokio::test]
    async fn a_request_given_up_on_is_withdrawn_and_its_late_answer_dropped() {
        let (peer, asking, mut lines, id) = one_request().await;
        // The turn that asked ends: its request task is dropped.
        asking.abort();
        assert!(asking.await.unwrap_err().is_cancelled());
        let Line::Text(sent) = read_line(&mut lines).await.unwrap() else {
            panic!("no withdrawal sent")
        };
        let Incoming::Notification { method, params } = parse(&sent).unwrap() else {
            panic!("not a notification")
        };
        assert_eq!(method, "$/cancel_request");
        assert_eq!(params["requestId"], json!(id));
        assert!(
            !peer.answered(&id, Ok(json!({}))),
            "nothing waits for the answer any more"
        );
    }

    #[tokio::test]
    async fn room_waits_while_the_client_is_behind_and_wakes_as_it_reads() {
        let (client, server) = tokio::io::duplex(1024);
        let (peer, _writer) = Peer::new(server);
        let big = "x".repeat(1 << 20);
        for _ in 0..((MAX_QUEUED / 2) >> 20) + 1 {
            peer.notify("n", json!({"text": big}));
        }
        let waiting = tokio::spawn({
            let peer = peer.clone();
            async move { peer.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "over half the limit waits");
        // The client reads everything: room is made and the waiter wakes.
        let reading = tokio::spawn(async move {
            let mut client = client;
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut client, &mut sink).await;
        });
        waiting.await.unwrap();
        assert!(peer.queued.load(Ordering::Relaxed) <= MAX_QUEUED / 2);
        assert!(!peer.gone.is_cancelled());
        reading.abort();
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_let_go_not_buffered_forever() {
        let (_client, server) = tokio::io::duplex(1024);
        let (peer, writer) = Peer::new(server);
        let big = "x".repeat(1 << 20);
        for _ in 0..(MAX_QUEUED >> 20) + 2 {
            peer.notify("session/update", json!({"text": big}));
        }
        tokio::time::timeout(std::time::Duration::from_secs(10), peer.gone())
            .await
            .expect("the connection is ended past the limit");
        drop(peer);
        tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the writer stops")
            .unwrap();
    }
}
