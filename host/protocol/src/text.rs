//! Text that came from someone warden does not trust (the model, a guest, a
//! plugin's self-description, an MCP server or client, an HTTP client) made
//! safe to print on an operator's terminal.
//!
//! A terminal obeys what it is sent: an escape sequence can clear the
//! screen, rewrite a question the operator is about to answer, set the
//! window title or write the clipboard (OSC 52). Every line warden prints
//! that carries such text goes through [`terminal_safe`] (or
//! [`json_terminal_safe`] for JSON documents), in every command.

use std::borrow::Cow;

/// Characters a terminal acts on, or that reorder what is shown: every
/// control character (C0, DEL, C1) but newline and tab, and the Unicode
/// bidirectional embeddings, overrides and isolates ("Trojan Source").
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character a terminal would act on replaced by `?`.
/// Borrowed when nothing needed replacing (the usual case).
pub fn terminal_safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if unsafe_char(c) { '?' } else { c })
            .collect(),
    )
}

/// A JSON document made safe for a terminal without changing what it
/// means: JSON text never holds a raw control character (serde escapes
/// them), and the bidirectional controls, which JSON may carry raw inside
/// strings, are written as `\uXXXX` escapes, so a parser reads the same
/// value back.
pub fn json_terminal_safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// At most `max` characters of `s`, marked `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let kept: String = s.chars().take(max).collect();
        format!("{kept}…")
    }
}

/// A short, terminal-safe rendering of untrusted text for an error message
/// or a log line: at most 80 characters, one line.
pub fn shown(s: &str) -> String {
    let one_line: String = s
        .chars()
        .take(81)
        .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
        .collect();
    let mut out = terminal_safe(&one_line).into_owned();
    if one_line.chars().count() > 80 {
        out = out.chars().take(80).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_bidi_controls_are_neutralised() {
        assert!(matches!(
            terminal_safe("plain text\n\tok"),
            Cow::Borrowed(_)
        ));
        // Clear screen, OSC 52 clipboard write (BEL-terminated), a C1 CSI, DEL.
        assert_eq!(
            terminal_safe("a\u{1b}[2Jb\u{1b}]52;c;aGk=\u{7}c\u{9b}31md\u{7f}"),
            "a?[2Jb?]52;c;aGk=?c?31md?"
        );
        assert_eq!(terminal_safe("x\u{202e}gpj.exe\u{2066}"), "x?gpj.exe?");
        assert_eq!(terminal_safe("\r\u{8}"), "??");
    }

    #[test]
    fn json_stays_the_same_value() {
        let v = serde_json::json!({"t": "x\u{202e}y", "e": "\u{1b}[2J"});
        let text = serde_json::to_string(&v).unwrap();
        let safe = json_terminal_safe(&text);
        assert!(!safe.contains('\u{202e}') && !safe.contains('\u{1b}'));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn shown_is_one_short_safe_line() {
        assert_eq!(shown("a\nb\u{1b}"), "a b?");
        let long = "x".repeat(200);
        assert_eq!(shown(&long).chars().count(), 81);
    }
}
