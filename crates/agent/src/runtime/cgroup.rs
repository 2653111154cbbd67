//! Per-kernel cgroups: cpuset, memory limit (no swap) and pids limit, on cgroup v2 or v1, and
//! on v1 a cpuacct cgroup (where that controller is mounted) so a kernel's CPU time is counted.
//!
//! Layout: kernels live under the agent's own cgroup, `<agent cgroup>/berth/<node>/<job>.<attempt>.<index>`,
//! so a systemd unit with `Delegate=yes` (v2) or a container's memory cgroup (v1) keeps
//! containing them. On v1 this is done per controller (cpuset, memory, pids each have their
//! own hierarchy and the agent may sit at a different path in each).
//!
//! `cgroup_fs` finds the hierarchies in `/proc`; the limits are a few plain file writes. The
//! child joins before exec: we pre-open each `cgroup.procs` and the child writes `0` to them
//! between fork and exec, so no fork of the kernel can escape.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use berth_model::Binding;
use thiserror::Error;

use super::cgroup_fs;

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error("{0}")]
    Unavailable(String),
    #[error("cannot {what} `{path}`: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot set {what} in `{path}`: {source}")]
    Limit { what: &'static str, path: PathBuf, source: std::io::Error },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io { what, path: path.to_path_buf(), source }
}

/// Where kernel cgroups go on this machine.
#[derive(Debug, Clone)]
pub struct Cgroups {
    v2: bool,
    /// v2: one base; v1: the cpuset, memory and pids bases, in that order, then cpuacct where
    /// it is mounted (only counted, never limited: a kernel without it still runs).
    bases: Vec<PathBuf>,
    /// The parent's cpus/mems, for kernels whose binding leaves them empty (v1 needs values).
    parent_cpus: String,
    parent_mems: String,
}

/// One kernel's cgroup (a directory per v1 controller, or one on v2).
#[derive(Debug)]
pub struct KernelCgroup {
    v2: bool,
    dirs: Vec<PathBuf>,
    procs: Vec<File>,
    pub mem_limit: u64,
}

impl Cgroups {
    /// Finds the hierarchy and prepares `<agent cgroup>/berth/<scope>` (see `cgroup_scope`).
    pub fn detect(scope: &str) -> Result<Cgroups, CgroupError> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err(CgroupError::Unavailable("the agent is not root".into()));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map(|t| cgroup_fs::own_paths(&t))
            .map_err(|e| CgroupError::Unavailable(format!("cannot read /proc/self/cgroup: {e}")))?;
        let sub = Path::new("berth").join(scope);
        if cgroup_fs::is_unified() {
            let root = PathBuf::from(cgroup_fs::CGROUP_ROOT);
            let own_rel = own.get("").map(|s| s.trim_start_matches('/').to_string()).unwrap_or_default();
            let parent = v2_leave_own_cgroup(&root, &own_rel)?;
            let base = parent.join(&sub);
            // Every level between the agent's cgroup and the kernels must delegate the controllers.
            let mut dir = parent.clone();
            v2_enable(&dir)?;
            for part in sub.iter() {
                dir.push(part);
                mkdir(&dir)?;
                v2_enable(&dir)?;
            }
            let parent_cpus = read_trim(&base.join("cpuset.cpus.effective"));
            let parent_mems = read_trim(&base.join("cpuset.mems.effective"));
            return Ok(Cgroups { v2: true, bases: vec![base], parent_cpus, parent_mems });
        }
        let mountinfo = cgroup_fs::read_proc(Path::new("/proc/self/mountinfo"));
        let mut bases = Vec::new();
        for name in ["cpuset", "memory", "pids"] {
            let mount = cgroup_fs::v1_mount(&mountinfo, name)
                .ok_or_else(|| CgroupError::Unavailable(format!("no cgroup v1 `{name}` controller is mounted")))?;
            let own_rel = own.get(name).map(|s| s.trim_start_matches('/').to_string()).unwrap_or_default();
            let mut dir = mount.join(own_rel);
            for part in sub.iter() {
                dir.push(part);
                v1_mkdir(&dir, name == "cpuset")?;
            }
            bases.push(dir);
        }
        if let Some(mount) = cgroup_fs::v1_mount(&mountinfo, "cpuacct") {
            let own_rel = own.get("cpuacct").map(|s| s.trim_start_matches('/').to_string()).unwrap_or_default();
            let mut dir = mount.join(own_rel);
            let made = sub.iter().try_for_each(|part| {
                dir.push(part);
                v1_mkdir(&dir, false)
            });
            match made {
                Ok(()) => bases.push(dir),
                Err(e) => tracing::warn!("kernels' CPU time is not counted by cgroup: {e}"),
            }
        }
        let parent_cpus = read_trim(&bases[0].join("cpuset.cpus"));
        let parent_mems = read_trim(&bases[0].join("cpuset.mems"));
        Ok(Cgroups { v2: false, bases, parent_cpus, parent_mems })
    }

    /// Removes `berth/<node>` and `berth` where they are empty (errors mean still in use).
    pub fn remove_parents(&self) {
        for b in &self.bases {
            if std::fs::remove_dir(b).is_ok() {
                let _ = b.parent().map(std::fs::remove_dir);
            }
        }
    }

    /// Kills every process in the kernel cgroups of this agent's subtree, except those named
    /// in `keep` (kernels taken over, see `adopt`), and removes them: they belong to kernels of
    /// an earlier agent process (see `stale`). Returns how many kernel cgroups had processes.
    pub fn reap_stale(&self, keep: &[String]) -> usize {
        let procs_base = &self.bases[PIDS.min(self.bases.len() - 1)];
        let Ok(entries) = std::fs::read_dir(procs_base) else { return 0 };
        let names: Vec<std::ffi::OsString> = entries
            .flatten()
            .filter(|e| e.path().is_dir() && !keep.iter().any(|k| e.file_name() == k.as_str()))
            .map(|e| e.file_name())
            .collect();
        let mut busy = 0;
        for name in names {
            let procs = procs_base.join(&name).join("cgroup.procs");
            let mut had = false;
            for round in 0..200u64 {
                let pids: Vec<i32> = read_trim(&procs).lines().filter_map(|l| l.trim().parse().ok()).collect();
                if pids.is_empty() {
                    break;
                }
                had = true;
                for pid in pids {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
                std::thread::sleep(std::time::Duration::from_millis(1 + round / 4));
            }
            if had {
                busy += 1;
                tracing::warn!(cgroup = ?name, "killed a kernel left by a previous agent process");
            }
            for b in &self.bases {
                let d = b.join(&name);
                // A killed task leaves its cgroup a moment after it is reaped: retry briefly.
                for _ in 0..100 {
                    match std::fs::remove_dir(&d) {
                        Err(e) if e.kind() != ErrorKind::NotFound => {
                            std::thread::sleep(std::time::Duration::from_millis(10))
                        }
                        _ => break,
                    }
                }
            }
        }
        busy
    }

    /// Whether this is cgroup v2.
    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The existing cgroup of a kernel an earlier agent process started (to watch it again),
    /// or `None` when it is gone.
    pub fn open(&self, name: &str, mem_limit: u64) -> Option<KernelCgroup> {
        let mut dirs: Vec<PathBuf> = self.bases.iter().map(|b| b.join(name)).collect();
        // A kernel of an older berth has no cpuacct cgroup: it is watched without.
        if dirs.len() > CPUACCT && !dirs[CPUACCT].is_dir() {
            dirs.truncate(CPUACCT);
        }
        dirs.iter().all(|d| d.is_dir()).then_some(KernelCgroup { v2: self.v2, dirs, procs: Vec::new(), mem_limit })
    }

    /// Creates the kernel's cgroup with the binding's limits and opens its `cgroup.procs`.
    pub fn create(&self, name: &str, binding: &Binding, pids_max: i64) -> Result<KernelCgroup, CgroupError> {
        let v2 = self.v2;
        let dirs: Vec<PathBuf> = self.bases.iter().map(|b| b.join(name)).collect();
        let mut cg = KernelCgroup { v2, dirs: Vec::new(), procs: Vec::new(), mem_limit: binding.mem_bytes };
        for d in &dirs {
            let made = match std::fs::create_dir(d) {
                // Our subtree was removed while empty (an admin's or a tool's clean-up of empty
                // cgroups): make it again, once.
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.restore_bases()?;
                    std::fs::create_dir(d)
                }
                r => r,
            };
            match made {
                Ok(()) => {}
                // Left over from a crashed agent: reuse it (it has no live tasks of ours).
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("create cgroup", d)(e)),
            }
            cg.dirs.push(d.clone());
        }
        let (cpuset_dir, mem_dir, pids_dir) =
            if v2 { (&dirs[0], &dirs[0], &dirs[0]) } else { (&dirs[0], &dirs[1], &dirs[2]) };
        let cpus = if binding.cpus.is_empty() { self.parent_cpus.clone() } else { binding.cpuset() };
        let mems = if binding.mems.is_empty() { self.parent_mems.clone() } else { binding.memset() };
        if !cpus.is_empty() {
            limit(cpuset_dir, "cpuset.cpus", &cpus)?;
        }
        if !mems.is_empty() {
            limit(cpuset_dir, "cpuset.mems", &mems)?;
        }
        if binding.mem_bytes > 0 {
            let bytes = binding.mem_bytes.min(i64::MAX as u64).to_string();
            if v2 {
                limit(mem_dir, "memory.max", &bytes)?;
                // No swap. The file is missing when swap accounting is off: no swap to limit.
                let _ = limit(mem_dir, "memory.swap.max", "0");
            } else {
                limit(mem_dir, "memory.limit_in_bytes", &bytes)?;
                // No swap: memory+swap capped at the same limit (after the memory limit, which
                // it may not be below), when swap accounting is on.
                let _ = limit(mem_dir, "memory.memsw.limit_in_bytes", &bytes);
                let _ = limit(mem_dir, "memory.swappiness", "0");
            }
        }
        limit(pids_dir, "pids.max", &pids_max.to_string())?;
        for d in &dirs {
            let p = d.join("cgroup.procs");
            cg.procs.push(std::fs::OpenOptions::new().write(true).open(&p).map_err(io("open", &p))?);
        }
        Ok(cg)
    }
}

impl KernelCgroup {
    /// The pre-opened `cgroup.procs` files the child writes `0` to before exec.
    pub fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// Closes the `cgroup.procs` files once the child has been spawned.
    pub fn close_procs(&mut self) {
        self.procs.clear();
    }

    /// How many times the OOM killer fired inside this cgroup (v1 `memory.oom_control`,
    /// v2 `memory.events`); `None` when the kernel keeps no such counter.
    pub fn oom_kills(&self) -> Option<u64> {
        let (dir, file) =
            if self.v2 { (&self.dirs[0], "memory.events") } else { (&self.dirs[1], "memory.oom_control") };
        counter(&read_trim(&dir.join(file)), "oom_kill")
    }

    /// v1 without an `oom_kill` counter (kernels before 4.13): whether the limit was ever hit.
    pub fn limit_hit(&self) -> bool {
        !self.v2 && read_trim(&self.dirs[1].join("memory.failcnt")).parse::<u64>().unwrap_or(0) > 0
    }

    /// SIGKILLs whatever is left in the cgroup (daemons the kernel forked) until it is empty.
    pub async fn kill_remaining(&self) {
        let procs = self.dirs[PIDS.min(self.dirs.len() - 1)].join("cgroup.procs");
        for round in 0..100 {
            let pids: Vec<i32> = read_trim(&procs).lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            // Killed tasks leave the cgroup asynchronously; give them a moment, growing slowly.
            tokio::time::sleep(std::time::Duration::from_millis(1 + round)).await;
        }
        tracing::warn!(cgroup = %procs.display(), "processes survive SIGKILL in a kernel cgroup");
    }

    /// Removes the cgroup of a kernel that never started (nothing ever ran in it).
    pub fn discard(self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Removes the cgroup directories, trying for about `patience`; returns whether all went.
    /// A cgroup stays busy while a killed task is not yet reaped (a zombie reparented to an
    /// init that reaps slowly), so callers try again later rather than give up.
    pub async fn remove(&mut self, patience: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        let mut delay = std::time::Duration::from_millis(1);
        loop {
            self.dirs.retain(|d| match std::fs::remove_dir(d) {
                Ok(()) => false,
                Err(e) => e.kind() != ErrorKind::NotFound,
            });
            if self.dirs.is_empty() {
                return true;
            }
            if tokio::time::Instant::now() + delay > deadline {
                return false;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }

    /// What the kernel used, read from its cgroup (after its processes are gone, before the
    /// cgroup is removed: the counters cover everything that ran in it).
    pub fn usage(&self) -> crate::metrics::KernelUsage {
        let reader = if self.v2 {
            crate::metrics::CgroupReader::for_dirs(self.dirs.first().cloned(), None, None)
        } else {
            crate::metrics::CgroupReader::for_dirs(None, self.dirs.get(1).cloned(), self.dirs.get(CPUACCT).cloned())
        };
        reader.read()
    }

    /// The directories not yet removed.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl Cgroups {
    /// Makes this agent's subtree (`berth/<scope>` in each hierarchy) again where it is gone,
    /// as [`Cgroups::detect`] made it.
    fn restore_bases(&self) -> Result<(), CgroupError> {
        for (i, base) in self.bases.iter().enumerate() {
            let levels = [base.parent(), Some(base.as_path())];
            for dir in levels.into_iter().flatten().filter(|d| !d.exists()) {
                if self.v2 {
                    mkdir(dir)?;
                    v2_enable(dir)?;
                } else {
                    v1_mkdir(dir, i == 0)?;
                }
                tracing::warn!("cgroup {} was removed under the agent: made it again", dir.display());
            }
        }
        Ok(())
    }
}

/// Index of the pids hierarchy on v1 (the one whose `cgroup.procs` lists a kernel's tasks).
const PIDS: usize = 2;
/// Index of the (optional) cpuacct hierarchy on v1.
const CPUACCT: usize = 3;

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

/// Writes `value` to the limit file `file` of the cgroup `dir`.
fn limit(dir: &Path, file: &'static str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(|source| CgroupError::Limit { what: file, path, source })
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io("create cgroup", dir)(e)),
    }
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A `name value` line of a flat-keyed cgroup file.
fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.split_once(' ').filter(|(k, _)| *k == name).and_then(|(_, v)| v.trim().parse().ok()))
}

/// On v2 a cgroup with processes cannot delegate controllers ("no internal processes"), so an
/// agent that is not in the root cgroup first moves itself into a leaf `<own>/agent` and then
/// creates kernels beside it. Returns the directory under which `berth/` goes.
fn v2_leave_own_cgroup(root: &Path, own_rel: &str) -> Result<PathBuf, CgroupError> {
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

fn v2_enable(dir: &Path) -> Result<(), CgroupError> {
    let f = dir.join("cgroup.subtree_control");
    std::fs::write(&f, "+cpuset +memory +pids").map_err(io("enable controllers in", &f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_counters() {
        assert_eq!(counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3", "oom_kill"), Some(3));
        assert_eq!(counter("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0", "oom_kill"), Some(1));
        assert_eq!(counter("oom_kill_disable 0\nunder_oom 0", "oom_kill"), None);
    }
}
