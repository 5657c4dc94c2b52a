//! Small statistics over samples, and reading memory use from /proc.

use std::time::Duration;

/// Median and p99 of a set of durations, in microseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    pub median_us: f64,
    pub p99_us: f64,
    pub samples: usize,
}

pub fn summarize(samples: &[Duration]) -> Summary {
    let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| {
        if us.is_empty() {
            0.0
        } else {
            us[((us.len() - 1) as f64 * q).round() as usize]
        }
    };
    Summary {
        median_us: at(0.5),
        p99_us: at(0.99),
        samples: us.len(),
    }
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
pub fn proc_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// This process's resident memory now, in KiB.
pub fn rss_kib() -> u64 {
    proc_kib("self", "VmRSS:").unwrap_or(0)
}

/// A `Field: N kB` line of a /proc file, in KiB.
pub fn proc_kib_file(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
