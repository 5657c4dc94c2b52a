//! A hook for the test suite, loaded several times under different plugin
//! names. What each copy does is set by the one environment variable its
//! config entry grants (any name starting with `FIXTURE_HOOK`), holding JSON:
//!
//! ```json
//! {"label": "a", "before": "mark", "after": "mark", "calls": ["c1"], "set": {"filePath": "x"}}
//! ```
//!
//! - `before`: `allow` (default), `mark` (append `before:<label>` to the
//!   `trail` argument, as a rewrite), `rewrite` (merge `set` into the
//!   arguments), `block`, `ask`, `trap` (panic), `not-an-object` (a rewrite
//!   that breaks the contract);
//! - `after`: `keep` (default), `mark` (append a line `after:<label>` to the
//!   output), `trap`;
//! - `calls`: act only on these call ids (default: every call).
//!
//! Its self-description runs without environment, so it asks for every tool
//! at both stages and decides per call.

use serde::Deserialize;
use warden_plugin_sdk::{After, Before, Context, Hook, Output, Value, json};

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Script {
    label: String,
    before: Option<String>,
    after: Option<String>,
    calls: Option<Vec<String>>,
    set: Option<serde_json::Map<String, Value>>,
}

/// The script granted to this copy, if it applies to this call.
fn script(ctx: &Context) -> Option<Script> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("FIXTURE_HOOK"))
        .collect();
    vars.sort();
    let (name, text) = vars.into_iter().next()?;
    let s: Script = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => panic!("{name} is not a fixture script: {e}"),
    };
    match &s.calls {
        Some(calls) if !calls.contains(&ctx.call_id) => None,
        _ => Some(s),
    }
}

struct Fixture;

impl Hook for Fixture {
    fn before_tools() -> Vec<String> {
        vec!["*".into()]
    }

    fn after_tools() -> Vec<String> {
        vec!["*".into()]
    }

    fn before(ctx: &Context, tool: &str, mut args: Value) -> Before {
        let Some(s) = script(ctx) else {
            return Before::Allow;
        };
        match s.before.as_deref().unwrap_or("allow") {
            "allow" => Before::Allow,
            "mark" => {
                let mut trail = args
                    .get("trail")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                trail.push(json!(format!("before:{}", s.label)));
                if let Value::Object(m) = &mut args {
                    m.insert("trail".into(), Value::Array(trail));
                }
                Before::Rewrite(args)
            }
            "rewrite" => {
                if let (Value::Object(m), Some(set)) = (&mut args, s.set) {
                    m.extend(set);
                }
                Before::Rewrite(args)
            }
            "block" => Before::Block(format!("fixture {} blocks {tool}", s.label)),
            "ask" => Before::Ask(format!("fixture {} wants a person to approve", s.label)),
            "trap" => panic!("fixture hook {} trapped before {tool}", s.label),
            "not-an-object" => Before::Rewrite(json!("not an object")),
            other => panic!("unknown before action {other}"),
        }
    }

    fn after(ctx: &Context, tool: &str, _args: &Value, output: &Output) -> After {
        let Some(s) = script(ctx) else {
            return After::Keep;
        };
        match s.after.as_deref().unwrap_or("keep") {
            "keep" => After::Keep,
            "mark" => {
                let mut o = output.clone();
                o.output.push_str(&format!("\nafter:{}", s.label));
                After::Rewrite(o)
            }
            "trap" => panic!("fixture hook {} trapped after {tool}", s.label),
            other => panic!("unknown after action {other}"),
        }
    }
}

warden_plugin_sdk::export_hook!(Fixture);
