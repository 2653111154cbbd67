//! The cgroup v2 driver: one unified hierarchy, every controller delegated down to the
//! kernels' subtree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use berth_model::Binding;

use super::{CgroupDriver, CgroupError, counter, cpus_mems, io, limit, mkdir, read_trim};

/// Where this agent's subtree is in the unified hierarchy.
#[derive(Debug)]
pub(super) struct V2 {
    base: PathBuf,
    /// The subtree's effective cpus/mems, for kernels whose binding leaves them empty.
    parent_cpus: String,
    parent_mems: String,
}

impl V2 {
    /// Makes `sub` below the agent's cgroup, delegating the controllers at every level.
    pub(super) fn detect(own: &HashMap<String, String>, sub: &Path) -> Result<V2, CgroupError> {
        let root = PathBuf::from(super::cgroup_fs::CGROUP_ROOT);
        let own_rel = own.get("").map(|s| s.trim_start_matches('/').to_string()).unwrap_or_default();
        let parent = leave_own_cgroup(&root, &own_rel)?;
        let base = parent.join(sub);
        // Every level between the agent's cgroup and the kernels must delegate the controllers.
        let mut dir = parent.clone();
        enable(&dir)?;
        for part in sub.iter() {
            dir.push(part);
            mkdir(&dir)?;
            enable(&dir)?;
        }
        let parent_cpus = read_trim(&base.join("cpuset.cpus.effective"));
        let parent_mems = read_trim(&base.join("cpuset.mems.effective"));
        Ok(V2 { base, parent_cpus, parent_mems })
    }

    /// A driver whose hierarchy is a plain directory (unit tests).
    #[cfg(test)]
    pub(super) fn in_dir(dir: &Path) -> V2 {
        V2 { base: dir.join("berth/n1"), parent_cpus: "0-3".into(), parent_mems: "0".into() }
    }
}

impl CgroupDriver for V2 {
    fn is_v2(&self) -> bool {
        true
    }

    fn bases(&self) -> Vec<&Path> {
        vec![&self.base]
    }

    fn tasks_base(&self) -> &Path {
        &self.base
    }

    fn optional(&self, _base: &Path) -> bool {
        false
    }

    fn make_level(&self, _base: &Path, dir: &Path) -> Result<(), CgroupError> {
        mkdir(dir)?;
        enable(dir)
    }

    fn apply(&self, name: &str, binding: &Binding, pids_max: i64) -> Result<(), CgroupError> {
        let dir = self.base.join(name);
        let (cpus, mems) = cpus_mems(binding, &self.parent_cpus, &self.parent_mems);
        if !cpus.is_empty() {
            limit(&dir, "cpuset.cpus", &cpus)?;
        }
        if !mems.is_empty() {
            limit(&dir, "cpuset.mems", &mems)?;
        }
        if binding.mem_bytes > 0 {
            limit(&dir, "memory.max", &binding.mem_bytes.min(i64::MAX as u64).to_string())?;
            // No swap. The file is missing when swap accounting is off: no swap to limit.
            let _ = limit(&dir, "memory.swap.max", "0");
        }
        limit(&dir, "pids.max", &pids_max.to_string())
    }

    fn oom_kills(&self, name: &str) -> Option<u64> {
        counter(&read_trim(&self.base.join(name).join("memory.events")), "oom_kill")
    }

    fn limit_hit(&self, _name: &str) -> bool {
        // v2 always counts OOM kills (`memory.events`).
        false
    }

    fn usage(&self, name: &str) -> crate::metrics::CgroupReader {
        crate::metrics::CgroupReader::for_dirs(Some(self.base.join(name)), None, None)
    }
}

/// On v2 a cgroup with processes cannot delegate controllers ("no internal processes"), so an
/// agent that is not in the root cgroup first moves itself into a leaf `<own>/agent` and then
/// creates kernels beside it. Returns the directory under which `berth/` goes.
fn leave_own_cgroup(root: &Path, own_rel: &str) -> Result<PathBuf, CgroupError> {
    let own = root.join(own_rel);
    if own_rel.is_empty() {
        return Ok(own);
    }
    let leaf = own.join("agent");
    mkdir(&leaf)?;
    let procs = leaf.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).map_err(io("move the agent into", &procs))?;
    Ok(own)
}

fn enable(dir: &Path) -> Result<(), CgroupError> {
    let f = dir.join("cgroup.subtree_control");
    std::fs::write(&f, "+cpuset +memory +pids").map_err(io("enable controllers in", &f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_limits_go_to_the_one_unified_cgroup() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = V2::in_dir(tmp.path());
        let dir = tmp.path().join("berth/n1/3.0.0");
        std::fs::create_dir_all(&dir).unwrap();
        let binding = Binding { cpus: vec![0, 2], mems: vec![0], mem_bytes: 32 << 20, ..Default::default() };
        v2.apply("3.0.0", &binding, 128).unwrap();
        assert_eq!(read_trim(&dir.join("cpuset.cpus")), "0,2");
        assert_eq!(read_trim(&dir.join("memory.max")), (32u64 << 20).to_string());
        assert_eq!(read_trim(&dir.join("memory.swap.max")), "0", "no swap");
        assert_eq!(read_trim(&dir.join("pids.max")), "128");
        assert_eq!(v2.bases(), vec![tmp.path().join("berth/n1").as_path()]);
    }

    #[test]
    fn v2_reads_oom_kills_from_memory_events() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = V2::in_dir(tmp.path());
        let dir = tmp.path().join("berth/n1/5.0.0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.events"), "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(v2.oom_kills("5.0.0"), Some(1));
        assert!(!v2.limit_hit("5.0.0"));
    }

    #[test]
    fn v2_makes_a_removed_level_again_with_its_controllers() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = V2::in_dir(tmp.path());
        let level = tmp.path().join("berth");
        v2.make_level(&v2.base, &level).unwrap();
        assert_eq!(read_trim(&level.join("cgroup.subtree_control")), "+cpuset +memory +pids");
    }
}
