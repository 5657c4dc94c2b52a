//! Example hook `redact`: a `tool.execute.after` hook on every tool that
//! replaces secrets in the output with `[REDACTED]` before the model (and
//! the ledger) ever hold them, and counts what it replaced in the output's
//! metadata under `redacted`.
//!
//! It recognises the shapes secrets have when they leak: API keys with a
//! known prefix (`sk-…`, `ghp_…`, `github_pat_…`, `AKIA…`, `xoxb-…`,
//! `AIza…`, `sk_live_…`), `Bearer` tokens, AWS secret keys written next to
//! their name, and PEM private-key blocks (also when the output was cut in
//! the middle of one). A BEGIN…END span goes whole even when other lines
//! sit between the two (as in `grep` output): redacting too much is the safe
//! mistake. It cannot know a secret with no recognisable shape; deny `read`
//! on such files in the permission rules instead.

use std::collections::BTreeMap;

use regex::Regex;
use warden_plugin_sdk::{After, Context, Hook, Output, Value, json};

/// What replaces a secret.
pub const MARK: &str = "[REDACTED]";

/// (kind, pattern, replacement). A replacement keeps what names the secret
/// (`Bearer `, `aws_secret_access_key = `) so the model still understands
/// the text.
const RULES: &[(&str, &str, &str)] = &[
    (
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)-----END [A-Z0-9 ]*PRIVATE KEY-----",
        MARK,
    ),
    // A block whose end was cut off (a capped read): the BEGIN line and the
    // base64 lines after it, raw or line-numbered as `read` shows them.
    (
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:\r?\n(?: *\d+\t)?[A-Za-z0-9+/=]{16,}[ \t\r]*(?m:$))*",
        MARK,
    ),
    (
        "api-key",
        r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        MARK,
    ),
    (
        "stripe-key",
        r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
        MARK,
    ),
    ("github-token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b", MARK),
    ("github-token", r"\bgithub_pat_[A-Za-z0-9_]{22,}", MARK),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", MARK),
    (
        "aws-secret-key",
        r"(?i)(aws_secret_access_key[\x22']?\s*[:=]\s*[\x22']?)[A-Za-z0-9/+=]{40}",
        "${1}[REDACTED]",
    ),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", MARK),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}", MARK),
    (
        "bearer-token",
        r"\b((?i:bearer)\s+)[A-Za-z0-9._~+/-]{8,}=*",
        "${1}[REDACTED]",
    ),
];

struct Redact;

impl Hook for Redact {
    fn after_tools() -> Vec<String> {
        vec!["*".into()]
    }

    fn after(_ctx: &Context, _tool: &str, _args: &Value, output: &Output) -> After {
        let rules = match compiled() {
            Ok(r) => r,
            // The patterns are fixed, so this is a bug in this hook, not
            // something a model can cause; withhold rather than leak.
            Err(e) => {
                return After::Rewrite(Output::text(format!(
                    "{MARK} (the redact hook could not compile its rules: {e}; the output was withheld)"
                )));
            }
        };
        let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
        let text = redact(&rules, &output.output, &mut counts);
        let title = redact(&rules, &output.title, &mut counts);
        let mut metadata = redact_value(&rules, &output.metadata, &mut counts);
        let total: u64 = counts.values().sum();
        if total == 0 {
            return After::Keep;
        }
        if let Value::Object(m) = &mut metadata {
            m.insert("redacted".into(), json!({"count": total, "kinds": counts}));
        }
        After::Rewrite(Output {
            output: text,
            title,
            metadata,
        })
    }
}

warden_plugin_sdk::export_hook!(Redact);

fn compiled() -> Result<Vec<(&'static str, Regex, &'static str)>, regex::Error> {
    RULES
        .iter()
        .map(|&(kind, pattern, with)| Ok((kind, Regex::new(pattern)?, with)))
        .collect()
}

/// `text` with every rule applied in order, counting replacements by kind.
fn redact(
    rules: &[(&'static str, Regex, &'static str)],
    text: &str,
    counts: &mut BTreeMap<&'static str, u64>,
) -> String {
    let mut out = text.to_string();
    for (kind, re, with) in rules {
        let n = re.find_iter(&out).count() as u64;
        if n > 0 {
            *counts.entry(kind).or_default() += n;
            out = re.replace_all(&out, *with).into_owned();
        }
    }
    out
}

/// Redact every string inside a JSON value (tools put paths, patterns and
/// previews in metadata).
fn redact_value(
    rules: &[(&'static str, Regex, &'static str)],
    v: &Value,
    counts: &mut BTreeMap<&'static str, u64>,
) -> Value {
    match v {
        Value::String(s) => Value::String(redact(rules, s, counts)),
        Value::Array(a) => Value::Array(a.iter().map(|x| redact_value(rules, x, counts)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), redact_value(rules, x, counts)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (String, BTreeMap<&'static str, u64>) {
        let rules = compiled().unwrap();
        let mut counts = BTreeMap::new();
        (redact(&rules, text, &mut counts), counts)
    }

    #[test]
    fn keys_with_known_prefixes_are_replaced_and_counted_by_kind() {
        let (out, counts) = run("OPENAI=sk-proj-abcdefghijklmnopqrstuvwx12\n\
             gh: ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ ok\n\
             AKIAIOSFODNN7EXAMPLE and xoxb-1234567890-abcdefghij\n\
             aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n");
        assert_eq!(
            out,
            "OPENAI=[REDACTED]\ngh: [REDACTED] ok\n[REDACTED] and [REDACTED]\n\
             aws_secret_access_key = [REDACTED]\n"
        );
        assert_eq!(
            counts,
            BTreeMap::from([
                ("api-key", 1),
                ("aws-access-key", 1),
                ("aws-secret-key", 1),
                ("github-token", 1),
                ("slack-token", 1),
            ])
        );
    }

    #[test]
    fn bearer_tokens_keep_their_label() {
        let (out, _) = run("Authorization: Bearer eyJhbGciOi.eyJzdWIi.sig_-x==\n");
        assert_eq!(out, "Authorization: Bearer [REDACTED]\n");
    }

    #[test]
    fn private_key_blocks_go_whole_even_when_cut_off() {
        let (out, counts) = run(
            "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890abcdef\n\
             -----END RSA PRIVATE KEY-----\nafter\n",
        );
        assert_eq!(out, "before\n[REDACTED]\nafter\n");
        assert_eq!(counts["private-key"], 1);
        // As `read` shows a file it capped mid-key.
        let (out, _) = run(
            "     1\t-----BEGIN PRIVATE KEY-----\n     2\tMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n     3\tBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n\n(output capped)",
        );
        assert_eq!(out, "     1\t[REDACTED]\n\n(output capped)");
    }

    #[test]
    fn look_alikes_stay() {
        for text in [
            "task-abcdefghijklmnopqrstuvwxyz",
            "sk-short",
            "the bearer of bad news",
            "AKIA-not-a-key",
        ] {
            let (out, counts) = run(text);
            assert_eq!(out, text);
            assert!(counts.is_empty(), "{text}");
        }
    }
}
