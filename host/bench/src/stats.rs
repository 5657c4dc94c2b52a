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

/// The median of plain numbers.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// A `Field: N kB` line of a /proc file, in KiB (`VmHWM` of
/// `/proc/<pid>/status`, `MemTotal` of `/proc/meminfo`).
pub fn proc_kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

pub fn summary_value(s: &Summary) -> String {
    format!("median {} · p99 {}", fmt_us(s.median_us), fmt_us(s.p99_us))
}
