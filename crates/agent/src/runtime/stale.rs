//! Kernels left behind by an earlier agent process (it was killed, or the machine's agent
//! service restarted it). A new agent cannot supervise them — it has no handle on their
//! processes and the manager has already been told they are gone or will be on register — so
//! it kills them before it registers: every process in the kernel cgroups of its own subtree,
//! and, for agents without cgroups, the process group named by each kernel's pid file.
//!
//! The pid file holds the pid and its start time (field 22 of `/proc/PID/stat`), so a pid
//! reused by an unrelated process since is never signalled.

use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Name of the file in a kernel's dir that records its process while it runs.
pub const PID_FILE: &str = "pid";

/// Records a started kernel's process in `<kernel dir>/pid`; returns its start time.
pub fn write_pid_file(kernel_dir: &Path, pid: u32) -> Option<u64> {
    let start = start_time(pid)?;
    if let Err(e) = write_private(&kernel_dir.join(PID_FILE), format!("{pid} {start}\n").as_bytes()) {
        tracing::warn!("cannot write the pid file of a kernel in `{}`: {e}", kernel_dir.display());
    }
    Some(start)
}

/// Writes (replacing) a file of the agent's own: 0600, whoever may pass through its dir.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(data)
}

/// The start time of `pid` in clock ticks since boot while it runs (not once it is a zombie).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    if rest.next()? == "Z" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// Whether the process `pid` started at `start` still runs (a reused pid does not count).
pub fn is_running(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// The pid and start time a kernel dir's pid file records.
pub fn read_pid_file(kernel_dir: &Path) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(kernel_dir.join(PID_FILE)).ok()?;
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(pid)), Some(Ok(start))) if pid > 1 && pid <= i32::MAX as u64 => Some((pid as u32, start)),
        _ => None,
    }
}

/// Kills the kernels named by pid files under `kernels_dir` whose process still runs with the
/// recorded start time, except in the dirs of `keep` (kernels taken over); removes their pid
/// files. Returns how many were still running.
pub fn reap_pid_files(kernels_dir: &Path, keep: &[PathBuf]) -> usize {
    let Ok(entries) = std::fs::read_dir(kernels_dir) else { return 0 };
    let mut killed = 0;
    for e in entries.flatten() {
        if keep.contains(&e.path()) {
            continue;
        }
        let file: PathBuf = e.path().join(PID_FILE);
        if !file.exists() {
            continue;
        }
        if let Some((pid, start)) = read_pid_file(&e.path())
            && is_running(pid, start)
        {
            // Kernels run as session (and so group) leaders: the group takes their children.
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            tracing::warn!(pid, dir = %e.path().display(), "killed a kernel left by a previous agent process");
            killed += 1;
        }
        let _ = std::fs::remove_file(&file);
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_live_process_is_killed_and_a_reused_pid_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("1.0.0");
        std::fs::create_dir(&live).unwrap();
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let _ = write_pid_file(&live, child.id());

        // A pid file whose start time does not match (the pid was reused): left alone.
        let reused = dir.path().join("2.0.0");
        std::fs::create_dir(&reused).unwrap();
        let mut other = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        std::fs::write(reused.join(PID_FILE), format!("{} 1\n", other.id())).unwrap();

        assert_eq!(reap_pid_files(dir.path(), &[]), 1);
        let status = child.wait().unwrap();
        assert!(status.code().is_none(), "killed by a signal: {status:?}");
        assert!(other.try_wait().unwrap().is_none(), "a process with another start time must survive");
        assert!(!live.join(PID_FILE).exists() && !reused.join(PID_FILE).exists());
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
