//! The cgroup v1 driver: one hierarchy per controller (cpuset, memory, pids, and cpuacct
//! where it is mounted, only counted, never limited), the agent at its own path in each.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use berth_model::Binding;

use super::{CgroupDriver, CgroupError, cgroup_fs, counter, cpus_mems, io, limit, mkdir, read_trim};

/// Where this agent's subtree is in each v1 hierarchy.
#[derive(Debug)]
pub(super) struct V1 {
    cpuset: PathBuf,
    memory: PathBuf,
    pids: PathBuf,
    /// A kernel's CPU time, where the controller is mounted and the subtree could be made.
    cpuacct: Option<PathBuf>,
    /// The parent's cpus/mems, for kernels whose binding leaves them empty (v1 needs values).
    parent_cpus: String,
    parent_mems: String,
}

impl V1 {
    /// Finds each controller's mount and makes `sub` below the agent's cgroup in it.
    pub(super) fn detect(own: &HashMap<String, String>, sub: &Path) -> Result<V1, CgroupError> {
        let mountinfo = cgroup_fs::read_proc(Path::new("/proc/self/mountinfo"));
        let base = |name: &str| {
            let own_rel = own.get(name).map(|s| s.trim_start_matches('/').to_string()).unwrap_or_default();
            cgroup_fs::v1_mount(&mountinfo, name).map(|m| m.join(own_rel).join(sub))
        };
        let mut required = Vec::new();
        for name in ["cpuset", "memory", "pids"] {
            let dir = base(name)
                .ok_or_else(|| CgroupError::Unavailable(format!("no cgroup v1 `{name}` controller is mounted")))?;
            make_below(&dir, sub, name == "cpuset")?;
            required.push(dir);
        }
        let cpuacct = base("cpuacct").and_then(|dir| match make_below(&dir, sub, false) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!("kernels' CPU time is not counted by cgroup: {e}");
                None
            }
        });
        let [cpuset, memory, pids] = <[PathBuf; 3]>::try_from(required).expect("three controllers");
        let parent_cpus = read_trim(&cpuset.join("cpuset.cpus"));
        let parent_mems = read_trim(&cpuset.join("cpuset.mems"));
        Ok(V1 { cpuset, memory, pids, cpuacct, parent_cpus, parent_mems })
    }

    /// A driver whose hierarchies are plain directories under `dir` (unit tests).
    #[cfg(test)]
    pub(super) fn in_dir(dir: &Path, cpuacct: bool) -> V1 {
        let b = |c: &str| dir.join(c).join("berth/n1");
        V1 {
            cpuset: b("cpuset"),
            memory: b("memory"),
            pids: b("pids"),
            cpuacct: cpuacct.then(|| b("cpuacct")),
            parent_cpus: "0-3".into(),
            parent_mems: "0".into(),
        }
    }
}

impl CgroupDriver for V1 {
    fn is_v2(&self) -> bool {
        false
    }

    fn bases(&self) -> Vec<&Path> {
        [Some(&self.cpuset), Some(&self.memory), Some(&self.pids), self.cpuacct.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect()
    }

    fn tasks_base(&self) -> &Path {
        &self.pids
    }

    fn optional(&self, base: &Path) -> bool {
        self.cpuacct.as_deref() == Some(base)
    }

    fn make_level(&self, base: &Path, dir: &Path) -> Result<(), CgroupError> {
        v1_mkdir(dir, base == self.cpuset)
    }

    fn apply(&self, name: &str, binding: &Binding, pids_max: i64) -> Result<(), CgroupError> {
        let (cpus, mems) = cpus_mems(binding, &self.parent_cpus, &self.parent_mems);
        let cpuset = self.cpuset.join(name);
        if !cpus.is_empty() {
            limit(&cpuset, "cpuset.cpus", &cpus)?;
        }
        if !mems.is_empty() {
            limit(&cpuset, "cpuset.mems", &mems)?;
        }
        if binding.mem_bytes > 0 {
            let memory = self.memory.join(name);
            let bytes = binding.mem_bytes.min(i64::MAX as u64).to_string();
            limit(&memory, "memory.limit_in_bytes", &bytes)?;
            // No swap: memory+swap capped at the same limit (after the memory limit, which
            // it may not be below), when swap accounting is on.
            let _ = limit(&memory, "memory.memsw.limit_in_bytes", &bytes);
            let _ = limit(&memory, "memory.swappiness", "0");
        }
        limit(&self.pids.join(name), "pids.max", &pids_max.to_string())
    }

    fn oom_kills(&self, name: &str) -> Option<u64> {
        counter(&read_trim(&self.memory.join(name).join("memory.oom_control")), "oom_kill")
    }

    fn limit_hit(&self, name: &str) -> bool {
        read_trim(&self.memory.join(name).join("memory.failcnt")).parse::<u64>().unwrap_or(0) > 0
    }

    fn usage(&self, name: &str) -> crate::metrics::CgroupReader {
        let cpuacct = self.cpuacct.as_ref().map(|c| c.join(name)).filter(|d| d.is_dir());
        crate::metrics::CgroupReader::for_dirs(None, Some(self.memory.join(name)), cpuacct)
    }
}

/// Makes each level of `sub` down to `dir` (the subtree's base in one hierarchy).
fn make_below(dir: &Path, sub: &Path, cpuset: bool) -> Result<(), CgroupError> {
    let levels = sub.components().count();
    let mut top = dir.to_path_buf();
    for _ in 0..levels {
        top.pop();
    }
    for part in sub.iter() {
        top.push(part);
        v1_mkdir(&top, cpuset)?;
    }
    Ok(())
}

/// Makes a v1 cgroup dir; a new cpuset starts empty and refuses tasks, so it inherits its
/// parent's CPUs and memory nodes.
fn v1_mkdir(dir: &Path, cpuset: bool) -> Result<(), CgroupError> {
    mkdir(dir)?;
    if cpuset {
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let parent = read_trim(&dir.parent().unwrap_or(dir).join(f));
            if read_trim(&dir.join(f)).is_empty() {
                std::fs::write(dir.join(f), &parent).map_err(io("write", &dir.join(f)))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(dir: &Path, name: &str) -> V1 {
        let v1 = V1::in_dir(dir, true);
        for b in v1.bases() {
            std::fs::create_dir_all(b.join(name)).unwrap();
        }
        v1
    }

    #[test]
    fn v1_limits_go_to_each_controllers_own_hierarchy() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = made(tmp.path(), "3.0.0");
        let binding = Binding { cpus: vec![1, 2], mems: vec![0], mem_bytes: 64 << 20, ..Default::default() };
        v1.apply("3.0.0", &binding, 256).unwrap();
        let read = |c: &str, f: &str| read_trim(&tmp.path().join(c).join("berth/n1/3.0.0").join(f));
        assert_eq!(read("cpuset", "cpuset.cpus"), "1-2");
        assert_eq!(read("cpuset", "cpuset.mems"), "0");
        assert_eq!(read("memory", "memory.limit_in_bytes"), (64u64 << 20).to_string());
        assert_eq!(read("memory", "memory.memsw.limit_in_bytes"), (64u64 << 20).to_string(), "no swap");
        assert_eq!(read("memory", "memory.swappiness"), "0");
        assert_eq!(read("pids", "pids.max"), "256");
        assert_eq!(read("cpuacct", "pids.max"), "", "cpuacct is only counted");
        assert_eq!(v1.tasks_base(), tmp.path().join("pids/berth/n1"));
    }

    #[test]
    fn v1_kernels_without_cpus_get_their_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = made(tmp.path(), "4.0.0");
        v1.apply("4.0.0", &Binding::default(), 10).unwrap();
        assert_eq!(read_trim(&tmp.path().join("cpuset/berth/n1/4.0.0/cpuset.cpus")), "0-3");
        assert_eq!(read_trim(&tmp.path().join("memory/berth/n1/4.0.0/memory.limit_in_bytes")), "", "no limit");
    }

    #[test]
    fn v1_reads_oom_kills_from_memory_oom_control() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = made(tmp.path(), "5.0.0");
        assert_eq!(v1.oom_kills("5.0.0"), None);
        let dir = tmp.path().join("memory/berth/n1/5.0.0");
        std::fs::write(dir.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(v1.oom_kills("5.0.0"), Some(2));
        assert!(!v1.limit_hit("5.0.0"));
        std::fs::write(dir.join("memory.failcnt"), "7\n").unwrap();
        assert!(v1.limit_hit("5.0.0"));
        assert!(v1.optional(&tmp.path().join("cpuacct/berth/n1")));
        assert!(!v1.optional(&tmp.path().join("memory/berth/n1")));
    }
}
