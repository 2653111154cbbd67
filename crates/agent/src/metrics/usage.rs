//! What a running kernel uses, read from its cgroup: CPU time, memory now and at its peak.
//!
//! Found from the kernel's main pid (`/proc/<pid>/cgroup`), so process kernels (in berth's
//! cgroups) and containers (in Docker's) are read the same way. cgroup v2: `cpu.stat`
//! `usage_usec`, `memory.current`, `memory.peak` (Linux 5.19+). cgroup v1: the memory
//! controller's `memory.usage_in_bytes` and `memory.max_usage_in_bytes`, and CPU from the
//! `cpuacct` controller where the kernel has a cgroup of its own there (containers do);
//! berth's v1 kernel cgroups have a cpuacct cgroup of their own where that controller is
//! mounted; kernels without one (an older berth's) count the `/proc/<pid>/stat` times of the
//! processes in the kernel's memory cgroup (children they reaped included; those reaped by
//! nobody in it are lost).

use std::path::{Path, PathBuf};

pub use berth_model::KernelUsage;

use crate::runtime::cgroup_fs;

/// Where one kernel's figures are read: its cgroup directories, found once (from its pid, or
/// given by the process runtime) and read at every sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupReader {
    /// v2: the kernel's cgroup (`cpu.stat`, `memory.current`, `memory.peak`).
    unified: Option<PathBuf>,
    /// v1: its memory cgroup and, where it has one of its own, its `cpuacct` cgroup.
    memory: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
}

impl CgroupReader {
    /// The cgroup that `pid` is in; `None` when the process is gone. A kernel in the agent's
    /// own cgroup (no cgroups on this machine) gets a reader that knows nothing: the agent's
    /// figures would be reported as its.
    pub fn for_pid(pid: u32) -> Option<CgroupReader> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let paths = cgroup_fs::own_paths(&text);
        let own = std::fs::read_to_string("/proc/self/cgroup").map(|t| cgroup_fs::own_paths(&t)).unwrap_or_default();
        let own_cgroup = |controller: &str| paths.get(controller) == own.get(controller);
        if cgroup_fs::is_unified() {
            let rel = paths.get("")?.trim_start_matches('/');
            let unified = (!own_cgroup("")).then(|| Path::new(cgroup_fs::CGROUP_ROOT).join(rel));
            return Some(CgroupReader { unified, ..Default::default() });
        }
        let mountinfo = cgroup_fs::read_proc(Path::new("/proc/self/mountinfo"));
        let dir = |controller: &str| -> Option<PathBuf> {
            let rel = paths.get(controller)?.trim_start_matches('/');
            Some(cgroup_fs::v1_mount(&mountinfo, controller)?.join(rel))
        };
        Some(CgroupReader {
            unified: None,
            memory: dir("memory").filter(|_| !own_cgroup("memory")),
            cpuacct: dir("cpuacct").filter(|_| !own_cgroup("cpuacct")),
        })
    }

    /// A reader of cgroup directories the caller made: one on v2, or the v1 memory and
    /// cpuacct ones.
    pub fn for_dirs(unified: Option<PathBuf>, memory: Option<PathBuf>, cpuacct: Option<PathBuf>) -> CgroupReader {
        CgroupReader { unified, memory, cpuacct }
    }

    /// The figures now. Without a cpuacct cgroup of its own (kernels of an older berth on
    /// v1), CPU is the sum of the times of the processes in its memory cgroup (see the
    /// module doc).
    pub fn read(&self) -> KernelUsage {
        if let Some(dir) = &self.unified {
            return KernelUsage {
                cpu_seconds: read(&dir.join("cpu.stat")).and_then(|t| usage_usec(&t)).map(|us| us as f64 / 1e6),
                memory_bytes: read_u64(&dir.join("memory.current")),
                memory_peak_bytes: read_u64(&dir.join("memory.peak")),
                ..Default::default()
            };
        }
        let cpu_seconds = match &self.cpuacct {
            Some(d) => read_u64(&d.join("cpuacct.usage")).map(|ns| ns as f64 / 1e9),
            None => self.memory.as_ref().and_then(|d| procs_cpu_seconds(&d.join("cgroup.procs"))),
        };
        KernelUsage {
            cpu_seconds,
            memory_bytes: self.memory.as_ref().and_then(|d| read_u64(&d.join("memory.usage_in_bytes"))),
            memory_peak_bytes: self.memory.as_ref().and_then(|d| read_u64(&d.join("memory.max_usage_in_bytes"))),
            ..Default::default()
        }
    }
}

/// Reads the usage of the cgroup that `pid` is in; `None` when the process is gone.
pub fn of_pid(pid: u32) -> Option<KernelUsage> {
    Some(CgroupReader::for_pid(pid)?.read())
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// `usage_usec` of a v2 `cpu.stat`.
fn usage_usec(cpu_stat: &str) -> Option<u64> {
    cpu_stat.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
}

/// CPU seconds of the processes listed in a `cgroup.procs` file (see the module doc).
fn procs_cpu_seconds(procs: &Path) -> Option<f64> {
    let ticks = clock_ticks()?;
    let list = read(procs)?;
    let total: u64 = list
        .lines()
        .filter_map(|p| read(&Path::new("/proc").join(p.trim()).join("stat")))
        .filter_map(|s| stat_ticks(&s))
        .sum();
    Some(total as f64 / ticks)
}

/// utime + stime + cutime + cstime of a `/proc/<pid>/stat` line, in clock ticks.
fn stat_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) .. cstime (17) are at 11..15 here.
    let sum = fields.get(11..15)?.iter().map(|f| f.parse::<i64>().ok()).sum::<Option<i64>>()?;
    u64::try_from(sum).ok()
}

fn clock_ticks() -> Option<f64> {
    // SAFETY: sysconf reads a constant and touches no memory of ours.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (t > 0).then_some(t as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_stat_and_proc_stat() {
        assert_eq!(usage_usec("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), Some(2_500_000));
        assert_eq!(usage_usec("user_usec 1\n"), None);
        let stat = "4242 (a (b) c) R 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 1 0 100 0 0";
        assert_eq!(stat_ticks(stat), Some(150 + 50 + 7 + 3));
    }

    /// A process in the reader's own cgroup has no figures of its own (they would be the
    /// agent's); a pid that is gone has none at all.
    #[test]
    fn a_process_without_a_cgroup_of_its_own_reports_nothing() {
        assert_eq!(of_pid(std::process::id()), Some(KernelUsage::default()));
        assert_eq!(of_pid(u32::MAX - 1), None);
    }
}
