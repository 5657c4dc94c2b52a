//! A spinner on the terminal while the session waits on the model, so a
//! model that thinks for seconds does not look like a hung process. Drawn
//! on standard error, only when it is a terminal (never when piped), and
//! cleared before anything else is printed.

use std::io::Write;
use std::time::Instant;

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The spinner's state; the renderer says when the wait starts and stops.
pub struct Spinner {
    enabled: bool,
    since: Option<Instant>,
    frame: usize,
    shown: bool,
}

impl Spinner {
    /// `enabled` only when standard error is a terminal.
    pub fn new(enabled: bool) -> Self {
        Spinner {
            enabled,
            since: None,
            frame: 0,
            shown: false,
        }
    }

    /// The session is waiting on the model (a no-op if it already was).
    pub fn wait(&mut self) {
        self.since.get_or_insert_with(Instant::now);
    }

    /// The wait is over: the model answered, or something else happens.
    pub fn stop(&mut self) {
        self.since = None;
        self.clear();
    }

    /// Remove the spinner's line before other output.
    pub fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.shown = false;
        }
    }

    /// Draw the next frame, if waiting.
    pub fn tick(&mut self) {
        let Some(since) = self.since else {
            return;
        };
        if !self.enabled {
            return;
        }
        self.frame = (self.frame + 1) % FRAMES.len();
        let text = line(self.frame, since.elapsed().as_secs_f64());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{text}");
        let _ = err.flush();
        self.shown = true;
    }
}

/// One frame: `⠙ waiting for the model… 3.2s`.
pub fn line(frame: usize, secs: f64) -> String {
    format!(
        "{} waiting for the model… {secs:.1}s",
        FRAMES[frame % FRAMES.len()]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_turn_and_count_seconds() {
        assert_eq!(line(0, 0.04), "⠋ waiting for the model… 0.0s");
        assert_eq!(line(11, 3.25), "⠙ waiting for the model… 3.2s");
    }

    #[test]
    fn waiting_starts_once_and_stops() {
        let mut s = Spinner::new(false);
        assert!(s.since.is_none());
        s.wait();
        let first = s.since;
        s.wait();
        assert_eq!(s.since, first, "a second wait keeps the first start");
        s.tick();
        assert!(!s.shown, "a disabled spinner draws nothing");
        s.stop();
        assert!(s.since.is_none());
    }
}
