//! Rendering a session's bus events on the terminal: live tool states and
//! streamed text for people, or one JSON event per line.
//!
//! While a permission question waits for its answer on the terminal, other
//! output is held back and printed after the answer, so the question is
//! never split by a line about another call.

use std::collections::HashMap;
use std::future::Future;
use std::io::{IsTerminal, Write};

use tokio::sync::broadcast::error::RecvError;
use warden_core::Core;
use warden_protocol::{
    Event, MessageInfo, MessageWithParts, PartBody, PermissionReply, SessionId, SessionStatus,
    ToolState, next_event_id,
};

use crate::Format;
use crate::session_cmd::clip;
use crate::spinner::Spinner;

/// Output held back while a question is on the terminal (`Some` while one is).
static HELD: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Print to standard output, or hold it while a question is asked.
fn emit(text: &str) {
    // Text was cleaned where it was rendered; JSON lines are made safe here
    // (the same JSON value, its control characters escaped).
    let text = &*warden_protocol::text::json_terminal_safe(text);
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    match held.as_mut() {
        Some(buffer) => buffer.push_str(text),
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
}

/// Whether a question is on the terminal now.
fn asking() -> bool {
    HELD.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// Prints one session's events.
pub struct Renderer {
    format: Format,
    session: SessionId,
    /// How much of each text part is already on screen.
    printed: HashMap<String, usize>,
    /// The last status shown for each tool part.
    shown: HashMap<String, &'static str>,
    /// Assistant message ids, so the user's own text is not echoed.
    assistant: std::collections::HashSet<String>,
    mid_line: bool,
    /// Whether anything was printed yet (a text after tool lines gets a blank line).
    printed_any: bool,
    spinner: Spinner,
}

impl Renderer {
    pub fn new(format: Format, session: SessionId) -> Self {
        Renderer {
            format,
            session,
            printed: HashMap::new(),
            shown: HashMap::new(),
            assistant: Default::default(),
            mid_line: false,
            printed_any: false,
            spinner: Spinner::new(false),
        }
    }

    /// Show a spinner on standard error while the model is waited on.
    pub fn with_spinner(mut self, on: bool) -> Self {
        self.spinner = Spinner::new(on);
        self.spinner.wait();
        self
    }

    /// Move the spinner on (unless a question is on the terminal).
    pub fn tick(&mut self) {
        if !asking() {
            self.spinner.tick();
        }
    }

    fn line(&mut self, text: &str) {
        let text = clean(text);
        self.spinner.clear();
        let lead = if self.mid_line { "\n" } else { "" };
        self.mid_line = false;
        emit(&format!("{lead}{text}\n"));
        self.printed_any = true;
    }

    /// Render one event (events of other sessions are skipped).
    pub fn event(&mut self, event: &Event) {
        if event.session_id() != &self.session {
            return;
        }
        if self.format == Format::Json {
            // The same envelope as the server's event stream.
            if let Ok(line) = serde_json::to_string(&event.envelope(next_event_id())) {
                emit(&format!("{line}\n"));
            }
            return;
        }
        match event {
            Event::MessageUpdated {
                info: MessageInfo::Assistant(a),
            } => {
                // A new step asks the model; its end ends the wait.
                if self.assistant.insert(a.id.to_string()) && a.time.completed.is_none() {
                    self.spinner.wait();
                } else if a.time.completed.is_some() {
                    self.spinner.stop();
                }
            }
            Event::PartUpdated { part, .. } => match &part.body {
                PartBody::Text {
                    text,
                    synthetic: false,
                    ..
                } if self.assistant.contains(part.message_id.as_str()) => {
                    if !text.is_empty() {
                        self.spinner.stop();
                    }
                    let first = self.printed.get(part.id.as_str()).is_none_or(|n| *n == 0);
                    if first && !text.is_empty() && self.printed_any && !self.mid_line {
                        emit("\n");
                    }
                    let done = self.printed.entry(part.id.to_string()).or_insert(0);
                    if text.len() > *done && text.is_char_boundary(*done) {
                        self.printed_any = true;
                        emit(&clean(&text[*done..]));
                        *done = text.len();
                        self.mid_line = !text.ends_with('\n');
                    }
                }
                PartBody::Tool {
                    call_id,
                    tool,
                    state,
                    ..
                } => {
                    self.spinner.stop();
                    let status = state.status();
                    if self.shown.get(part.id.as_str()) == Some(&status) {
                        return;
                    }
                    self.shown.insert(part.id.to_string(), status);
                    let detail = tool_detail(state);
                    self.line(&format!("  {tool}  {call_id}  {detail}"));
                }
                _ => {}
            },
            Event::SessionStatus {
                status:
                    SessionStatus::Retry {
                        attempt,
                        message,
                        next,
                    },
                ..
            } => {
                let wait = (next - warden_core::clock::now_ms()).max(0) as f64 / 1000.0;
                self.line(&format!(
                    "  retrying in {wait:.1}s (attempt {attempt} failed: {message})"
                ));
                self.spinner.wait();
            }
            Event::SessionWarning { message, .. } => self.line(&format!("warning: {message}")),
            // Why a run ends without an answer goes to standard error,
            // with the other diagnostics, not among the answer's lines.
            Event::SessionError { error, .. } => {
                self.spinner.clear();
                if self.mid_line {
                    emit("\n");
                    self.mid_line = false;
                }
                eprintln!("error: {}", clean(error.message()));
            }
            Event::PermissionAsked { request } => {
                self.spinner.stop();
                self.line(&format!(
                    "  permission asked: {} on {}",
                    request.permission,
                    request.patterns.join(", ")
                ));
            }
            Event::PermissionReplied { reply, .. } => {
                let word = match reply {
                    PermissionReply::Once => "allowed once",
                    PermissionReply::Always => "allowed for this session",
                    PermissionReply::Reject => "denied",
                };
                self.line(&format!("  permission {word}"));
            }
            _ => {}
        }
    }

    /// End the output cleanly.
    pub fn finish(&mut self) {
        self.spinner.stop();
        if self.mid_line {
            emit("\n");
            self.mid_line = false;
        }
    }

    pub fn lagged(&mut self, missed: u64) {
        if self.format == Format::Text {
            self.line(&format!(
                "  ({missed} events were too fast to show; `warden session show` has them all)"
            ));
        }
    }
}

fn tool_detail(state: &ToolState) -> String {
    match state {
        ToolState::Pending { .. } => "pending".into(),
        ToolState::Running { input, .. } => format!("running    {}", clip(&input.to_string(), 100)),
        ToolState::Completed { title, time, .. } => {
            format!(
                "completed  {} ms  {}",
                time.end - time.start,
                clip(title, 100)
            )
        }
        ToolState::Error {
            error,
            time,
            interrupted,
            ..
        } => {
            let what = if *interrupted {
                "error (interrupted)"
            } else {
                "error"
            };
            format!("{what}  {} ms  {}", time.end - time.start, clip(error, 200))
        }
    }
}

/// Model, plugin and provider text shown on a terminal, without control
/// characters (an escape sequence could rewrite what a question says).
fn clean(s: &str) -> String {
    warden_protocol::text::terminal_safe(s).into_owned()
}

/// Run `work` while rendering the session's events, answering permission
/// questions on the terminal when one is attached. Returns what `work` returns
/// once every event it caused has been rendered.
pub async fn drive<F>(
    core: &Core,
    session: &SessionId,
    format: Format,
    work: F,
) -> warden_core::Result<MessageWithParts>
where
    F: Future<Output = warden_core::Result<MessageWithParts>>,
{
    let mut rx = core.bus().subscribe();
    let interactive =
        format == Format::Text && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let _attached = interactive.then(|| core.permissions().attach());
    // One question at a time, from one thread: answers go to the question shown.
    let asker = interactive.then(|| terminal_asker(core.permissions().clone()));
    let spin = format == Format::Text && std::io::stderr().is_terminal();
    let mut renderer = Renderer::new(format, session.clone()).with_spinner(spin);
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            r = &mut work => break r,
            _ = ticks.tick(), if spin => renderer.tick(),
            e = rx.recv() => match e {
                Ok(ev) => {
                    renderer.event(&ev);
                    if let (Some(asker), Event::PermissionAsked { request }) = (&asker, &*ev)
                        && &request.session_id == session
                    {
                        let _ = asker.send(request.clone());
                    }
                }
                Err(RecvError::Lagged(n)) => renderer.lagged(n),
                Err(RecvError::Closed) => {}
            },
        }
    };
    while let Ok(ev) = rx.try_recv() {
        renderer.event(&ev);
    }
    renderer.finish();
    result
}

/// A thread that asks the terminal each question in turn, skipping those
/// settled meanwhile (e.g. by an `always` answer to an earlier one).
fn terminal_asker(
    permissions: warden_core::permission::Permissions,
) -> std::sync::mpsc::Sender<warden_protocol::PermissionRequest> {
    let (tx, rx) = std::sync::mpsc::channel::<warden_protocol::PermissionRequest>();
    // The answer is recorded through the runtime the session runs on.
    let runtime = tokio::runtime::Handle::try_current().ok();
    // A plain thread, not the runtime's blocking pool: one waiting on a line
    // that never comes must not hold up the process's exit.
    std::thread::spawn(move || {
        for request in rx {
            if !permissions
                .pending(Some(&request.session_id))
                .iter()
                .any(|p| p.id == request.id)
            {
                continue;
            }
            let question = clean(&format!(
                "allow {} on {}? [o]nce / [a]lways / [r]eject: ",
                request.permission,
                request.patterns.join(", ")
            ));
            // Other output waits until the question is answered.
            *HELD.lock().unwrap_or_else(|p| p.into_inner()) = Some(String::new());
            let stdin = std::io::stdin();
            let reply = ask_terminal(&question, &mut stdin.lock(), &mut std::io::stderr());
            let answer = permissions.reply(&request.id, reply);
            let _ = match &runtime {
                Some(rt) => rt.block_on(answer),
                None => futures::executor::block_on(answer),
            };
            let held = HELD.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(held) = held {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(held.as_bytes());
                let _ = out.flush();
            }
        }
    });
    tx
}

/// Ask until the answer is one of the choices; end of input rejects.
fn ask_terminal(
    question: &str,
    input: &mut impl std::io::BufRead,
    prompt: &mut impl Write,
) -> PermissionReply {
    loop {
        let _ = write!(prompt, "{question}");
        let _ = prompt.flush();
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return PermissionReply::Reject,
            Ok(_) => {}
        }
        match parse_answer(&line) {
            Some(reply) => return reply,
            None => {
                let _ = writeln!(
                    prompt,
                    "  {:?} is not an answer: type o (once), a (always) or r (reject)",
                    clean(line.trim())
                );
            }
        }
    }
}

fn parse_answer(line: &str) -> Option<PermissionReply> {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Some(PermissionReply::Once),
        "a" | "always" => Some(PermissionReply::Always),
        "r" | "reject" | "n" | "no" => Some(PermissionReply::Reject),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_asked_again_and_end_of_input_rejects() {
        let mut prompt = Vec::new();
        let reply = ask_terminal("allow? ", &mut "onse\n\nA\n".as_bytes(), &mut prompt);
        assert_eq!(reply, PermissionReply::Always);
        assert_eq!(
            String::from_utf8(prompt).unwrap(),
            "allow?   \"onse\" is not an answer: type o (once), a (always) or r (reject)\n\
             allow?   \"\" is not an answer: type o (once), a (always) or r (reject)\n\
             allow? "
        );
        let mut prompt = Vec::new();
        assert_eq!(
            ask_terminal("allow? ", &mut "maybe\n".as_bytes(), &mut prompt),
            PermissionReply::Reject
        );
    }

    #[test]
    fn output_is_held_while_a_question_waits() {
        *HELD.lock().unwrap() = Some(String::new());
        emit("  read  c2  completed\n");
        assert!(asking());
        let held = HELD.lock().unwrap().take();
        assert_eq!(held.as_deref(), Some("  read  c2  completed\n"));
        assert!(!asking());
    }
}
