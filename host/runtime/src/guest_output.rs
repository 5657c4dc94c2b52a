//! What a guest printed during one call, and why it crashed in one line.
//!
//! Each call gets its own capped stdout and stderr pipes. What they hold
//! goes to the call's observer (the audit trail, so `warden trace` shows
//! it) and, for a crash, to the host's log in full; the model is told only
//! the one line that says why: a Rust panic message, a Python exception
//! (the last line of its traceback) or a JavaScript error (`Name: message`).

use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// What a guest may print on each stream before its writes start failing.
pub const CAP: usize = 64 * 1024;

/// The longest crash line shown to the model.
const SUMMARY_CAP: usize = 1000;

/// A call's stdout and stderr.
#[derive(Clone)]
pub struct GuestOutput {
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl GuestOutput {
    /// Fresh pipes, attached to the guest's WASI context.
    pub fn attach(b: &mut WasiCtxBuilder) -> GuestOutput {
        let out = GuestOutput {
            stdout: MemoryOutputPipe::new(CAP),
            stderr: MemoryOutputPipe::new(CAP),
        };
        b.stdout(out.stdout.clone());
        b.stderr(out.stderr.clone());
        out
    }

    /// What the guest wrote to stdout, trimmed.
    pub fn stdout(&self) -> String {
        text(&self.stdout)
    }

    /// What the guest wrote to stderr, trimmed.
    pub fn stderr(&self) -> String {
        text(&self.stderr)
    }
}

fn text(pipe: &MemoryOutputPipe) -> String {
    String::from_utf8_lossy(&pipe.contents()).trim().to_string()
}

/// Why a guest crashed, in one line, from what it printed on stderr.
pub fn crash_summary(stderr: &str) -> Option<String> {
    // Python first: componentize-py's runtime adds a Rust panic of its own
    // ("Python function threw an unexpected exception") after the traceback.
    let line = python_exception(stderr)
        .or_else(|| rust_panic(stderr))
        .or_else(|| js_error(stderr))?;
    Some(line.chars().take(SUMMARY_CAP).collect())
}

/// `panicked at src/lib.rs:10:5: the message`, continuation lines joined.
fn rust_panic(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines().skip_while(|l| !l.contains("panicked at"));
    let first = lines.next()?;
    let at = first.find("panicked at")?;
    let mut out = first[at..].trim_end().to_string();
    for line in lines.take_while(|l| !l.starts_with("note:")).take(5) {
        out.push(' ');
        out.push_str(line.trim());
    }
    Some(out)
}

/// The last traceback's final line: `ValueError: the message`.
fn python_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    stderr[start..]
        .lines()
        .skip(1)
        .find(|l| !l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// The first `Name: message` line a JavaScript guest printed (the layer
/// prints the error, then its stack).
fn js_error(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find(|l| looks_like_error(l))
        .map(|l| l.trim().to_string())
}

/// `SomeError: text` or `Exception: text`: a type name, a colon, a message.
fn looks_like_error(line: &str) -> bool {
    let Some((name, _)) = line.split_once(": ") else {
        return false;
    };
    let name = name.rsplit('.').next().unwrap_or(name);
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && (name.ends_with("Error") || name.ends_with("Exception") || name == "Error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rust_panic_is_its_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:10:5:\nindex out of bounds\nnote: run with `RUST_BACKTRACE=1`";
        assert_eq!(
            crash_summary(stderr).as_deref(),
            Some("panicked at src/lib.rs:10:5: index out of bounds")
        );
    }

    #[test]
    fn a_python_exception_is_the_last_line_of_its_traceback() {
        let stderr = "Traceback (most recent call last):\n  File \"app.py\", line 3, in before\n    raise KeyError('x')\nKeyError: 'x'\n";
        assert_eq!(crash_summary(stderr).as_deref(), Some("KeyError: 'x'"));
        let with_runtime_panic = format!(
            "{stderr}\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25:\nPython function threw an unexpected exception\n"
        );
        assert_eq!(
            crash_summary(&with_runtime_panic).as_deref(),
            Some("KeyError: 'x'")
        );
        let chained = "Traceback (most recent call last):\n  File \"a\"\nOSError: first\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b\"\nwarden.Failed: second\n";
        assert_eq!(
            crash_summary(chained).as_deref(),
            Some("warden.Failed: second")
        );
    }

    #[test]
    fn a_js_error_is_its_name_and_message() {
        let stderr = "TypeError: args.path is undefined\nbefore@app.js:9:11\n";
        assert_eq!(
            crash_summary(stderr).as_deref(),
            Some("TypeError: args.path is undefined")
        );
    }

    #[test]
    fn other_output_is_no_crash_line() {
        assert_eq!(crash_summary("counted 3 files\nall good"), None);
        assert_eq!(crash_summary(""), None);
    }
}
