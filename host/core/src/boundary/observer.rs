//! The `host` interface a guest sees during a call: progress, output, its
//! own permission questions (through the gate) and every URL it requests.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::audit::{Decision, Outcome, Row, Stage, Trail};
use super::failure::CallFailure;
use super::gate::{self, Gate, Metadata, Question, Rules, Verdict};
use super::{CallEnv, ProgressFn};
use crate::tool::{CallContext, CallObserver, url};

pub(super) struct Observer {
    pub env: CallEnv,
    pub trail: Trail,
    pub ctx: CallContext,
    /// The tool's permission, when its rules are written on URLs: every
    /// request it sends (redirects included) is checked against them.
    pub url_permission: Option<String>,
    pub rules: Rules,
    pub cancel: CancellationToken,
    pub progress: ProgressFn,
}

#[async_trait::async_trait]
impl CallObserver for Observer {
    fn progress(&self, title: Option<String>, metadata: Value) {
        (self.progress)(title, metadata);
    }

    async fn check_url(&self, url: &url::Canonical) -> Result<(), String> {
        let Some(permission) = &self.url_permission else {
            return Ok(());
        };
        let host = url.host.to_string();
        let eval = self
            .rules
            .evaluate(&self.env.ledger, permission, std::slice::from_ref(&host))
            .await?;
        let rule = eval.describe();
        let refused = eval.action == warden_protocol::Action::Deny;
        self.trail.push(
            Row::new(
                Stage::Request,
                url.to_string().chars().take(300).collect::<String>(),
                if refused {
                    Decision::Denied
                } else {
                    Decision::Allowed
                },
                if refused {
                    Outcome::Refused
                } else {
                    Outcome::Ok
                },
            )
            .rule(rule.clone()),
        );
        if refused {
            return Err(format!(
                "`{permission}` on `{host}` is denied by the rule `{rule}` (checked on every request, redirects included)"
            ));
        }
        Ok(())
    }

    fn guest_output(&self, plugin: &str, stream: &str, text: String) {
        self.trail.push(Row::new(
            Stage::of_stream(stream),
            format!("plugin:{plugin}"),
            Decision::Printed,
            Outcome::Said(text),
        ));
    }

    async fn ask(
        &self,
        permission: String,
        patterns: Vec<String>,
        metadata: Value,
    ) -> Result<(), String> {
        gate::guest_may_ask(&permission)?;
        let eval = self
            .rules
            .evaluate(&self.env.ledger, &permission, &patterns)
            .await?;
        let subject = format!("guest:{permission}");
        let question = Question {
            permission: permission.clone(),
            patterns: patterns.clone(),
            metadata: Metadata::of(metadata),
            stage: Stage::Ask,
            subject: subject.clone(),
            plugin_hash: None,
            asked_as: subject,
            on_deny: Outcome::Refused,
            quiet: false,
        };
        let gate = Gate {
            permissions: &self.env.permissions,
            trail: &self.trail,
            ctx: &self.ctx,
            cancel: &self.cancel,
        };
        match gate::decide(&gate, question, eval).await {
            Verdict::Allowed => Ok(()),
            Verdict::Denied { rule } => {
                Err(format!("`{permission}` is denied by the rule `{rule}`"))
            }
            Verdict::Rejected { why } => Err(CallFailure::Rejected {
                permission,
                pattern: patterns.join(" "),
                why,
            }
            .to_string()),
        }
    }
}
