//! The table: one row per figure, what it is read against, and where the
//! run happened (machine, commit, load).

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::stats::proc_kib;

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub group: &'static str,
    /// Exactly what is timed or counted.
    pub measure: String,
    pub value: String,
    /// The floor or target it is read against.
    pub against: String,
    /// value / floor, or value / target; `None` when there is none.
    pub ratio: Option<f64>,
    /// Whether the target is met, when there is one.
    pub meets: Option<bool>,
    pub note: String,
    /// The raw numbers behind the row.
    pub data: Value,
}

pub fn row(group: &'static str, measure: impl Into<String>, value: impl Into<String>) -> Row {
    Row {
        group,
        measure: measure.into(),
        value: value.into(),
        against: String::new(),
        ratio: None,
        meets: None,
        note: String::new(),
        data: Value::Null,
    }
}

impl Row {
    /// Read against a floor or target; `target` is the ratio that must not be exceeded.
    pub fn against(mut self, against: impl Into<String>, ratio: f64, target: Option<f64>) -> Row {
        self.against = against.into();
        self.ratio = Some(ratio);
        self.meets = target.map(|t| ratio <= t);
        self
    }
    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
    pub fn data(mut self, data: Value) -> Row {
        self.data = data;
        self
    }
}

/// Where and from what the run happened.
#[derive(Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: u64,
    pub os: String,
    pub profile: &'static str,
    pub date: String,
    /// The commit the bench was built from (`+dirty` when the tree had changes).
    pub commit: String,
    /// The 1-minute load average when the run ended.
    pub load: String,
    pub bench_seconds: f64,
}

pub fn machine(took: Duration) -> Machine {
    // `lscpu`'s model name is /proc/cpuinfo's.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    Machine {
        cpu,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_gib: proc_kib("/proc/meminfo", "MemTotal:").unwrap_or(0) / (1024 * 1024),
        os: std::env::consts::OS.into(),
        profile: if cfg!(debug_assertions) {
            "debug build: figures are not representative"
        } else {
            "release build"
        },
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        commit: commit(),
        load,
        bench_seconds: took.as_secs_f64(),
    }
}

/// The checkout's commit, from git, when there is one.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(id) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{id}+dirty") } else { id }
}

/// The table as Markdown, headed by the commit and the machine.
pub fn markdown(rows: &[Row], m: &Machine) -> String {
    let mut out = format!(
        "warden-bench at commit {} on {} ({} cores, {} GiB, {}), {}, {}; load {} at the end; the run took {:.0} s\n\n",
        m.commit, m.cpu, m.cores, m.memory_gib, m.os, m.profile, m.date, m.load, m.bench_seconds
    );
    out.push_str("| group | measure | value | against | ratio | meets | note |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        let ratio = r.ratio.map_or(String::new(), |x| format!("{x:.2}×"));
        let meets = match r.meets {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {ratio} | {meets} | {} |\n",
            r.group, r.measure, r.value, r.against, r.note
        ));
    }
    out
}
