//! Who may set policy. The operator's rules decide; everyone else can at
//! most tighten them.
//!
//! A decision draws on three layers, and where a rule came from fixes what
//! it can do:
//!
//! - **the operator's** rules ([`Policy::operator`]): the defaults, the
//!   trusted config's global rules and the agent's own. The last match
//!   wins, as in OpenCode; no match is `ask`.
//! - **the session's** rules (stored with the session): the `always`
//!   answers a person gave, which may turn an `ask` into an `allow` for the
//!   literal permission and pattern asked about, and the deny or ask rules
//!   clients added (session creation, per-prompt tool switches). A session
//!   rule never lifts an operator's `deny`, and an `allow` in it counts only
//!   when both its permission and pattern are literal.
//! - **restrictions** ([`Policy::restrict`]) from sources that may only
//!   tighten, such as a project config the operator has not trusted: the
//!   stricter of their verdict and the rest wins.
//!
//! So whatever a client, a project file or a relayed answer writes, a call
//! is never allowed more than the operator's config allows or a person
//! approved.

use warden_protocol::{Action, Rule};
pub use warden_tool::permission_name::{MAX_NAME, check_name, is_literal};

use super::{Evaluation, evaluate, wildcard};

/// The rules of one agent, by who set them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// The operator's rules, in order (the last match wins).
    pub operator: Vec<Rule>,
    /// Rules that may only tighten: only their `deny` and `ask` count.
    pub restrict: Vec<Rule>,
}

/// How strict an action is: `deny` over `ask` over `allow`.
fn strictness(a: Action) -> u8 {
    match a {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    }
}

/// The last rule in `rules` matching (permission, pattern).
fn last_match<'a>(rules: &'a [Rule], permission: &str, pattern: &str) -> Option<&'a Rule> {
    rules.iter().rev().find(|r| {
        wildcard::matches(&r.permission, permission) && wildcard::matches(&r.pattern, pattern)
    })
}

impl Policy {
    /// A policy of the operator's rules alone.
    pub fn of(operator: Vec<Rule>) -> Policy {
        Policy {
            operator,
            restrict: Vec::new(),
        }
    }

    /// The verdict for one (permission, pattern), with the rule that gave it.
    pub fn evaluate(&self, permission: &str, pattern: &str, session: &[Rule]) -> Evaluation {
        let mut e = evaluate(permission, pattern, &[&self.operator]);
        if let Some(s) = last_match(session, permission, pattern) {
            let counts = match (e.action, s.action) {
                // The operator's deny is final.
                (Action::Deny, _) => false,
                (_, Action::Deny) => true,
                (Action::Allow, Action::Ask) => true,
                // An `always` answer: only ever for what was literally asked.
                (Action::Ask, Action::Allow) => is_literal(&s.permission) && is_literal(&s.pattern),
                _ => false,
            };
            if counts {
                e = Evaluation {
                    action: s.action,
                    rule: Some(s.clone()),
                };
            }
        }
        if let Some(r) = last_match(&self.restrict, permission, pattern)
            && strictness(r.action) > strictness(e.action)
        {
            e = Evaluation {
                action: r.action,
                rule: Some(r.clone()),
            };
        }
        e
    }

    /// Several patterns of one call: any deny denies, all allow allows,
    /// otherwise ask. Returns the deciding evaluation.
    pub fn evaluate_all(
        &self,
        permission: &str,
        patterns: &[String],
        session: &[Rule],
    ) -> Evaluation {
        if patterns.is_empty() {
            return self.evaluate(permission, "*", session);
        }
        let evals: Vec<Evaluation> = patterns
            .iter()
            .map(|p| self.evaluate(permission, p, session))
            .collect();
        let pick = |a: Action| evals.iter().find(|e| e.action == a).cloned();
        pick(Action::Deny)
            .or_else(|| pick(Action::Ask))
            .or_else(|| evals.first().cloned())
            .unwrap_or(Evaluation {
                action: Action::Ask,
                rule: None,
            })
    }

    /// Whether a tool is switched off entirely, by the operator, the
    /// session or a restriction: the last rule of that layer for its
    /// permission is `deny` on `*`. Such tools are not offered to the model.
    pub fn disabled(&self, permission: &str, session: &[Rule]) -> bool {
        [&self.operator[..], session, &self.restrict]
            .iter()
            .any(|rules| super::disabled(permission, &[rules]))
    }

    /// The rules that decide whether a hook runs (`hook.before` /
    /// `hook.after`). Switching a hook off is the operator's alone: only the
    /// operator's rules and a person's `allow` answers count, never a deny
    /// from a client or a restriction (a deny would let calls past the hook).
    pub fn hook_rules(&self, session: &[Rule]) -> Vec<Rule> {
        let is_hook = |r: &&Rule| r.permission.starts_with("hook");
        self.operator
            .iter()
            .filter(is_hook)
            .chain(
                session
                    .iter()
                    .filter(is_hook)
                    .filter(|r| r.action == Action::Allow),
            )
            .cloned()
            .collect()
    }
}

/// The most rules a client may give one session.
pub const MAX_CLIENT_RULES: usize = 256;

/// Check rules a client gives (at session creation, over MCP, …): they may
/// deny or ask, never allow, and never name the operator's switches.
pub fn check_client_rules(rules: &[Rule]) -> Result<(), String> {
    if rules.len() > MAX_CLIENT_RULES {
        return Err(format!(
            "{} rules given; a client may give at most {MAX_CLIENT_RULES}",
            rules.len()
        ));
    }
    for (i, r) in rules.iter().enumerate() {
        if r.action == Action::Allow {
            return Err(format!(
                "permission[{i}] allows {:?} on {:?}; a client may only add deny or ask rules. Allow rules come from the operator's config, or from answering a question with \"always\"",
                warden_protocol::text::shown(&r.permission),
                warden_protocol::text::shown(&r.pattern)
            ));
        }
        let long = r.permission.len() > MAX_NAME || r.pattern.len() > 4 * MAX_NAME;
        let control = r
            .permission
            .chars()
            .chain(r.pattern.chars())
            .any(char::is_control);
        if r.permission.is_empty() || long || control {
            return Err(format!(
                "permission[{i}] needs a permission of 1 to {MAX_NAME} bytes and a pattern of at most {} bytes, without control characters",
                4 * MAX_NAME
            ));
        }
        if r.permission.starts_with("hook") {
            return Err(format!(
                "permission[{i}] names {:?}: switching hooks is the operator's, in the config",
                r.permission
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(p: &str, pat: &str, a: Action) -> Rule {
        Rule {
            permission: p.into(),
            pattern: pat.into(),
            action: a,
        }
    }

    fn config() -> Policy {
        Policy::of(vec![
            rule("*", "*", Action::Allow),
            rule("read", "*.env", Action::Deny),
            rule("edit", "*", Action::Ask),
        ])
    }

    #[test]
    fn a_session_rule_never_lifts_the_operators_deny() {
        let p = config();
        let session = [
            rule("read", "*", Action::Allow),
            rule("read", "a.env", Action::Allow),
        ];
        assert_eq!(p.evaluate("read", "a.env", &session).action, Action::Deny);
        assert_eq!(
            p.evaluate("read", "src/a.rs", &session).action,
            Action::Allow
        );
    }

    #[test]
    fn only_a_literal_session_allow_answers_an_ask() {
        let p = config();
        let answered = [rule("edit", "a.txt", Action::Allow)];
        assert_eq!(p.evaluate("edit", "a.txt", &answered).action, Action::Allow);
        assert_eq!(p.evaluate("edit", "b.txt", &answered).action, Action::Ask);
        for glob in [
            rule("edit", "*", Action::Allow),
            rule("*", "a.txt", Action::Allow),
        ] {
            assert_eq!(p.evaluate("edit", "a.txt", &[glob]).action, Action::Ask);
        }
    }

    #[test]
    fn session_and_restriction_rules_tighten() {
        let mut p = config();
        let session = [
            rule("read", "secret/*", Action::Ask),
            rule("list", "*", Action::Deny),
        ];
        assert_eq!(p.evaluate("read", "secret/x", &session).action, Action::Ask);
        assert_eq!(p.evaluate("list", ".", &session).action, Action::Deny);
        p.restrict = vec![
            rule("read", "*", Action::Ask),
            rule("edit", "*", Action::Allow),
        ];
        let e = p.evaluate("read", "a.rs", &[]);
        assert_eq!(
            (e.action, e.describe()),
            (Action::Ask, "read * ask".to_string())
        );
        assert_eq!(
            p.evaluate("read", "a.env", &[]).action,
            Action::Deny,
            "stricter stays"
        );
        assert_eq!(
            p.evaluate("edit", "a", &[]).action,
            Action::Ask,
            "a restriction's allow is inert"
        );
        // A restriction's ask after the operator's deny does not soften it.
        p.restrict = vec![rule("read", "*.env", Action::Ask)];
        assert_eq!(p.evaluate("read", "a.env", &[]).action, Action::Deny);
    }

    #[test]
    fn tools_switched_off_by_any_layer_are_not_offered() {
        let mut p = config();
        assert!(!p.disabled("list", &[]));
        assert!(p.disabled("list", &[rule("list", "*", Action::Deny)]));
        p.restrict = vec![rule("grep", "*", Action::Deny)];
        assert!(p.disabled("grep", &[]));
        assert!(
            p.disabled("grep", &[rule("grep", "*", Action::Allow)]),
            "a session allow does not switch it back on"
        );
    }

    #[test]
    fn hooks_are_switched_by_the_operator_alone() {
        let p = Policy::of(vec![rule("hook.before", "audit", Action::Ask)]);
        let session = [
            rule("hook.before", "*", Action::Deny),
            rule("hook.before", "audit", Action::Allow),
        ];
        assert_eq!(
            p.hook_rules(&session),
            vec![
                rule("hook.before", "audit", Action::Ask),
                rule("hook.before", "audit", Action::Allow)
            ]
        );
    }

    #[test]
    fn names_and_client_rules_are_checked() {
        assert!(check_name("wordcount").is_ok());
        for bad in ["", "*", "re?d", "hook.before", "doom_loop", "a\u{1b}[2J"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(
            check_client_rules(&[
                rule("read", "*.env", Action::Deny),
                rule("*", "*", Action::Ask)
            ])
            .is_ok()
        );
        let e = check_client_rules(&[rule("read", "*.env", Action::Allow)]).unwrap_err();
        assert!(e.contains("only add deny or ask"), "{e}");
        assert!(check_client_rules(&[rule("hook.before", "*", Action::Deny)]).is_err());
        assert!(check_client_rules(&[rule("read", "a\nb", Action::Deny)]).is_err());
        let many = vec![rule("read", "x", Action::Deny); MAX_CLIENT_RULES + 1];
        assert!(check_client_rules(&many).is_err());
    }
}
