//! The `warden:plugin/host` interface as a guest calls it, whatever the
//! contract version (each version's module in [`crate::bindings`] links
//! its functions here): `log`, `progress` and `ask`, each metered against
//! the call's budget ([`crate::budget`]) so a guest in a loop cannot flood
//! stderr, the bus or the audit trail.
//!
//! Every string a guest passes is read through [`prefix`] or [`bounded`]:
//! looked at in the guest's own memory and copied only up to its limit. A
//! list of strings is counted before any is read, so a guest cannot make
//! the host copy one buffer a thousand times (a list whose entries all
//! point at the same megabyte).

use serde_json::Value;
use wasmtime::StoreContextMut;
use wasmtime::component::{WasmList, WasmStr};

use crate::bindings::LogLevel;
use crate::budget;
use crate::sandbox::GuestState;

/// A guest's string cut to at most `max` bytes (whole characters), and its
/// whole length in bytes. Nothing past the cut is copied. (A UTF-8 guest's
/// string is read in place; an UTF-16 one is decoded first, once, and
/// dropped at once.)
pub(crate) fn prefix(
    store: &StoreContextMut<'_, GuestState>,
    s: &WasmStr,
    max: usize,
) -> wasmtime::Result<(String, usize)> {
    let text = s.to_str(store)?;
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok((text[..end].to_string(), text.len()))
}

/// A guest's string when it is at most `max` bytes, else its length.
pub(crate) fn bounded(
    store: &StoreContextMut<'_, GuestState>,
    s: &WasmStr,
    max: usize,
) -> wasmtime::Result<Result<String, usize>> {
    let text = s.to_str(store)?;
    Ok(if text.len() > max {
        Err(text.len())
    } else {
        Ok(text.into_owned())
    })
}

/// A guest's question, read within its limits; `Err` says which it broke.
pub(crate) struct Question {
    pub permission: String,
    pub patterns: Vec<String>,
    pub metadata: String,
}

impl Question {
    /// Read a question's strings, each within its bound, the list counted
    /// first. The outer error is a trap (a string that is not UTF-8).
    pub(crate) fn read(
        store: &mut StoreContextMut<'_, GuestState>,
        permission: &WasmStr,
        patterns: &WasmList<WasmStr>,
        metadata: &WasmStr,
    ) -> wasmtime::Result<Result<Question, String>> {
        let too_long =
            |what: &str, len: usize, max: usize| format!("{what} is {len} bytes; at most {max}");
        let permission = match bounded(store, permission, budget::ASK_PERMISSION)? {
            Ok(p) => p,
            Err(len) => {
                return Ok(Err(too_long("the permission", len, budget::ASK_PERMISSION)));
            }
        };
        if patterns.len() > budget::ASK_PATTERNS {
            return Ok(Err(format!(
                "the question has {} patterns; at most {}",
                patterns.len(),
                budget::ASK_PATTERNS
            )));
        }
        let mut read = Vec::with_capacity(patterns.len());
        for i in 0..patterns.len() {
            let Some(s) = patterns.get(&mut *store, i) else {
                break;
            };
            match bounded(store, &s?, budget::ASK_PATTERN)? {
                Ok(p) => read.push(p),
                Err(len) => {
                    return Ok(Err(too_long(
                        &format!("pattern {i}"),
                        len,
                        budget::ASK_PATTERN,
                    )));
                }
            }
        }
        let metadata = match bounded(store, metadata, budget::ASK_METADATA)? {
            Ok(m) => m,
            Err(len) => return Ok(Err(too_long("the metadata", len, budget::ASK_METADATA))),
        };
        Ok(Ok(Question {
            permission,
            patterns: read,
            metadata,
        }))
    }
}

fn emit(plugin: &str, level: LogLevel, message: &str) {
    match level {
        LogLevel::Debug => tracing::debug!(plugin, "{message}"),
        LogLevel::Info => tracing::info!(plugin, "{message}"),
        LogLevel::Warn => tracing::warn!(plugin, "{message}"),
        LogLevel::Error => tracing::error!(plugin, "{message}"),
    }
}

impl GuestState {
    /// A log line from the guest (already cut to [`budget::LOG_LINE`]
    /// bytes; `len` is its whole length). Each line costs its bytes plus
    /// [`budget::LINE_COST`], so empty lines are paid for too, and a call
    /// writes at most [`budget::LOG_LINES`] lines.
    pub(crate) fn guest_log(&mut self, level: LogLevel, message: &str, len: usize) {
        let cost = budget::LINE_COST + len.min(budget::LOG_LINE);
        let log = &mut self.meter.log;
        if log.lines >= budget::LOG_LINES || !log.bytes.take(cost) {
            log.dropped_lines += 1;
            // Said once, then quiet; at the dropped line's level, so it
            // shows exactly where that line would have.
            if !log.said_full {
                log.said_full = true;
                let notice = format!(
                    "log budget of this call used up ({} lines, {} KiB, {} KiB/s); further lines are dropped",
                    budget::LOG_LINES,
                    budget::LOG_BYTES / 1024,
                    budget::LOG_BYTES_PER_SEC / 1024
                );
                emit(&self.plugin, level, &notice);
            }
            return;
        }
        log.lines += 1;
        emit(&self.plugin, level, message);
    }

    /// A warning the host writes about the guest: from the same budget as
    /// its own lines, so ignoring a guest's bad updates cannot flood either.
    fn warn_about_guest(&mut self, message: &str) {
        self.guest_log(LogLevel::Warn, message, message.len());
    }

    /// A progress update: a title and a JSON object of metadata (`Err` with
    /// its length when it is over [`budget::PROGRESS_UPDATE`]).
    pub(crate) fn guest_progress(
        &mut self,
        title: Option<String>,
        metadata: Result<String, usize>,
    ) {
        let Some(observer) = self.observer.clone() else {
            return;
        };
        let metadata = match metadata {
            Ok(m) => m,
            Err(len) => {
                self.warn_about_guest(&format!(
                    "progress metadata of {len} bytes, over {} bytes; ignored",
                    budget::PROGRESS_UPDATE
                ));
                return;
            }
        };
        let title = title.map(|t| t.chars().take(budget::TITLE_CHARS).collect::<String>());
        let size = budget::LINE_COST + metadata.len() + title.as_ref().map_or(0, String::len);
        if !self.meter.progress.take(size) {
            return;
        }
        match serde_json::from_str::<Value>(&metadata) {
            Ok(v @ Value::Object(_)) => observer.progress(title, v),
            _ => self.warn_about_guest("progress metadata is not a JSON object; ignored"),
        }
    }

    /// A permission the guest asks for mid-call; `Err` carries the denial.
    pub(crate) async fn guest_ask(
        &mut self,
        question: Result<Question, String>,
    ) -> Result<(), String> {
        let Some(observer) = self.observer.clone() else {
            return Err("nobody can be asked while the plugin is loading".into());
        };
        let Question {
            permission,
            patterns,
            metadata,
        } = question.map_err(|why| format!("the question was not put: {why}"))?;
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
