//! Rendering a session's bus events on the terminal: live tool states and
//! streamed text for people, or one JSON event per line.

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
        }
    }

    fn line(&mut self, text: &str) {
        let text = &clean(text);
        let mut out = std::io::stdout().lock();
        if self.mid_line {
            let _ = writeln!(out);
            self.mid_line = false;
        }
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
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
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            return;
        }
        match event {
            Event::MessageUpdated {
                info: MessageInfo::Assistant(a),
            } => {
                self.assistant.insert(a.id.to_string());
            }
            Event::PartUpdated { part, .. } => match &part.body {
                PartBody::Text {
                    text,
                    synthetic: false,
                    ..
                } if self.assistant.contains(part.message_id.as_str()) => {
                    let first = self.printed.get(part.id.as_str()).is_none_or(|n| *n == 0);
                    if first && !text.is_empty() && self.printed_any && !self.mid_line {
                        say!();
                    }
                    let done = self.printed.entry(part.id.to_string()).or_insert(0);
                    if text.len() > *done && text.is_char_boundary(*done) {
                        self.printed_any = true;
                        let mut out = std::io::stdout().lock();
                        let _ = write!(out, "{}", clean(&text[*done..]));
                        let _ = out.flush();
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
            }
            Event::SessionWarning { message, .. } => self.line(&format!("warning: {message}")),
            Event::SessionError { error, .. } => self.line(&format!("error: {}", error.message())),
            Event::PermissionAsked { request } => {
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
        if self.mid_line {
            say!();
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

fn clip(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// Model, plugin and provider text shown on a terminal, without control
/// characters (an escape sequence could rewrite what a question says).
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '?'
            } else {
                c
            }
        })
        .collect()
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
    let mut renderer = Renderer::new(format, session.clone());
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            r = &mut work => break r,
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
            let _ = permissions.reply(&request.id, ask_terminal(&question));
        }
    });
    tx
}

fn ask_terminal(question: &str) -> PermissionReply {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() {
        return PermissionReply::Reject;
    }
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => PermissionReply::Once,
        "a" | "always" => PermissionReply::Always,
        _ => PermissionReply::Reject,
    }
}
