//! A loopback server speaking OpenAI Chat Completions, answering at once:
//! a tool call while the conversation has fewer than `steps` tool results,
//! then a text (or one fixed stream, for the ingest part). Minimal HTTP/1.1
//! on tokio, for measuring, not for testing protocol corners (the test suite
//! has its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

pub struct Mock {
    pub port: u16,
    /// When the first request arrived (ns after `epoch`), 0 if none yet.
    pub first_request_ns: Arc<AtomicU64>,
    pub requests: Arc<AtomicU64>,
    /// Request body bytes received.
    pub bytes: Arc<AtomicU64>,
}

/// What the server answers.
#[derive(Clone)]
pub enum Reply {
    /// `steps` tool calls of `tool` with `args` (`{n}` numbered), then "done".
    ToolSteps {
        steps: usize,
        tool: &'static str,
        args: &'static str,
    },
    /// The same event stream to every request.
    Fixed(Arc<str>),
}

pub async fn start(steps: usize, tool: &'static str, args: &'static str, epoch: Instant) -> Mock {
    serve(Reply::ToolSteps { steps, tool, args }, epoch).await
}

pub async fn serve(reply: Reply, epoch: Instant) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback bind");
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let first = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (f, c, b) = (first.clone(), count.clone(), bytes.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // Without this, a response written in two pieces waits for the
            // client's delayed ACK (Nagle): 40 ms that are the mock's, not warden's.
            let _ = stream.set_nodelay(true);
            let (f, c, b, reply) = (f.clone(), c.clone(), b.clone(), reply.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut reader = BufReader::new(read);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    let mut started = false;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if !started {
                            started = true;
                            let now = epoch.elapsed().as_nanos() as u64;
                            let _ = f.compare_exchange(
                                0,
                                now.max(1),
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            );
                            c.fetch_add(1, Ordering::SeqCst);
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    b.fetch_add(length as u64, Ordering::Relaxed);
                    let (steps, tool, args) = match &reply {
                        Reply::ToolSteps { steps, tool, args } => (*steps, *tool, *args),
                        Reply::Fixed(sse) => {
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}",
                                sse.len()
                            );
                            if write.write_all(response.as_bytes()).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    };
                    // The results the request carries: the step it asks for.
                    let results = memchr::memmem::find_iter(&body, br#""role":"tool""#).count();
                    let sse = if results < steps {
                        format!(
                            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"tool_calls\":[{{\"index\":0,\"id\":\"call_{results}\",\"type\":\"function\",\"function\":{{\"name\":\"{tool}\",\"arguments\":{}}}}}]}},\"finish_reason\":null}}]}}\n\n\
                             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}}}\n\ndata: [DONE]\n\n",
                            serde_json::to_string(&args.replace("{n}", &results.to_string()))
                                .unwrap_or_default()
                        )
                    } else {
                        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"done\"},\"finish_reason\":null}]}\n\n\
                         data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"total_tokens\":11}}\n\ndata: [DONE]\n\n"
                            .to_string()
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}",
                        sse.len()
                    );
                    if write.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Mock {
        port,
        first_request_ns: first,
        requests: count,
        bytes,
    }
}
