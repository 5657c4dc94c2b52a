//! A throwaway PostgreSQL for tests. The first call of [`database`] in a
//! test process starts one cluster (`initdb` in a temporary folder, the
//! server on a free port of 127.0.0.1 only, its unix socket in that folder);
//! every call then creates a fresh database on it and returns its URL, so
//! tests share the server's start cost but never each other's rows.
//!
//! **Nothing survives the test process.** Rust runs no destructor of a
//! static at exit, and a test process may also die by a signal, so the
//! cluster is stopped by a watchdog: a small shell started before the
//! server, in a process group of its own, that waits for its stdin to close
//! (which the kernel does however the test process ends), then stops the
//! server (`pg_ctl stop -m immediate`) and removes the folder.
//!
//! **Root.** PostgreSQL refuses to run as root. When the tests run as root
//! (CI containers do), `initdb` and `pg_ctl` run as the `postgres` user
//! (which the Debian package creates) through `runuser`, and the folder is
//! given to that user.
//!
//! **Missing PostgreSQL fails, never skips**, with what to install.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The server's superuser (trust authentication on loopback only).
const SUPERUSER: &str = "postgres";

/// What to install when PostgreSQL is missing.
const INSTALL: &str = "PostgreSQL's server binaries (initdb, pg_ctl, createdb) are needed by the ledger's PostgreSQL tests; install them with `apt-get install -y postgresql` (Debian/Ubuntu; .ci/run does this) or put a directory holding them on PATH";

/// One running cluster, for the whole test process.
pub struct Cluster {
    /// The folder: `data/` (the cluster), the unix socket and the server log.
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// How long initdb and the server's start took.
    pub started_in: Duration,
    /// How the server is run (as whom) and started (its options).
    runner: Runner,
    options: String,
    /// Closing it (when the process ends) makes the watchdog stop the server.
    _watchdog_stdin: Mutex<ChildStdin>,
    _watchdog: Mutex<Child>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NEXT_DB: AtomicU64 = AtomicU64::new(1);

/// The test process's cluster, started on first use. Panics (failing the
/// test) with what to install when PostgreSQL is missing, or with the
/// server's log when it does not start.
pub fn cluster() -> &'static Cluster {
    try_cluster().unwrap_or_else(|e| panic!("{e}"))
}

/// The process's cluster, started on first use, or why it cannot run (what
/// to install, or the server's log): for a caller that reports the reason
/// itself instead of panicking (the bench).
pub fn try_cluster() -> Result<&'static Cluster, String> {
    match CLUSTER.get_or_init(Cluster::start) {
        Ok(c) => Ok(c),
        Err(e) => Err(format!("pg-harness: {e}")),
    }
}

/// A fresh, empty database on the test process's cluster:
/// `postgres://postgres@127.0.0.1:PORT/NAME`.
pub fn database() -> String {
    try_database().unwrap_or_else(|e| panic!("{e}"))
}

/// [`database`], returning why it failed instead of panicking.
pub fn try_database() -> Result<String, String> {
    try_cluster()?.database()
}

/// A cluster of the caller's own, which it may stop and start again (a
/// test of a server going away); stopped and removed when dropped, or when
/// the process ends.
pub fn private_cluster() -> Cluster {
    Cluster::start().unwrap_or_else(|e| panic!("pg-harness: {e}"))
}

impl Cluster {
    /// A fresh, empty database on this cluster; its URL.
    pub fn database(&self) -> Result<String, String> {
        let c = self;
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new(c.bin.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &c.port.to_string(),
                "-U",
                SUPERUSER,
            ])
            .arg(&name)
            .output()
            .map_err(|e| format!("pg-harness: cannot run createdb: {e}; {INSTALL}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg-harness: createdb {name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(c.url(&name))
    }

    /// Stop the server (`pg_ctl stop -m fast`: it ends every connection).
    pub fn stop(&self) -> Result<(), String> {
        self.runner.run(
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )
    }

    /// Start the stopped server again, on the same port.
    pub fn restart(&self) -> Result<(), String> {
        self.runner.run(
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "60", "-o", &self.options, "start"]),
            "pg_ctl start",
        )
    }
}

impl Cluster {
    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn start() -> Result<Cluster, String> {
        let began = Instant::now();
        let bin = find_bin()?;
        let runner = Runner::new()?;
        let dir = tempfile::Builder::new()
            .prefix("warden-pg-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary folder: {e}"))?
            // The watchdog removes it, not a destructor that never runs.
            .keep();
        runner.give(&dir)?;
        let data = dir.join("data");
        // The watchdog first: from here on, however this process ends, the
        // server (once started) is stopped and the folder removed.
        let (watchdog, stdin) = watchdog(&runner, &bin, &dir)?;
        let cluster = |port, runner, options| Cluster {
            dir: dir.clone(),
            bin: bin.clone(),
            port,
            started_in: began.elapsed(),
            runner,
            options,
            _watchdog_stdin: Mutex::new(stdin),
            _watchdog: Mutex::new(watchdog),
        };
        runner.run(
            Command::new(bin.join("initdb")).arg("-D").arg(&data).args([
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]),
            "initdb",
        )?;
        // A free port can be taken by someone else before the server binds
        // it: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
                dir.display()
            );
            let started = runner.run(
                Command::new(bin.join("pg_ctl"))
                    .arg("-D")
                    .arg(&data)
                    .arg("-l")
                    .arg(dir.join("server.log"))
                    .args(["-w", "-t", "60", "-o", &options, "start"]),
                "pg_ctl start",
            );
            match started {
                Ok(()) => return Ok(cluster(port, runner, options)),
                Err(e) => {
                    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                    last = format!("{e}\nserver log:\n{log}");
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(format!("the test cluster did not start: {last}"))
    }

    /// The cluster's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Where `initdb` and `pg_ctl` are: PATH, else Debian's
/// /usr/lib/postgresql/<version>/bin (newest version first).
fn find_bin() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    debian.sort_by_key(|d| std::cmp::Reverse(d.0));
    // The versioned folders first: PATH may hold only the client wrappers.
    let mut all: Vec<PathBuf> = debian.into_iter().map(|(_, p)| p).collect();
    all.append(&mut candidates);
    all.into_iter()
        .find(|d| {
            ["initdb", "pg_ctl", "createdb"]
                .iter()
                .all(|b| d.join(b).is_file())
        })
        .ok_or_else(|| INSTALL.to_string())
}

/// A port of 127.0.0.1 free a moment ago.
fn free_port() -> Result<u16, String> {
    let l =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Runs the server's programs, as another user when this process is root.
struct Runner {
    /// `Some((name, uid, gid))` when running as root.
    user: Option<(String, u32, u32)>,
}

impl Runner {
    fn new() -> Result<Runner, String> {
        let root = std::fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        if !root {
            return Ok(Runner { user: None });
        }
        let id = |flag: &str, user: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, user]).output().ok()?;
            if !out.status.success() {
                return None;
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        };
        for user in ["postgres", "nobody"] {
            if let (Some(uid), Some(gid)) = (id("-u", user), id("-g", user)) {
                return Ok(Runner {
                    user: Some((user.to_string(), uid, gid)),
                });
            }
        }
        Err("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as (it refuses root); install PostgreSQL with `apt-get install -y postgresql`, which creates `postgres`".into())
    }

    /// Make `dir` the server user's.
    fn give(&self, dir: &Path) -> Result<(), String> {
        if let Some((name, uid, gid)) = &self.user {
            std::os::unix::fs::chown(dir, Some(*uid), Some(*gid))
                .map_err(|e| format!("cannot give {} to {name}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// `cmd` as the server user.
    fn command(&self, cmd: &Command) -> Command {
        let mut out = match &self.user {
            Some((name, _, _)) => {
                let mut c = Command::new("runuser");
                c.args(["-u", name, "--"]).arg(cmd.get_program());
                c
            }
            None => Command::new(cmd.get_program()),
        };
        out.args(cmd.get_args());
        out
    }

    fn run(&self, cmd: &mut Command, what: &str) -> Result<(), String> {
        let out = self
            .command(cmd)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

/// A shell, in a process group of its own (so a Ctrl-C of the tests does
/// not kill it before it cleans up), that waits for its stdin to close and
/// then stops the server and removes `dir`.
fn watchdog(runner: &Runner, bin: &Path, dir: &Path) -> Result<(Child, ChildStdin), String> {
    let stop = runner.command(
        Command::new(bin.join("pg_ctl"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"]),
    );
    let mut script = String::from("cat >/dev/null; ");
    script.push_str(&shell_quote(stop.get_program().to_string_lossy().as_ref()));
    for a in stop.get_args() {
        script.push(' ');
        script.push_str(&shell_quote(a.to_string_lossy().as_ref()));
    }
    script.push_str(" >/dev/null 2>&1; rm -rf ");
    script.push_str(&shell_quote(dir.to_string_lossy().as_ref()));
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the cluster's watchdog: {e}"))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or("the cluster's watchdog has no stdin")?;
    // Nothing is ever written but this; the pipe only has to stay open.
    stdin
        .write_all(b"")
        .map_err(|e| format!("the cluster's watchdog stopped at once: {e}"))?;
    Ok((child, stdin))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two databases from one cluster, both reachable, distinct; the
    /// cluster's folder is owned by the server's user.
    #[test]
    fn hands_out_fresh_databases_from_one_cluster() {
        let a = database();
        let b = database();
        assert_ne!(a, b);
        let c = cluster();
        assert!(a.starts_with(&format!("postgres://postgres@127.0.0.1:{}/t", c.port())));
        assert!(c.dir().join("data").join("PG_VERSION").is_file());
        eprintln!("cluster started in {:?}", c.started_in);
        let out = Command::new(c.bin.join("psql"))
            .args(["-X", "-A", "-t", "-c", "SELECT current_database()", &b])
            .output()
            .expect("psql runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            b.rsplit('/').next().expect("a name")
        );
    }

    /// Started by `a_killed_test_process_leaves_no_cluster`: starts the
    /// cluster, says where it is, and waits to be killed.
    #[test]
    #[ignore = "run by a_killed_test_process_leaves_no_cluster, in a child process"]
    fn child_starts_a_cluster_and_waits() {
        let c = cluster();
        let pid = std::fs::read_to_string(c.dir().join("data").join("postmaster.pid"))
            .expect("the server's pid file");
        let pid = pid.lines().next().expect("a pid").trim().to_string();
        println!("CLUSTER {} {pid}", c.dir().display());
        std::io::stdout().flush().expect("stdout");
        std::thread::sleep(Duration::from_secs(600));
    }

    /// A test process killed outright (SIGKILL: no destructor, no atexit)
    /// leaves no server running and no folder behind.
    #[test]
    fn a_killed_test_process_leaves_no_cluster() {
        use std::io::BufRead;
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "tests::child_starts_a_cluster_and_waits",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the child test runs");
        let stdout = child.stdout.take().expect("its stdout");
        let line = std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .find_map(|l| l.split_once("CLUSTER ").map(|(_, rest)| rest.to_string()))
            .expect("the child says where its cluster is");
        let mut words = line.split_whitespace();
        let dir = PathBuf::from(words.next().expect("a folder"));
        let pid = words.next().expect("a pid").to_string();
        assert!(dir.is_dir());
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "the server runs"
        );
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        // The watchdog notices the closed pipe at once; how long pg_ctl
        // takes is not what is checked, so wait generously for it.
        let until = Instant::now() + Duration::from_secs(120);
        while (dir.exists() || Path::new(&format!("/proc/{pid}")).exists())
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!dir.exists(), "{} is left behind", dir.display());
        assert!(
            !running(&pid),
            "the server (pid {pid}) outlived its test process"
        );
    }

    /// Whether process `pid` runs (a zombie waiting to be reaped does not).
    fn running(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st != "Z"))
            })
            .unwrap_or(false)
    }
}
