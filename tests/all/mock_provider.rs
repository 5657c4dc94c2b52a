//! A loopback HTTP/1.1 server that plays model providers: it answers each
//! request with the next scripted reply (a recorded event stream, an error
//! response, a stream cut mid-way, a stream gone silent) and records every
//! request it received, so tests assert what the model was shown.
//!
//! It is written on std sockets rather than a framework because the faults
//! it plays are about bytes on the wire: a chunked body that stops without
//! its terminator, a response that never finishes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A 200 `text/event-stream` body, sent chunked in pieces of `piece` bytes.
    Sse { body: Vec<u8>, piece: usize },
    /// Any status, headers and a body with a content-length.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A 200 event stream whose connection closes after `body`, without the
    /// chunked terminator: the connection broke mid-stream.
    Cut { body: Vec<u8> },
    /// A 200 event stream that sends `body` and then nothing, holding the
    /// connection open until the client gives up.
    Stall { body: Vec<u8> },
}

impl Reply {
    pub fn sse(body: impl Into<Vec<u8>>) -> Reply {
        Reply::Sse {
            body: body.into(),
            piece: 64,
        }
    }

    pub fn json(status: u16, body: Value, headers: &[(&str, &str)]) -> Reply {
        let mut h: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        h.push(("content-type".into(), "application/json".into()));
        Reply::Http {
            status,
            headers: h,
            body: body.to_string().into_bytes(),
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    replies: Mutex<std::collections::VecDeque<Reply>>,
    received: Mutex<Vec<Received>>,
    stop: AtomicBool,
}

/// The server; it stops when dropped.
pub struct MockProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl MockProvider {
    /// Serve `replies` in order, one per request; past the last, a 500 saying so.
    pub fn start(replies: Vec<Reply>) -> MockProvider {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            received: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        MockProvider { addr, shared }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, shared: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let Some(received) = read_request(&mut reader) else {
        return;
    };
    shared.received.lock().unwrap().push(received);
    let reply = shared.replies.lock().unwrap().pop_front();
    let mut conn = conn;
    let reply = reply.unwrap_or_else(|| {
        Reply::json(
            500,
            json!({"error": {"message": "the mock provider has no reply left for this request"}}),
            &[],
        )
    });
    let _ = write_reply(&mut conn, reply, shared);
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn write_reply(conn: &mut TcpStream, reply: Reply, shared: &Shared) -> std::io::Result<()> {
    const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    match reply {
        Reply::Sse { body, piece } => {
            conn.write_all(SSE_HEAD.as_bytes())?;
            for chunk in body.chunks(piece.max(1)) {
                write_chunk(conn, chunk)?;
            }
            conn.write_all(b"0\r\n\r\n")?;
        }
        Reply::Http {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            ));
            conn.write_all(head.as_bytes())?;
            conn.write_all(&body)?;
        }
        Reply::Cut { body } => {
            conn.write_all(SSE_HEAD.as_bytes())?;
            write_chunk(conn, &body)?;
            conn.flush()?;
            // Give the client time to read what was sent before the cut.
            std::thread::sleep(Duration::from_millis(50));
            conn.shutdown(std::net::Shutdown::Both)?;
        }
        Reply::Stall { body } => {
            conn.write_all(SSE_HEAD.as_bytes())?;
            write_chunk(conn, &body)?;
            conn.flush()?;
            // Hold the connection until the client closes it or the server stops.
            let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buf = [0u8; 64];
            for _ in 0..600 {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        }
    }
    conn.flush()
}

fn write_chunk(conn: &mut TcpStream, chunk: &[u8]) -> std::io::Result<()> {
    conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
    conn.write_all(chunk)?;
    conn.write_all(b"\r\n")?;
    conn.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

// ---- streams in each protocol, for scripting conversations ----

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

/// A Chat Completions stream answering with text.
pub fn chat_text(text: &str, prompt_tokens: u64, completion_tokens: u64) -> Reply {
    let words: Vec<String> = text
        .split_inclusive(' ')
        .map(|w| {
            data(
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": null}]}),
            )
        })
        .collect();
    Reply::sse(
        [
            data(
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
            ),
            words.concat(),
            data(
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ),
            data(json!({"id": "chatcmpl-1", "choices": [],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": prompt_tokens + completion_tokens}})),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
    )
}

/// A Chat Completions stream calling one tool, its arguments in two deltas.
pub fn chat_tool_call(id: &str, name: &str, arguments: &Value) -> Reply {
    let args = arguments.to_string();
    let (a, b) = args.split_at(args.len() / 2);
    Reply::sse(
        [
            data(json!({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}, "finish_reason": null}]})),
            data(
                json!({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}, "finish_reason": null}]}),
            ),
            data(
                json!({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": b}}]}, "finish_reason": null}]}),
            ),
            data(
                json!({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ),
            data(json!({"id": "chatcmpl-2", "choices": [],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
    )
}

fn event(v: Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

/// An Anthropic Messages stream: optional thinking (with a signature), text,
/// and optionally one tool call.
pub fn anthropic_turn(
    thinking: Option<(&str, &str)>,
    text: &str,
    tool: Option<(&str, &str, &Value)>,
) -> Reply {
    let mut s = event(
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-test", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 120, "cache_read_input_tokens": 30, "output_tokens": 1}}}),
    );
    s.push_str(&event(json!({"type": "ping"})));
    let mut index = 0;
    if let Some((thought, signature)) = thinking {
        s.push_str(&event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
        s.push_str(&event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": thought}})));
        s.push_str(&event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}})));
        s.push_str(&event(
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    s.push_str(&event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
    s.push_str(&event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})));
    s.push_str(&event(
        json!({"type": "content_block_stop", "index": index}),
    ));
    index += 1;
    let stop = if let Some((id, name, input)) = tool {
        s.push_str(&event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        s.push_str(&event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
        s.push_str(&event(
            json!({"type": "content_block_stop", "index": index}),
        ));
        "tool_use"
    } else {
        "end_turn"
    };
    s.push_str(&event(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 40}})));
    s.push_str(&event(json!({"type": "message_stop"})));
    Reply::sse(s)
}
