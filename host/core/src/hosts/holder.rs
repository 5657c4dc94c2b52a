//! Who holds a runner lease: one runner per session across every process
//! sharing a ledger. The holder id names the machine, process id and process start
//! time, so a process on the same machine can tell at once that a holder
//! died (a SIGKILLed run) instead of waiting for the lease to expire;
//! holders on other machines (or in another pid namespace) are trusted
//! until expiry.
//!
//! A shared ledger (PostgreSQL) is used by many hosts, and hostnames and pid
//! namespaces alone do not tell them apart: two machines may both be called
//! `ubuntu`, and every machine's first pid namespace has the same inode. So
//! the machine is its hostname *and* its boot id (random at every boot), and
//! a pid is looked up only when both match ours.

use std::sync::OnceLock;

/// This process's holder id: `machine:pid:start:pidns:nonce`.
pub fn holder_id() -> String {
    static NONCE: OnceLock<u64> = OnceLock::new();
    let nonce = *NONCE.get_or_init(rand::random::<u64>);
    format!(
        "{}:{}:{}:{}:{nonce:x}",
        machine(),
        std::process::id(),
        start_time(std::process::id()).unwrap_or(0),
        pid_namespace()
    )
}

/// This process's pid namespace (0 when unknown): two containers may share
/// a hostname and a volume, but a pid only means something in its namespace.
fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let s = l.to_string_lossy().into_owned();
            s.trim_start_matches("pid:[")
                .trim_end_matches(']')
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Whether `holder` was a process on this host that is no longer running.
pub fn holder_is_dead(holder: &str) -> bool {
    // Another host, or another pid namespace on this one: its pids are not
    // ours to look up, so only the lease's expiry can say it is gone.
    let Some((pid, start)) = local_pid(holder) else {
        return false;
    };
    if !cfg!(target_os = "linux") {
        return false;
    }
    match start_time(pid) {
        // No such process, or the pid now belongs to a younger process.
        None => true,
        Some(now) => start != 0 && now != start,
    }
}

/// What a holder id says of its process, when it is one this process can
/// look up: on this machine, in this pid namespace, and not this process.
fn local_pid(holder: &str) -> Option<(u32, u64)> {
    let mut parts = holder.split(':');
    let (host, pid, start, ns) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let (pid, start, ns) = (
        pid.parse::<u32>().ok()?,
        start.parse::<u64>().ok()?,
        ns.parse::<u64>().ok()?,
    );
    (host == machine() && ns == pid_namespace() && pid != std::process::id())
        .then_some((pid, start))
}

/// A wait that ends when the process `holder` names exits (at once if it
/// is gone already): for a holder this process can look up, on Linux (a
/// pidfd, readable once the process has exited). `None` for any other
/// holder: only its lease's expiry says it is gone.
pub fn exit(holder: &str) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    let (pid, start) = local_pid(holder)?;
    exit_of(pid, start)
}

#[cfg(target_os = "linux")]
fn exit_of(pid: u32, start: u64) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let gone: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(std::future::ready(()));
    let fd = match pidfd_open(Pid::from_raw(pid as i32)?, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Some(gone),
        // No pidfds here (a kernel before 5.3, a seccomp filter).
        Err(_) => return None,
    };
    // Opened by pid: the process is the holder only if it started when the
    // holder did (else the pid was reused and the holder is gone).
    if start != 0 && start_time(pid) != Some(start) {
        return Some(gone);
    }
    tokio::runtime::Handle::try_current().ok()?;
    #[allow(unsafe_code)]
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it (open,
    // the same file description) until it is dropped.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .ok()?;
    Some(Box::pin(async move {
        let _ = fd.readable().await;
    }))
}

#[cfg(not(target_os = "linux"))]
fn exit_of(_pid: u32, _start: u64) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    None
}

/// This machine, as holder ids name it: `hostname~bootid` (the first 12
/// hex digits of the kernel's boot id), or the hostname alone where there
/// is no boot id to read.
fn machine() -> String {
    static MACHINE: OnceLock<String> = OnceLock::new();
    MACHINE
        .get_or_init(|| {
            let boot: String = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap_or_default()
                .chars()
                .filter(char::is_ascii_hexdigit)
                .take(12)
                .collect();
            if boot.is_empty() {
                hostname()
            } else {
                format!("{}~{boot}", hostname())
            }
        })
        .clone()
}

fn hostname() -> String {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().replace(':', "_"))
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".into())
    })
    .clone()
}

/// The process's start time in clock ticks since boot (Linux), field 22 of
/// `/proc/PID/stat`; `None` if there is no such process.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_exit_of_a_holder_on_this_machine_ends_its_wait() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let holder = format!(
            "{}:{pid}:{}:{}:0",
            machine(),
            start_time(pid).unwrap(),
            pid_namespace()
        );
        let mut running = exit(&holder).expect("a holder on this machine is watched");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut running)
                .await
                .is_err(),
            "it runs"
        );
        child.kill().unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), &mut running)
            .await
            .expect("its exit ends the wait");
        child.wait().unwrap();
        // Gone already, or its pid taken by a younger process: at once.
        exit(&holder).unwrap().await;
        assert!(exit("elsewhere:1:2:3:0").is_none(), "another machine's");
        assert!(exit(&holder_id()).is_none(), "this process's own");
    }

    #[test]
    fn this_process_is_alive_and_a_vanished_one_is_dead() {
        let me = holder_id();
        assert!(!holder_is_dead(&me));
        let host = machine();
        if cfg!(target_os = "linux") {
            // pid_max is at most 2^22, so this pid cannot exist.
            assert!(holder_is_dead(&format!(
                "{host}:4194305:123:{}:0",
                pid_namespace()
            )));
            assert!(
                !holder_is_dead(&format!("{host}:4194305:123:1:0")),
                "another pid namespace"
            );
        }
        assert!(
            !holder_is_dead("elsewhere:1:2:3"),
            "other hosts are trusted until expiry"
        );
        assert!(!holder_is_dead("garbage"));
        if cfg!(target_os = "linux") {
            // Same hostname, same pid namespace, another boot: another machine.
            assert!(
                !holder_is_dead(&format!(
                    "{}~000000000000:4194305:123:{}:0",
                    hostname(),
                    pid_namespace()
                )),
                "a machine of the same name is trusted until expiry"
            );
            assert!(me.starts_with(&format!("{}~", hostname())), "{me}");
        }
    }
}
