//! `warden demo`: the seed scenario, offline. In a fresh scratch project with
//! a `package.json`, the user asks which scripts it has; the scripted model
//! first calls `read` on it, then answers from the result.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;
use warden_core::PromptInput;
use warden_protocol::ModelRef;

use crate::{Common, Format, app, render, run};

const PACKAGE_JSON: &str = r#"{
  "name": "warden-demo",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "dev": "vite",
    "build": "tsc && vite build",
    "test": "vitest run",
    "lint": "eslint src --max-warnings 0"
  },
  "devDependencies": {
    "typescript": "^5.6.0",
    "vite": "^6.0.0",
    "vitest": "^2.1.0",
    "eslint": "^9.15.0"
  }
}
"#;

const PROMPT: &str = "Read package.json and tell me which scripts it has.";

const ANSWER: &str = "package.json defines four scripts:\n\
- `dev`: `vite` (start the development server)\n\
- `build`: `tsc && vite build` (type-check, then build for production)\n\
- `test`: `vitest run` (run the tests once)\n\
- `lint`: `eslint src --max-warnings 0` (lint the sources, failing on any warning)";

pub async fn demo(common: Common) -> Result<ExitCode> {
    let data_dir = app::data_dir(&common)?;
    let stamp = chrono_like_stamp();
    let root = data_dir.join("demo").join(&stamp);
    let project = root.join("project");
    std::fs::create_dir_all(&project)
        .with_context(|| format!("cannot create {}", project.display()))?;
    std::fs::write(project.join("package.json"), PACKAGE_JSON)?;
    let cassette = root.join("cassette.json");
    let turns = json!({"turns": [
        {"tool_calls": [{"id": "call_1", "name": "read", "arguments": {"filePath": "package.json"}}]},
        {"text": ANSWER}
    ]});
    std::fs::write(&cassette, serde_json::to_string_pretty(&turns)?)?;

    let app = app::build(&common, &project).await?;
    let session = app.core.create_session(&project, PROMPT).await?;
    say!("warden demo: a scripted model in a scratch project, offline");
    say!("project: {}", project.display());
    say!("prompt:  {PROMPT}");
    say!();
    let input = PromptInput {
        session_id: session.id.clone(),
        text: PROMPT.into(),
        model: Some(ModelRef {
            provider: "scripted".into(),
            model: cassette.to_string_lossy().into_owned(),
        }),
        ..PromptInput::default()
    };
    let core = app.core.clone();
    let result = render::drive(&app.core, &session.id, Format::Text, async move {
        core.prompt(input).await
    })
    .await;
    let code = run::finish(Format::Text, &session.id, result)?;
    let d = app.data_dir.display();
    say!();
    say!(
        "ledger:   {} (session {})",
        app.core.ledger().path(),
        session.id
    );
    say!(
        "replay:   warden session show {} --data-dir {d}",
        session.id
    );
    say!("timeline: warden trace {} --data-dir {d}", session.id);
    Ok(code)
}

/// A sortable, unique-enough folder name: UTC time plus the process id.
fn chrono_like_stamp() -> String {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    format!(
        "{}-{}",
        t.replace([':', '-'], "").trim_end_matches('Z'),
        std::process::id()
    )
}
