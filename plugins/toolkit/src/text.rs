//! Output caps and the text/binary sniff.
//!
//! A tool's output goes straight into the model's context, so every tool
//! caps it at the same size and says, in the output itself, how to get the
//! rest.

/// Bytes of output a built-in tool returns at most.
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// Characters kept of one line of file content.
pub const MAX_LINE_CHARS: usize = 2000;
/// How much of a file's start is inspected to tell text from binary.
pub const SNIFF_BYTES: usize = 8192;

/// A NUL byte, or mostly control bytes, in the head of a file: not text.
pub fn looks_binary(head: &[u8]) -> bool {
    if head.contains(&0) {
        return true;
    }
    if head.is_empty() {
        return false;
    }
    let control = head
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0c | 0x1b))
        .count();
    control * 10 > head.len() * 3
}

/// `n` and the noun in the right number: `1 file`, `3 files`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `line` cut to `max` characters, with a marker saying so when cut.
pub fn cut_line(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        Some((end, _)) => format!("{}… (line cut at {max} characters)", &line[..end]),
        None => line.to_string(),
    }
}

/// Lines collected up to a byte budget. Once a line does not fit, the
/// output is full and further lines are only counted, so the note at the end
/// can say how much was left out.
#[derive(Debug)]
pub struct Capped {
    out: String,
    limit: usize,
    shown: usize,
    dropped: usize,
}

impl Capped {
    /// An empty output that holds at most `limit` bytes of lines.
    pub fn new(limit: usize) -> Self {
        Capped {
            out: String::new(),
            limit,
            shown: 0,
            dropped: 0,
        }
    }

    /// Add `line` (a newline is appended). Returns false, and keeps nothing
    /// more, once the budget is spent.
    pub fn push(&mut self, line: &str) -> bool {
        if self.dropped > 0 || self.out.len() + line.len() + 1 > self.limit {
            self.dropped += 1;
            return false;
        }
        self.out.push_str(line);
        self.out.push('\n');
        self.shown += 1;
        true
    }

    /// Whether a line was left out.
    pub fn is_full(&self) -> bool {
        self.dropped > 0
    }

    /// Lines kept.
    pub fn shown(&self) -> usize {
        self.shown
    }

    /// Lines left out for lack of room.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// The text so far.
    pub fn into_string(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_is_nul_or_mostly_control_bytes() {
        assert!(looks_binary(b"abc\0def"));
        assert!(looks_binary(&[1, 2, 3, 4, b'a']));
        assert!(!looks_binary(b"plain text\r\n\twith tabs\n"));
        assert!(!looks_binary(b""));
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "file", "files"), "1 file");
        assert_eq!(count(0, "file", "files"), "0 files");
    }

    #[test]
    fn lines_are_cut_on_character_boundaries() {
        assert_eq!(cut_line("héllo", 10), "héllo");
        assert_eq!(cut_line("héllo", 2), "hé… (line cut at 2 characters)");
    }

    #[test]
    fn capped_stops_at_the_first_line_that_does_not_fit() {
        let mut c = Capped::new(8);
        assert!(c.push("abc"));
        assert!(!c.push("defgh"));
        assert!(
            !c.push("i"),
            "nothing is kept after the cap, even if it would fit"
        );
        assert_eq!((c.shown(), c.dropped(), c.is_full()), (1, 2, true));
        assert_eq!(c.into_string(), "abc\n");
    }
}
