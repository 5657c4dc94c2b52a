//! From a streaming HTTP response to [`LlmEvent`]s: bytes → SSE events
//! ([`super::sse`]) → a protocol's [`Decoder`] → events. The driver owns the
//! failure modes every protocol shares: a connection cut mid-stream, a
//! server gone silent, and a body that ends before the protocol's last event.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::Value;
use warden_protocol::llm::ErrorKind;
use warden_protocol::{LlmEvent, ProviderError};

use super::EventStream;
use super::failure::clip;
use super::http::{error_chain, seconds};
use super::sse::{SseEvent, SseParser};

/// Whether the protocol has said its last word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    More,
    Done,
}

/// One wire protocol's stream decoder: a state machine from SSE events to
/// [`LlmEvent`]s. Pure (no IO), so it is tested on recorded streams directly.
pub trait Decoder: Send + 'static {
    /// Handle one event, pushing what it means onto `out`. An
    /// [`LlmEvent::Error`] pushed here ends the stream.
    fn event(&mut self, event: SseEvent, out: &mut Vec<LlmEvent>) -> Flow;

    /// The body ended cleanly before [`Flow::Done`]: finish if the protocol
    /// allows it, else report the stream as cut short.
    fn end(&mut self, out: &mut Vec<LlmEvent>);

    /// The stream failed under the decoder: close what is open, then report `error`.
    fn fail(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>);
}

/// Parse an event's data as JSON, or say which event was not JSON.
pub fn json(provider: &str, event: &SseEvent) -> Result<Value, ProviderError> {
    serde_json::from_str(&event.data).map_err(|e| {
        ProviderError::new(
            ErrorKind::Malformed,
            format!(
                "{provider}: the stream carried an event whose data is not valid JSON ({e}): {}",
                clip(&event.data, 200)
            ),
        )
    })
}

/// The error for a body that ended before the protocol's last event.
pub fn cut_short(provider: &str, what: &str) -> ProviderError {
    ProviderError::new(
        ErrorKind::Truncated,
        format!("{provider}: the stream ended before the model finished ({what})"),
    )
}

type Bytes = Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

struct Driver<D> {
    provider: String,
    body: Bytes,
    parser: SseParser,
    decoder: D,
    idle: Duration,
    queue: VecDeque<LlmEvent>,
    done: bool,
}

/// Drive `decoder` over the response body. The stream ends after the
/// protocol's last event or the first error; dropping it closes the connection.
pub fn drive<D: Decoder>(
    provider: &str,
    response: reqwest::Response,
    decoder: D,
    idle: Duration,
) -> EventStream {
    let body: Bytes = Box::pin(response.bytes_stream());
    from_bytes(provider, body, decoder, idle)
}

fn from_bytes<D: Decoder>(provider: &str, body: Bytes, decoder: D, idle: Duration) -> EventStream {
    let driver = Driver {
        provider: provider.to_string(),
        body,
        parser: SseParser::new(),
        decoder,
        idle,
        queue: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(ev) = d.queue.pop_front() {
                return Some((ev, d));
            }
            if d.done {
                return None;
            }
            let out = d.step().await;
            d.queue.extend(out);
        }
    }))
}

impl<D: Decoder> Driver<D> {
    /// Read the next piece of the body and decode what it completes.
    async fn step(&mut self) -> Vec<LlmEvent> {
        let mut out = Vec::new();
        let provider = self.provider.clone();
        match tokio::time::timeout(self.idle, self.body.next()).await {
            Err(_) => {
                self.done = true;
                let e = ProviderError::new(
                    ErrorKind::Truncated,
                    format!(
                        "{provider}: the stream went silent for {} before the model finished",
                        seconds(self.idle)
                    ),
                );
                self.decoder.fail(e, &mut out);
            }
            Ok(None) => {
                self.done = true;
                self.decoder.end(&mut out);
            }
            Ok(Some(Err(e))) => {
                self.done = true;
                let e = ProviderError::new(
                    ErrorKind::Truncated,
                    format!(
                        "{provider}: the connection broke before the model finished: {}",
                        error_chain(&e)
                    ),
                );
                self.decoder.fail(e, &mut out);
            }
            Ok(Some(Ok(bytes))) => match self.parser.push(&bytes) {
                Err(too_large) => {
                    self.done = true;
                    let e = ProviderError::new(
                        ErrorKind::Malformed,
                        format!("{provider}: {too_large}"),
                    );
                    self.decoder.fail(e, &mut out);
                }
                Ok(events) => {
                    for ev in events.into_iter().filter(carries_data) {
                        let flow = self.decoder.event(ev, &mut out);
                        if flow == Flow::Done || ends_in_error(&out) {
                            self.done = true;
                            break;
                        }
                    }
                }
            },
        }
        out
    }
}

/// An event with blank data says nothing in any of these protocols (some
/// proxies send `data:` alone as a keep-alive).
fn carries_data(event: &SseEvent) -> bool {
    !event.data.trim().is_empty()
}

fn ends_in_error(out: &[LlmEvent]) -> bool {
    matches!(out.last(), Some(LlmEvent::Error { .. }))
}

/// Decode a whole recorded body at once (unit tests of the decoders).
#[cfg(test)]
pub fn decode_all<D: Decoder>(mut decoder: D, body: &[u8]) -> Vec<LlmEvent> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    let events = match parser.push(body) {
        Ok(e) => e,
        Err(e) => panic!("{e}"),
    };
    for ev in events.into_iter().filter(carries_data) {
        if decoder.event(ev, &mut out) == Flow::Done || ends_in_error(&out) {
            return out;
        }
    }
    decoder.end(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echoes each event's data as text; `stop` ends the stream.
    struct Echo;

    impl Decoder for Echo {
        fn event(&mut self, event: SseEvent, out: &mut Vec<LlmEvent>) -> Flow {
            if event.data == "stop" {
                return Flow::Done;
            }
            out.push(LlmEvent::TextDelta {
                id: "t".into(),
                text: event.data,
            });
            Flow::More
        }
        fn end(&mut self, out: &mut Vec<LlmEvent>) {
            out.push(LlmEvent::Error {
                error: cut_short("echo", "no stop"),
            });
        }
        fn fail(&mut self, error: ProviderError, out: &mut Vec<LlmEvent>) {
            out.push(LlmEvent::Error { error });
        }
    }

    fn body(pieces: Vec<&'static [u8]>) -> Bytes {
        Box::pin(futures::stream::iter(
            pieces.into_iter().map(|p| Ok(bytes::Bytes::from_static(p))),
        ))
    }

    fn texts(events: &[LlmEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                LlmEvent::TextDelta { text, .. } => text.clone(),
                LlmEvent::Error { error } => format!("error {:?}", error.kind),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn events_split_across_pieces_come_out_whole_and_stop_ends_reading() {
        let s = from_bytes(
            "echo",
            body(vec![
                b"data: a",
                b"b\n",
                b"\ndata:\n\ndata: stop\n\ndata: never\n\n",
            ]),
            Echo,
            Duration::from_secs(5),
        );
        let got: Vec<LlmEvent> = s.collect().await;
        assert_eq!(texts(&got), ["ab"]);
    }

    #[tokio::test]
    async fn a_body_ending_early_is_the_decoders_call() {
        let s = from_bytes(
            "echo",
            body(vec![b"data: a\n\n"]),
            Echo,
            Duration::from_secs(5),
        );
        let got: Vec<LlmEvent> = s.collect().await;
        assert_eq!(texts(&got), ["a", "error Truncated"]);
    }

    #[tokio::test]
    async fn a_silent_server_times_out_as_truncated() {
        let pending: Bytes = Box::pin(
            futures::stream::iter(vec![Ok(bytes::Bytes::from_static(b"data: a\n\n"))])
                .chain(futures::stream::pending()),
        );
        let s = from_bytes("echo", pending, Echo, Duration::from_millis(20));
        let got: Vec<LlmEvent> = s.collect().await;
        assert_eq!(texts(&got), ["a", "error Truncated"]);
        match &got[1] {
            LlmEvent::Error { error } => assert!(error.message.contains("went silent for 20ms")),
            other => panic!("{other:?}"),
        }
    }
}
