//! When to ask the model again after a failure, and how long to wait.
//!
//! Only provider failures are retried (429, 5xx, overloaded, connection
//! reset, a stream cut short); a tool error never is. The wait is the
//! provider's `retry-after` when it gave one, else exponential backoff with a
//! cap.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use warden_protocol::ProviderError;

/// The retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first backoff, in ms.
    pub initial_delay_ms: u64,
    /// Each backoff is this many times the previous one.
    pub factor: f64,
    /// No backoff is longer than this, in ms.
    pub max_delay_ms: u64,
    /// A provider asking for a longer wait than this is not retried.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            initial_delay_ms: 2_000,
            factor: 2.0,
            max_delay_ms: 30_000,
            max_retry_after_ms: 120_000,
        }
    }
}

impl RetryPolicy {
    /// How long to wait before retry number `retry` (1 for the first retry),
    /// or `None` when the error must not be retried or attempts are used up.
    pub fn delay(&self, retry: u32, error: &ProviderError) -> Option<Duration> {
        if !error.retryable() || retry >= self.max_attempts {
            return None;
        }
        if let Some(ms) = error.retry_after_ms {
            return (ms <= self.max_retry_after_ms).then(|| Duration::from_millis(ms));
        }
        let exp = self.factor.max(1.0).powi(retry.saturating_sub(1) as i32);
        let ms = (self.initial_delay_ms as f64 * exp).min(self.max_delay_ms as f64);
        Some(Duration::from_millis(ms as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::llm::ErrorKind;

    #[test]
    fn backoff_grows_to_a_cap_and_attempts_run_out() {
        let p = RetryPolicy {
            max_attempts: 6,
            initial_delay_ms: 100,
            factor: 2.0,
            max_delay_ms: 500,
            max_retry_after_ms: 1000,
        };
        let e = ProviderError::new(ErrorKind::Server, "503");
        let waits: Vec<u64> = (1..6)
            .map(|n| p.delay(n, &e).unwrap().as_millis() as u64)
            .collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        assert_eq!(p.delay(6, &e), None);
    }

    #[test]
    fn retry_after_wins_and_some_errors_are_final() {
        let p = RetryPolicy::default();
        let mut e = ProviderError::new(ErrorKind::RateLimited, "429");
        e.retry_after_ms = Some(1234);
        assert_eq!(p.delay(1, &e), Some(Duration::from_millis(1234)));
        e.retry_after_ms = Some(10 * 60 * 1000);
        assert_eq!(p.delay(1, &e), None, "too long a wait is not retried");
        assert_eq!(
            p.delay(1, &ProviderError::new(ErrorKind::BadRequest, "400")),
            None
        );
        assert_eq!(
            p.delay(
                1,
                &ProviderError::new(ErrorKind::ContextOverflow, "too long")
            ),
            None
        );
    }
}
