//! `warden run`: one prompt, non-interactive.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use warden_core::PromptInput;
use warden_llm::Models;
use warden_protocol::{MessageInfo, MessageWithParts, SessionId, next_event_id};

use crate::{Common, Format, app, render};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The prompt. Leave it out (or give `-`) to read it from standard
    /// input, e.g. `warden run < prompt.md`.
    pub prompt: Option<String>,
    /// Read the prompt from this file (no size limit, unlike an argument).
    #[arg(long, conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// The model: provider/model, or scripted:PATH for a cassette.
    #[arg(long, short)]
    pub model: Option<String>,
    /// The working directory the tools see (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The agent (default: build).
    #[arg(long)]
    pub agent: Option<String>,
    /// Continue this session instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[command(flatten)]
    pub common: Common,
}

/// The prompt: the argument, the file, or standard input.
fn prompt_text(args: &RunArgs) -> Result<String> {
    use std::io::{IsTerminal, Read};
    if let Some(path) = &args.file {
        return std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the prompt from {}", path.display()));
    }
    match args.prompt.as_deref() {
        Some("-") | None => {
            let stdin = std::io::stdin();
            if args.prompt.is_none() && stdin.is_terminal() {
                anyhow::bail!(
                    "no prompt: give it as an argument, with --file PATH, or on standard input"
                );
            }
            let mut text = String::new();
            stdin
                .lock()
                .read_to_string(&mut text)
                .context("cannot read the prompt from standard input")?;
            Ok(text)
        }
        Some(p) => Ok(p.to_string()),
    }
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let prompt = prompt_text(&args)?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let model = match &args.model {
        Some(m) => Some(Models::parse(m).map_err(|e| anyhow::anyhow!(e))?),
        None => None,
    };
    // A relative cassette path is relative to where the user is, not to --dir.
    let model = model.map(|mut m| {
        if m.provider == "scripted" {
            let p = PathBuf::from(&m.model);
            if p.is_relative()
                && let Ok(cwd) = std::env::current_dir()
            {
                m.model = cwd.join(p).to_string_lossy().into_owned();
            }
        }
        m
    });
    let app = app::build(&args.common, &dir).await?;
    let existing = args.session.as_ref().map(|id| SessionId(id.clone()));
    if let Some(id) = &existing {
        app.core.ledger().session(id).await?;
    }
    if prompt.trim().is_empty() {
        anyhow::bail!("the prompt is empty");
    }
    // Check the model before creating a session, so a bad one writes nothing.
    let model = match app
        .core
        .choose_model(model.as_ref(), args.agent.as_deref(), existing.as_ref())
        .await
    {
        Err(warden_core::CoreError::NoModel) => anyhow::bail!(
            "no model chosen: pass --model provider/model (or scripted:PATH), or set \"model\" in the config"
        ),
        other => other?,
    };
    let session = match existing {
        Some(id) => app.core.ledger().session(&id).await?,
        None => app.core.create_session(&dir, &prompt).await?,
    };
    if args.format == Format::Text {
        // On standard error, so the answer alone goes down a pipe.
        eprintln!(
            "session {}  (warden trace {} shows where its time went)",
            session.id, session.id
        );
    }
    let input = PromptInput {
        session_id: session.id.clone(),
        text: prompt,
        agent: args.agent.clone(),
        model: Some(model),
        ..PromptInput::default()
    };
    let core = app.core.clone();
    let result = render::drive(&app.core, &session.id, args.format, async move {
        core.prompt(input).await
    })
    .await;
    finish(args.format, &session.id, result)
}

/// Print how a run ended and choose the exit code.
pub fn finish(
    format: Format,
    session: &SessionId,
    result: warden_core::Result<MessageWithParts>,
) -> Result<ExitCode> {
    let message = match result {
        Ok(m) => m,
        Err(e) => {
            if format == Format::Json {
                say!(
                    "{}",
                    serde_json::json!({"id": next_event_id(), "type": "run.finished",
                        "properties": {"sessionID": session, "error": e.to_string()}})
                );
            }
            return Err(e.into());
        }
    };
    let error = match &message.info {
        MessageInfo::Assistant(a) => a.error.clone(),
        MessageInfo::User(_) => None,
    };
    if format == Format::Json {
        say!(
            "{}",
            serde_json::json!({
                "id": next_event_id(),
                "type": "run.finished",
                "properties": {
                    "sessionID": session,
                    "messageID": message.info.id(),
                    "text": message.text(),
                    "error": error.as_ref().map(|e| e.message().to_string()),
                    // OpenCode's name of the error (MessageStoppedError: the
                    // loop stopped before the model answered, and `error` says why).
                    "errorName": error.as_ref().and_then(|e| serde_json::to_value(e).ok()).and_then(|v| v.get("name").cloned()),
                },
            })
        );
    }
    Ok(if error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
