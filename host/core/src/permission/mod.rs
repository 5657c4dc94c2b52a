//! Permissions: rules, their evaluation, and the questions asked when a rule
//! says `ask`.
//!
//! A rule is `(permission, pattern) → allow | ask | deny`, both sides glob
//! patterns ([`wildcard`]). Among the operator's rules (global config
//! rules, then the agent's own) that match, the **last** one wins; no match
//! means `ask`. The session's rules and any restrictions can only tighten
//! that verdict, or answer an `ask` for a literal permission and pattern
//! ([`policy`]).
//!
//! The host checks permission before every guest call ([`crate::boundary`]);
//! this module only decides.

pub mod ask;
pub mod policy;
pub mod wildcard;

pub use ask::{Answer, AttachGuard, Permissions, Refusal};
pub use policy::Policy;

use serde_json::Value;
use warden_protocol::{Action, Rule};

/// The outcome of evaluating rules for one (permission, pattern).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub action: Action,
    /// The rule that decided; `None` when no rule matched (default `ask`).
    pub rule: Option<Rule>,
}

impl Evaluation {
    /// The rule as `permission pattern action`, for audit and messages.
    pub fn describe(&self) -> String {
        match &self.rule {
            Some(r) => format!("{} {} {}", r.permission, r.pattern, r.action.as_str()),
            None => "no matching rule (default ask)".to_string(),
        }
    }
}

/// Evaluate `permission` / `pattern` against rule lists taken in order.
pub fn evaluate(permission: &str, pattern: &str, rulesets: &[&[Rule]]) -> Evaluation {
    let hit = rulesets
        .iter()
        .rev()
        .flat_map(|rs| rs.iter().rev())
        .find(|r| {
            wildcard::matches(&r.permission, permission) && wildcard::matches(&r.pattern, pattern)
        });
    match hit {
        Some(r) => Evaluation {
            action: r.action,
            rule: Some(r.clone()),
        },
        None => Evaluation {
            action: Action::Ask,
            rule: None,
        },
    }
}

/// Evaluate several patterns of one call: any deny denies, all allow
/// allows, otherwise ask. Returns the deciding evaluation.
pub fn evaluate_all(permission: &str, patterns: &[String], rulesets: &[&[Rule]]) -> Evaluation {
    let evals: Vec<Evaluation> = if patterns.is_empty() {
        vec![evaluate(permission, "*", rulesets)]
    } else {
        patterns
            .iter()
            .map(|p| evaluate(permission, p, rulesets))
            .collect()
    };
    if let Some(deny) = evals.iter().find(|e| e.action == Action::Deny) {
        return deny.clone();
    }
    if let Some(ask) = evals.iter().find(|e| e.action == Action::Ask) {
        return ask.clone();
    }
    evals.into_iter().next().unwrap_or(Evaluation {
        action: Action::Ask,
        rule: None,
    })
}

/// Whether a tool is switched off entirely: the last rule for its permission
/// is `deny` on every pattern (`*`). Such tools are not offered to the model.
pub fn disabled(permission: &str, rulesets: &[&[Rule]]) -> bool {
    rulesets
        .iter()
        .rev()
        .flat_map(|rs| rs.iter().rev())
        .find(|r| wildcard::matches(&r.permission, permission))
        .is_some_and(|r| r.pattern == "*" && r.action == Action::Deny)
}

/// Parse the config's `permission` value, OpenCode's shape:
///
/// ```json
/// "allow"
/// {"*": "allow", "edit": "ask", "webfetch": {"*.example.com": "allow", "*": "deny"}}
/// ```
///
/// Keys keep their order, which matters: later rules win.
pub fn rules_from_config(value: &Value) -> Result<Vec<Rule>, String> {
    match value {
        Value::String(s) => Ok(vec![Rule {
            permission: "*".into(),
            pattern: "*".into(),
            action: action(s, "permission")?,
        }]),
        Value::Object(map) => {
            let mut rules = Vec::new();
            for (permission, v) in map {
                match v {
                    Value::String(s) => rules.push(Rule {
                        permission: permission.clone(),
                        pattern: "*".into(),
                        action: action(s, &format!("permission.{permission}"))?,
                    }),
                    Value::Object(patterns) => {
                        for (pattern, a) in patterns {
                            let Value::String(s) = a else {
                                return Err(format!(
                                    "permission.{permission}.{pattern} must be \"allow\", \"ask\" or \"deny\", not {a}"
                                ));
                            };
                            rules.push(Rule {
                                permission: permission.clone(),
                                pattern: pattern.clone(),
                                action: action(s, &format!("permission.{permission}.{pattern}"))?,
                            });
                        }
                    }
                    other => {
                        return Err(format!(
                            "permission.{permission} must be an action (\"allow\", \"ask\", \"deny\") or an object of pattern → action, not {other}"
                        ));
                    }
                }
            }
            Ok(rules)
        }
        other => Err(format!(
            "permission must be an action or an object of permission → action, not {other}"
        )),
    }
}

fn action(s: &str, at: &str) -> Result<Action, String> {
    match s {
        "allow" => Ok(Action::Allow),
        "ask" => Ok(Action::Ask),
        "deny" => Ok(Action::Deny),
        other => Err(format!(
            "{at} is {other:?}; use \"allow\", \"ask\" or \"deny\""
        )),
    }
}

/// The rules every agent starts from: tools allowed, a repeated identical
/// call (`doom_loop`) asked about. Config rules come after and win.
pub fn defaults() -> Vec<Rule> {
    vec![
        Rule {
            permission: "*".into(),
            pattern: "*".into(),
            action: Action::Allow,
        },
        Rule {
            permission: "doom_loop".into(),
            pattern: "*".into(),
            action: Action::Ask,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(p: &str, pat: &str, a: Action) -> Rule {
        Rule {
            permission: p.into(),
            pattern: pat.into(),
            action: a,
        }
    }

    #[test]
    fn the_last_matching_rule_wins_across_agent_and_session() {
        let agent = vec![
            rule("*", "*", Action::Allow),
            rule("read", "*.env", Action::Deny),
        ];
        let session = vec![rule("read", "secrets/*", Action::Ask)];
        let rs: [&[Rule]; 2] = [&agent, &session];
        assert_eq!(evaluate("read", "src/a.rs", &rs).action, Action::Allow);
        assert_eq!(evaluate("read", "prod.env", &rs).action, Action::Deny);
        assert_eq!(evaluate("read", "secrets/x", &rs).action, Action::Ask);
        let e = evaluate("read", "secrets/.env", &rs);
        assert_eq!(e.action, Action::Ask, "session rule comes last and wins");
        assert_eq!(e.describe(), "read secrets/* ask");
        assert_eq!(evaluate("x", "y", &[]).action, Action::Ask);
    }

    #[test]
    fn config_shape_keeps_order() {
        let rules = rules_from_config(&json!({
            "*": "allow",
            "edit": "ask",
            "webfetch": {"*.example.com": "allow", "*": "deny"}
        }))
        .unwrap();
        assert_eq!(
            rules,
            vec![
                rule("*", "*", Action::Allow),
                rule("edit", "*", Action::Ask),
                rule("webfetch", "*.example.com", Action::Allow),
                rule("webfetch", "*", Action::Deny),
            ]
        );
        // "*" deny comes after "*.example.com" allow, so it wins for everything.
        assert_eq!(
            evaluate("webfetch", "api.example.com", &[&rules]).action,
            Action::Deny
        );
        assert_eq!(
            rules_from_config(&json!("deny")).unwrap(),
            vec![rule("*", "*", Action::Deny)]
        );
        assert!(
            rules_from_config(&json!({"read": "maybe"}))
                .unwrap_err()
                .contains("\"maybe\"")
        );
        assert!(
            rules_from_config(&json!({"read": 3}))
                .unwrap_err()
                .contains("permission.read")
        );
    }

    #[test]
    fn disabled_tools_are_denied_on_every_pattern() {
        let rules = vec![
            rule("*", "*", Action::Allow),
            rule("webfetch", "*", Action::Deny),
        ];
        assert!(disabled("webfetch", &[&rules]));
        assert!(!disabled("read", &[&rules]));
        let partial = vec![rule("read", "*.env", Action::Deny)];
        assert!(!disabled("read", &[&partial]));
    }

    #[test]
    fn several_patterns_deny_if_any_denies() {
        let rules = vec![
            rule("*", "*", Action::Allow),
            rule("edit", "/etc/*", Action::Deny),
        ];
        let e = evaluate_all("edit", &["a.txt".into(), "/etc/passwd".into()], &[&rules]);
        assert_eq!(e.action, Action::Deny);
        assert_eq!(
            evaluate_all("edit", &["a.txt".into()], &[&rules]).action,
            Action::Allow
        );
    }
}
