//! The `warden:plugin/host` interface as a guest calls it, whatever the
//! contract version (each version's module in [`crate::bindings`] forwards
//! here): `log`, `progress` and `ask`, each metered against the call's
//! budget ([`crate::budget`]) so a guest in a loop cannot flood stderr, the
//! bus or the audit trail.

use serde_json::Value;

use crate::bindings::LogLevel;
use crate::budget;
use crate::sandbox::GuestState;

impl GuestState {
    /// A log line from the guest, at most [`budget::LOG_LINE`] characters.
    pub(crate) fn guest_log(&mut self, level: LogLevel, message: String) {
        let mut message: String = message.chars().take(budget::LOG_LINE).collect();
        if !self.meter.log.take(message.len()) {
            // Say once that lines are being dropped, then stay quiet.
            if self.meter.log.dropped != message.len() {
                return;
            }
            message = format!(
                "log budget of this call used up ({} KiB, {} KiB/s); further lines are dropped",
                budget::LOG_BYTES / 1024,
                budget::LOG_BYTES_PER_SEC / 1024
            );
        }
        let plugin = &*self.plugin;
        match level {
            LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            LogLevel::Info => tracing::info!(plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            LogLevel::Error => tracing::error!(plugin, "{message}"),
        }
    }

    /// A progress update: a title and a JSON object of metadata.
    pub(crate) fn guest_progress(&mut self, title: Option<String>, metadata: String) {
        let Some(observer) = &self.observer else {
            return;
        };
        if metadata.len() > budget::PROGRESS_UPDATE {
            tracing::warn!(
                plugin = &*self.plugin,
                "progress metadata over {} bytes; ignored",
                budget::PROGRESS_UPDATE
            );
            return;
        }
        let size = metadata.len() + title.as_ref().map_or(0, String::len).min(200);
        if !self.meter.progress.take(size) {
            return;
        }
        match serde_json::from_str::<Value>(&metadata) {
            Ok(v @ Value::Object(_)) => {
                observer.progress(title.map(|t| t.chars().take(200).collect()), v)
            }
            _ => tracing::warn!(
                plugin = &*self.plugin,
                "progress metadata is not a JSON object; ignored"
            ),
        }
    }

    /// A permission the guest asks for mid-call; `Err` carries the denial.
    pub(crate) async fn guest_ask(
        &mut self,
        permission: String,
        patterns: Vec<String>,
        metadata: String,
    ) -> Result<(), String> {
        let Some(observer) = self.observer.clone() else {
            return Err("nobody can be asked while the plugin is loading".into());
        };
        if let Some(answer) = self.meter.asks.answered(&permission, &patterns) {
            return answer;
        }
        if !self.meter.asks.room() {
            return Err(format!(
                "this call already asked {} different questions, the most one call may; the question was not put",
                budget::ASKS
            ));
        }
        let metadata = serde_json::from_str(&metadata).unwrap_or(Value::Null);
        let answer = observer
            .ask(permission.clone(), patterns.clone(), metadata)
            .await;
        self.meter.asks.record(permission, patterns, answer.clone());
        answer
    }
}
