//! Server-sent events, parsed the way the WHATWG HTML standard says
//! (§9.2 "Server-sent events", the event stream interpretation): lines end
//! at CRLF, LF or CR; `data:` lines are joined with `\n`; `event:` names the
//! event; lines starting with `:` are comments; a leading BOM is dropped; an
//! event is dispatched only when a blank line ends it, so an event cut off by
//! the end of the stream is never half-delivered.
//!
//! The parser is incremental: bytes arrive in whatever pieces the network
//! gives (a CRLF or a UTF-8 character may be split across two), and complete
//! events come out as soon as their blank line is seen.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or `message` when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` seen so far in the stream, if any.
    pub id: Option<String>,
}

/// The event stream broke a limit that protects the host's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseTooLarge {
    pub limit: usize,
}

impl std::fmt::Display for SseTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the provider sent an event-stream line or event larger than {} bytes",
            self.limit
        )
    }
}

/// No line or event may grow past this: a provider that never ends a line
/// must not eat the host's memory.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// The incremental parser.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous byte was a CR, so an LF right after it ends nothing.
    after_cr: bool,
    /// Still at the very start of the stream, where a BOM may be.
    at_start: bool,
    /// Bytes of a possible BOM seen at the start so far.
    bom: Vec<u8>,
    event: String,
    data: String,
    last_id: Option<String>,
    comments: usize,
    limit: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

impl SseParser {
    pub fn new() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }

    /// A parser with a smaller size limit (for tests).
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            bom: Vec::new(),
            event: String::new(),
            data: String::new(),
            last_id: None,
            comments: 0,
            limit,
        }
    }

    /// How many comment lines were seen (keep-alives such as `: OPENROUTER PROCESSING`).
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Feed bytes; returns the events they complete, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        let mut out = Vec::new();
        if self.at_start {
            // The BOM may itself arrive split; hold its bytes until it is decided.
            while let Some((&b, rest)) = bytes.split_first() {
                if b == BOM[self.bom.len()] {
                    self.bom.push(b);
                    bytes = rest;
                    if self.bom.len() == BOM.len() {
                        self.bom.clear();
                        self.at_start = false;
                        break;
                    }
                } else {
                    let held = std::mem::take(&mut self.bom);
                    self.at_start = false;
                    self.feed(&held, &mut out)?;
                    break;
                }
            }
            if self.at_start {
                return Ok(out);
            }
        }
        self.feed(bytes, &mut out)?;
        Ok(out)
    }

    fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseTooLarge> {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.line_done(&line)? {
                        out.push(ev);
                    }
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() >= self.limit {
                        return Err(SseTooLarge { limit: self.limit });
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseTooLarge> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        // Lines are split on bytes that never occur inside a UTF-8 sequence,
        // so decoding a whole line never cuts a character.
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            self.comments += 1;
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.data.len() + value.len() + 1 > self.limit {
                    return Err(SseTooLarge { limit: self.limit });
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_string()),
            // `retry` only matters to a browser reconnecting; other fields are ignored by the standard.
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".to_string()
            } else {
                event
            },
            data,
            id: self.last_id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        p.push(input).unwrap()
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn data_lines_join_with_newlines_and_events_need_a_blank_line() {
        assert_eq!(
            all(b"data: a\ndata:b\ndata:  c\n\ndata: never\n"),
            [ev("message", "a\nb\n c")]
        );
    }

    #[test]
    fn every_line_ending_works_and_a_split_crlf_ends_one_line() {
        let expected = [ev("x", "1"), ev("message", "2"), ev("message", "3")];
        assert_eq!(
            all(b"event: x\r\ndata: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"),
            expected
        );
        // Byte by byte, so a CR and its LF arrive in different pushes.
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for b in b"event: x\r\ndata: 1\r\n\r\ndata: 2\r\rdata: 3\n\n" {
            got.extend(p.push(&[*b]).unwrap());
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn comments_are_counted_and_ignored() {
        let mut p = SseParser::new();
        let got = p.push(b": ping\n\n:another\ndata: x\n\n").unwrap();
        assert_eq!(got, [ev("message", "x")]);
        assert_eq!(p.comments(), 2);
    }

    #[test]
    fn a_leading_bom_is_dropped_even_when_split_but_only_at_the_start() {
        let mut p = SseParser::new();
        let mut got = p.push(&[0xEF]).unwrap();
        got.extend(p.push(&[0xBB, 0xBF]).unwrap());
        got.extend(p.push(b"data: a\n\n").unwrap());
        assert_eq!(got, [ev("message", "a")]);
        // A second BOM is part of the field name, so the line is an unknown field.
        let mut bytes = BOM.to_vec();
        bytes.extend(BOM);
        bytes.extend(b"data: a\n\ndata: b\n\n");
        assert_eq!(all(&bytes), [ev("message", "b")]);
    }

    #[test]
    fn a_partial_bom_is_kept_as_data() {
        // 0xEF then a non-BOM byte: both belong to the stream (here, a field name).
        assert_eq!(all(b"\xEFdata: x\n\ndata: y\n\n"), [ev("message", "y")]);
    }

    #[test]
    fn field_edge_cases() {
        // No colon: the whole line is the field name with an empty value,
        // so a bare `data` line makes an event with empty data.
        assert_eq!(all(b"data\n\n"), [ev("message", "")]);
        assert_eq!(all(b"data\ndata\n\n"), [ev("message", "\n")]);
        // Only one leading space is stripped; the colon inside the value stays.
        assert_eq!(all(b"data:  a: b\n\n"), [ev("message", " a: b")]);
        // An event name with no data dispatches nothing and does not leak.
        assert_eq!(all(b"event: e\n\ndata: d\n\n"), [ev("message", "d")]);
        // Unknown fields and retry are ignored.
        assert_eq!(
            all(b"retry: 10\nfoo: bar\ndata: d\n\n"),
            [ev("message", "d")]
        );
    }

    #[test]
    fn ids_carry_over_to_later_events() {
        let got = all(b"id: 7\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\n");
        assert_eq!(got[0].id.as_deref(), Some("7"));
        assert_eq!(got[1].id.as_deref(), Some("7"));
        assert_eq!(got[2].id.as_deref(), Some("7"), "an id with NUL is ignored");
    }

    #[test]
    fn utf8_split_across_pushes_survives() {
        let text = "data: Grüße 🎉\n\n".as_bytes();
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for piece in text.chunks(1) {
            got.extend(p.push(piece).unwrap());
        }
        assert_eq!(got, [ev("message", "Grüße 🎉")]);
        // Invalid UTF-8 is replaced, not a failure.
        assert_eq!(all(b"data: \xFF\n\n"), [ev("message", "\u{FFFD}")]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::with_limit(8);
        assert!(p.push(b"data: 12").is_ok());
        assert_eq!(p.push(b"3"), Err(SseTooLarge { limit: 8 }));
        // Each line fits, but the event's data together does not.
        let mut p = SseParser::with_limit(12);
        assert_eq!(
            p.push(b"data: 123456\ndata: 123456\n"),
            Err(SseTooLarge { limit: 12 })
        );
    }
}
