//! One guest call's budget for what the host holds or does on the guest's
//! behalf, outside the guest's own linear memory (which `memory_mb` caps).
//!
//! Every host-side object a guest can create — WASI descriptors, streams,
//! pollables, wasi:http fields, requests, responses, bodies — lives in the
//! store's resource table, so the table's size is the one count that bounds
//! them all; the objects whose size a guest chooses (HTTP header and trailer
//! collections) are capped each. Host reads are already cut by wasmtime at
//! `MAX_READ_SIZE_ALLOC` per call, and stdout/stderr are capped pipes. The
//! host interface (`log`, `progress`, `ask`) is metered here too, since its
//! effects (stderr, bus events, audit rows) outlive the call.

use std::collections::HashMap;
use std::time::Instant;

/// The most objects the host holds for one call at once. A tool walking a
/// tree or fetching a page uses a few dozen.
pub const TABLE_ENTRIES: usize = 1024;
/// The most bytes one wasi:http `fields` (headers or trailers) may hold.
pub const FIELD_BYTES: usize = 16 * 1024;
/// So host objects held for one call stay under roughly
/// `TABLE_ENTRIES × FIELD_BYTES` (16 MiB), whatever the guest does.
pub const HOST_BYTES_BOUND: usize = TABLE_ENTRIES * FIELD_BYTES;

/// Distinct permission questions one call may put.
pub const ASKS: usize = 16;
/// Log bytes one call may write, and the rate they refill at.
pub const LOG_BYTES: usize = 64 * 1024;
pub const LOG_BYTES_PER_SEC: usize = 32 * 1024;
/// Progress metadata bytes one call may send, and the rate.
pub const PROGRESS_BYTES: usize = 256 * 1024;
pub const PROGRESS_BYTES_PER_SEC: usize = 128 * 1024;
/// The longest log line kept, in bytes (the rest is never copied).
pub const LOG_LINE: usize = 4096;
/// The most log lines one call may write, whatever their length.
pub const LOG_LINES: usize = 1024;
/// What every log line and progress update costs besides its bytes, so
/// empty ones are paid for too.
pub const LINE_COST: usize = 64;
/// The largest one progress update.
pub const PROGRESS_UPDATE: usize = 16 * 1024;
/// The longest progress title kept, in characters.
pub const TITLE_CHARS: usize = 200;
/// The longest permission name a guest may ask for, in bytes.
pub const ASK_PERMISSION: usize = 256;
/// The most patterns in one question, and the longest one, in bytes.
pub const ASK_PATTERNS: usize = 16;
pub const ASK_PATTERN: usize = 1024;
/// The largest metadata of one question, in bytes.
pub const ASK_METADATA: usize = 16 * 1024;

/// A byte allowance: at most `total` over the call, drawn from a bucket that
/// refills at `per_sec` (burst `per_sec`).
#[derive(Debug)]
pub struct Allowance {
    total: usize,
    per_sec: usize,
    spent: usize,
    bucket: f64,
    at: Instant,
    /// Bytes refused so far (reported once at the end).
    pub dropped: usize,
}

impl Allowance {
    pub fn new(total: usize, per_sec: usize) -> Allowance {
        Allowance {
            total,
            per_sec,
            spent: 0,
            bucket: per_sec as f64,
            at: Instant::now(),
            dropped: 0,
        }
    }

    /// Whether `bytes` more may go out now; refused bytes are counted.
    pub fn take(&mut self, bytes: usize) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_sec as f64;
        self.bucket = (self.bucket + refill).min(self.per_sec as f64);
        self.at = now;
        if self.spent + bytes > self.total || (bytes as f64) > self.bucket {
            self.dropped += bytes;
            return false;
        }
        self.spent += bytes;
        self.bucket -= bytes as f64;
        true
    }

    /// Whether the whole-call total is used up (nothing more will pass).
    pub fn exhausted(&self) -> bool {
        self.spent >= self.total
    }
}

/// The answers a call got to its permission questions: the same question
/// twice gets the first answer without asking (or auditing) again.
#[derive(Debug, Default)]
pub struct Asks {
    answers: HashMap<(String, Vec<String>), Result<(), String>>,
}

impl Asks {
    /// The earlier answer to this question, if any.
    pub fn answered(&self, permission: &str, patterns: &[String]) -> Option<Result<(), String>> {
        self.answers
            .get(&(permission.to_string(), patterns.to_vec()))
            .cloned()
    }

    /// Whether a new question may still be put.
    pub fn room(&self) -> bool {
        self.answers.len() < ASKS
    }

    pub fn record(
        &mut self,
        permission: String,
        patterns: Vec<String>,
        answer: Result<(), String>,
    ) {
        self.answers.insert((permission, patterns), answer);
    }
}

/// One call's log: its bytes and its lines, each counted.
#[derive(Debug)]
pub struct Log {
    pub bytes: Allowance,
    pub lines: usize,
    pub dropped_lines: usize,
    /// Whether the call was told its lines are being dropped.
    pub said_full: bool,
}

/// What the host interface has used of one call's budget.
#[derive(Debug)]
pub struct Meter {
    pub log: Log,
    pub progress: Allowance,
    pub asks: Asks,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter {
            log: Log {
                bytes: Allowance::new(LOG_BYTES, LOG_BYTES_PER_SEC),
                lines: 0,
                dropped_lines: 0,
                said_full: false,
            },
            progress: Allowance::new(PROGRESS_BYTES, PROGRESS_BYTES_PER_SEC),
            asks: Asks::default(),
        }
    }
}

/// How a call that filled its resource table is described.
pub fn table_full() -> String {
    format!(
        "it held {TABLE_ENTRIES} host objects at once (descriptors, streams, pollables, HTTP fields...), the most one call may; drop what you no longer use"
    )
}

/// Why a wasmtime failure is the call going over its budget, if it is: the
/// resource table refusing a new entry, or a header collection over its cap.
pub fn over_budget(error: &str) -> Option<String> {
    if error.contains("resource table has no free keys") {
        Some(table_full())
    } else if error.contains("total size of fields exceeds limit") {
        Some(format!(
            "it built an HTTP header collection over {} KiB, the most one may hold",
            FIELD_BYTES / 1024
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_allowance_caps_the_total_and_the_rate() {
        let mut a = Allowance::new(100, 60);
        assert!(a.take(50));
        assert!(!a.take(50), "the bucket holds 60 a second");
        assert_eq!(a.dropped, 50);
        std::thread::sleep(Duration::from_millis(1000));
        assert!(a.take(50));
        assert!(!a.take(1), "100 in total");
        assert!(a.exhausted());
    }

    #[test]
    fn a_repeated_question_gets_its_first_answer() {
        let mut asks = Asks::default();
        assert_eq!(asks.answered("read", &["a".into()]), None);
        asks.record("read".into(), vec!["a".into()], Err("no".into()));
        assert_eq!(asks.answered("read", &["a".into()]), Some(Err("no".into())));
        for i in 1..ASKS {
            assert!(asks.room());
            asks.record("read".into(), vec![i.to_string()], Ok(()));
        }
        assert!(!asks.room());
    }
}
