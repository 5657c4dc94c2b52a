//! What the host offers a running plugin: logging, progress, asking.

use crate::bindings::host as wit;

pub use wit::LogLevel;

/// Write a line to the host's log, tagged with this plugin and call.
pub fn log(level: LogLevel, message: &str) {
    wit::log(level, message);
}

/// Update the running tool part's title and metadata while the call goes on.
pub fn progress(title: Option<&str>, metadata: &serde_json::Value) {
    wit::progress(title, &metadata.to_string());
}

/// Ask for a permission mid-call (e.g. `edit` on a second file). Waits for the
/// answer; `Err` carries the reason it was denied.
pub fn ask(
    permission: &str,
    patterns: &[&str],
    metadata: &serde_json::Value,
) -> Result<(), String> {
    let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
    wit::ask(permission, &patterns, &metadata.to_string())
}
