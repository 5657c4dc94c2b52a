//! `warden audit`: the audit trail across sessions — what a plugin did,
//! what was asked, what was refused, since when.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde_json::json;
use warden_core::ledger::audit_query::{AuditFilter, DecisionClass};

use crate::session_cmd::{clip, time};
use crate::{Common, Format, app};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Decision {
    /// Refused by a rule, or answered `reject`.
    Denied,
    /// Asked of a person, whatever the answer.
    Asked,
    /// Let through by a rule or by an answer.
    Allowed,
}

#[derive(clap::Args)]
pub struct AuditArgs {
    /// Only what this plugin did and what was decided about its tools and hooks.
    #[arg(long)]
    pub plugin: Option<String>,
    #[arg(long, value_enum)]
    pub decision: Option<Decision>,
    /// Only rows since this time: an RFC 3339 time (`2026-12-01T09:00:00Z`)
    /// or an age (`7d`, `12h`, `30m`).
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many rows, the newest (0: all).
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
    /// `text` (a table) or `json` (one document: an array of rows).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[command(flatten)]
    pub common: Common,
}

/// `7d`, `12h` or an RFC 3339 time, as ms since the epoch.
pub fn parse_since(text: &str, now_ms: i64) -> Result<i64> {
    if let Ok(age) = humantime::parse_duration(text) {
        return Ok(now_ms - age.as_millis() as i64);
    }
    match humantime::parse_rfc3339_weak(text) {
        Ok(t) => Ok(t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)),
        Err(_) => bail!(
            "--since {text:?} is neither an age (7d, 12h, 30m) nor a time (2026-12-01T09:00:00Z)"
        ),
    }
}

pub async fn audit(args: AuditArgs) -> Result<ExitCode> {
    let data_dir = app::data_dir(&args.common)?;
    let ledger = app::ledger(&args.common).await?;
    let mut filter = AuditFilter {
        limit: args.limit,
        decision: args.decision.map(|d| match d {
            Decision::Denied => DecisionClass::Denied,
            Decision::Asked => DecisionClass::Asked,
            Decision::Allowed => DecisionClass::Allowed,
        }),
        since: args
            .since
            .as_deref()
            .map(|s| parse_since(s, warden_core::clock::now_ms()))
            .transpose()?,
        ..Default::default()
    };
    if let Some(name) = &args.plugin {
        // A plugin is known by its tools, its hook and its content hash.
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let config = app::config(&args.common, &cwd)?.config;
        let host = app::load_host(&config, &data_dir)
            .await
            .context("cannot load the plugins")?;
        let Some(p) = host.plugins().iter().find(|p| &*p.name == name.as_str()) else {
            let known: Vec<&str> = host.plugins().iter().map(|p| &*p.name).collect();
            bail!("no plugin named {name:?}; loaded: {}", known.join(", "));
        };
        filter.subjects = p.tools().iter().map(|t| t.id.clone()).collect();
        filter.subjects.push(format!("hook:{name}"));
        filter.hashes = vec![p.hash.clone()];
    }
    let rows = ledger.audit_query(&filter).await?;
    if args.format == Format::Json {
        say!("{}", serde_json::to_string_pretty(&json!(rows))?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        say!("no audit rows match");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = crate::table::table(&[
        "at", "session", "call", "stage", "subject", "decision", "rule", "took", "outcome",
    ]);
    for a in &rows {
        t.add_row(vec![
            time(a.at),
            a.session_id.to_string(),
            a.call_id.clone().unwrap_or_default(),
            a.stage.clone(),
            a.subject.clone(),
            a.decision.clone(),
            a.rule.clone().unwrap_or_default(),
            crate::table::took_us(a.duration_us),
            clip(a.outcome.as_deref().unwrap_or(""), 60),
        ]);
    }
    say!("{t}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_ages_and_times() {
        assert_eq!(
            parse_since("1h", 10_000_000).unwrap(),
            10_000_000 - 3_600_000
        );
        assert_eq!(parse_since("1970-01-01T00:00:01Z", 0).unwrap(), 1000);
        assert!(parse_since("last week", 0).is_err());
    }
}
