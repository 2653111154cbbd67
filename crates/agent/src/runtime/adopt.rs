//! Process kernels a previous agent process left running under the kernel supervisor
//! ([`super::supervisor`], or the kernel shim of an older berth): a new agent on the same data
//! dir takes them over instead of killing them, and reports them in its `Register` like
//! re-adopted containers.
//!
//! Each kernel started through the supervisor has a record (`kernel.json`: key, binding,
//! deadline, warning signal) next to its pid file. On start the agent finds every kernel dir
//! holding both; a kernel that still runs is watched again (time limit, warning signal, stop
//! requests, end), and one that ended while no agent was there is reported with the status
//! recorded in its exit file.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_model::Binding;
use berth_model::protocol::KernelKey;
use serde::{Deserialize, Serialize};

use super::stale;

/// The record of a kernel started through the supervisor, in its kernel dir.
pub(super) const RECORD_FILE: &str = "kernel.json";
/// Where the supervisor (or an older berth's shim) writes the kernel's raw wait status.
pub(super) const EXIT_FILE: &str = "exit";

/// What a later agent needs to take a kernel over.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct KernelRecord {
    pub key: KernelKey,
    pub binding: Binding,
    /// When the time limit ends, in Unix milliseconds.
    pub deadline_ms: Option<i64>,
    /// The signal due before the deadline (`--signal`); records of older agents have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<berth_model::SignalSpec>,
}

impl KernelRecord {
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        super::stale::write_private(&dir.join(RECORD_FILE), &serde_json::to_vec(self).map_err(std::io::Error::other)?)
    }

    /// The time left until the deadline (zero once past it).
    pub fn time_left(&self, now_ms: i64) -> Option<Duration> {
        self.deadline_ms.map(|d| Duration::from_millis(d.saturating_sub(now_ms).max(0) as u64))
    }
}

/// A kernel a previous agent process started through the supervisor and never saw end.
#[derive(Debug)]
pub(super) struct LeftKernel {
    pub dir: PathBuf,
    pub record: KernelRecord,
    /// The kernel's pid and start time (from the pid file; an older berth's shim's).
    pub pid: u32,
    pub start: u64,
}

impl LeftKernel {
    /// The kernel dir's name, which is also its cgroup's name.
    pub fn name(&self) -> String {
        crate::logs::key_name(&self.record.key)
    }
}

/// Kernel dirs under `kernels_dir` with a record and a pid file.
pub(super) fn find(kernels_dir: &Path) -> Vec<LeftKernel> {
    let Ok(entries) = std::fs::read_dir(kernels_dir) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let Some((pid, start)) = stale::read_pid_file(&dir) else { continue };
        let Some(record) = std::fs::read(dir.join(RECORD_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok())
        else {
            continue;
        };
        out.push(LeftKernel { dir, record, pid, start });
    }
    out.sort_by_key(|k| k.record.key);
    out
}

/// Waits for a kernel that is not our child to end (seen by polling) and returns its status
/// as the exit file records it, and whether the supervisor fenced it.
pub(super) async fn wait(pid: u32, start: u64, exit_file: &Path) -> std::io::Result<(std::process::ExitStatus, bool)> {
    while stale::is_running(pid, start) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The supervisor reaps the kernel, then writes the file: give it a moment.
    for _ in 0..20 {
        if let Some((raw, fenced)) = read_exit(exit_file) {
            return Ok((std::process::ExitStatus::from_raw(raw), fenced));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(std::io::Error::other("it ended without a record of its exit status (its kernel supervisor is gone)"))
}

/// The raw wait status (and the fenced mark) recorded in `path`, once there is one.
fn read_exit(path: &Path) -> Option<(i32, bool)> {
    super::supervisor::parse_exit(&std::fs::read_to_string(path).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_only_complete_dirs_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let key = KernelKey { job_id: 7, attempt: 1, index: 0 };
        let record = KernelRecord {
            key,
            binding: Binding { node: "n1".into(), ..Default::default() },
            deadline_ms: Some(5_000),
            signal: Some("B:USR1@2".parse().unwrap()),
        };
        let k = dir.path().join("7.1.0");
        std::fs::create_dir(&k).unwrap();
        record.write(&k).unwrap();
        assert!(find(dir.path()).is_empty(), "no pid file: the kernel never started or already ended");
        std::fs::write(k.join(stale::PID_FILE), "4242 99\n").unwrap();
        // A plain (shim-less) kernel dir with only a pid file is not taken over.
        let plain = dir.path().join("8.0.0");
        std::fs::create_dir(&plain).unwrap();
        std::fs::write(plain.join(stale::PID_FILE), "4243 99\n").unwrap();
        let found = find(dir.path());
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].pid, found[0].start, &found[0].record), (4242, 99, &record));
        assert_eq!(found[0].name(), "7.1.0");
        assert_eq!(record.time_left(2_000), Some(Duration::from_secs(3)));
        assert_eq!(record.time_left(9_000), Some(Duration::ZERO));
    }

    #[tokio::test]
    async fn an_ended_shim_gives_its_recorded_status() {
        let dir = tempfile::tempdir().unwrap();
        let exit = dir.path().join(EXIT_FILE);
        std::fs::write(&exit, format!("{}\n", 3 << 8)).unwrap();
        // No such pid: the shim has ended.
        let (s, fenced) = wait(u32::MAX, 1, &exit).await.unwrap();
        assert_eq!((s.code(), fenced), (Some(3), false));
        std::fs::write(&exit, super::super::supervisor::exit_text(15, true)).unwrap();
        let (s, fenced) = wait(u32::MAX, 1, &exit).await.unwrap();
        assert_eq!((s.signal(), fenced), (Some(15), true));
        std::fs::write(&exit, "").unwrap();
        assert!(wait(u32::MAX, 1, &exit).await.is_err(), "no status recorded: an error, not a made-up code");
    }
}
