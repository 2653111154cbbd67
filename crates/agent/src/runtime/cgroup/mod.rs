//! Per-kernel cgroups: cpuset, memory limit (no swap) and pids limit, on cgroup v2 or v1, and
//! on v1 a cpuacct cgroup (where that controller is mounted) so a kernel's CPU time is counted.
//!
//! Layout: kernels live under the agent's own cgroup, `<agent cgroup>/berth/<node>/<job>.<attempt>.<index>`,
//! so a systemd unit with `Delegate=yes` (v2) or a container's memory cgroup (v1) keeps
//! containing them. On v1 this is done per controller (cpuset, memory, pids each have their
//! own hierarchy and the agent may sit at a different path in each).
//!
//! What differs between the versions is a [`CgroupDriver`] ([`v1::V1`], [`v2::V2`], after
//! youki's `libcgroups` managers): where the subtree is, which files carry a limit or a
//! counter. What they share is here: making, opening, joining, emptying and removing a
//! kernel's cgroup, one directory per hierarchy. `cgroup_fs` finds the hierarchies in
//! `/proc`; the limits are a few plain file writes. The child joins before exec: we pre-open
//! each `cgroup.procs` and the child writes `0` to them between fork and exec, so no fork of
//! the kernel can escape.

mod v1;
mod v2;

use std::fmt;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// What one cgroup version does its own way: the hierarchies of this agent's subtree, the
/// limit files, the OOM and usage counters.
pub trait CgroupDriver: Send + Sync + fmt::Debug {
    /// Whether this is the unified (v2) hierarchy.
    fn is_v2(&self) -> bool;

    /// This agent's subtree (`<agent cgroup>/berth/<scope>`) in each hierarchy a kernel joins,
    /// in the order it joins them.
    fn bases(&self) -> Vec<&Path>;

    /// The base whose `cgroup.procs` lists every task of a kernel.
    fn tasks_base(&self) -> &Path;

    /// Whether a kernel may lack its cgroup in hierarchy `base` (v1 `cpuacct`, which older
    /// berths did not make): it is then watched without.
    fn optional(&self, base: &Path) -> bool;

    /// Makes one directory of the subtree in hierarchy `base` again, as detection made it.
    fn make_level(&self, base: &Path, dir: &Path) -> Result<(), CgroupError>;

    /// Writes the binding's limits (CPUs, memory nodes, memory without swap) and `pids_max`
    /// into kernel cgroup `name`, made already in every base.
    fn apply(&self, name: &str, binding: &Binding, pids_max: i64) -> Result<(), CgroupError>;

    /// How many times the OOM killer fired in kernel cgroup `name`; `None` when the kernel
    /// keeps no such counter.
    fn oom_kills(&self, name: &str) -> Option<u64>;

    /// Whether kernel cgroup `name` ever hit its memory limit (for kernels without an OOM
    /// counter).
    fn limit_hit(&self, name: &str) -> bool;

    /// A reader of what kernel cgroup `name` used.
    fn usage(&self, name: &str) -> crate::metrics::CgroupReader;
}

/// Where kernel cgroups go on this machine.
#[derive(Debug, Clone)]
pub struct Cgroups {
    driver: Arc<dyn CgroupDriver>,
}

/// One kernel's cgroup (a directory per v1 controller, or one on v2).
#[derive(Debug)]
pub struct KernelCgroup {
    driver: Arc<dyn CgroupDriver>,
    name: String,
    /// The directories not yet removed.
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
        let driver: Arc<dyn CgroupDriver> = if cgroup_fs::is_unified() {
            Arc::new(v2::V2::detect(&own, &sub)?)
        } else {
            Arc::new(v1::V1::detect(&own, &sub)?)
        };
        Ok(Cgroups { driver })
    }

    /// Kernel cgroups made by `driver` (tests give one on a plain directory).
    #[cfg(test)]
    fn with_driver(driver: Arc<dyn CgroupDriver>) -> Cgroups {
        Cgroups { driver }
    }

    /// Removes `berth/<node>` and `berth` where they are empty (errors mean still in use).
    pub fn remove_parents(&self) {
        for b in self.driver.bases() {
            if std::fs::remove_dir(b).is_ok() {
                let _ = b.parent().map(std::fs::remove_dir);
            }
        }
    }

    /// Kills every process in the kernel cgroups of this agent's subtree, except those named
    /// in `keep` (kernels taken over, see `adopt`), and removes them: they belong to kernels of
    /// an earlier agent process (see `stale`). Returns how many kernel cgroups had processes.
    pub fn reap_stale(&self, keep: &[String]) -> usize {
        let procs_base = self.driver.tasks_base();
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
            for b in self.driver.bases() {
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
        self.driver.is_v2()
    }

    /// The existing cgroup of a kernel an earlier agent process started (to watch it again),
    /// or `None` when it is gone.
    pub fn open(&self, name: &str, mem_limit: u64) -> Option<KernelCgroup> {
        let mut dirs = Vec::new();
        for b in self.driver.bases() {
            let d = b.join(name);
            match d.is_dir() {
                true => dirs.push(d),
                false if self.driver.optional(b) => {}
                false => return None,
            }
        }
        Some(KernelCgroup { driver: self.driver.clone(), name: name.to_string(), dirs, procs: Vec::new(), mem_limit })
    }

    /// Creates the kernel's cgroup with the binding's limits and opens its `cgroup.procs`.
    pub fn create(&self, name: &str, binding: &Binding, pids_max: i64) -> Result<KernelCgroup, CgroupError> {
        let mut cg = KernelCgroup {
            driver: self.driver.clone(),
            name: name.to_string(),
            dirs: Vec::new(),
            procs: Vec::new(),
            mem_limit: binding.mem_bytes,
        };
        for b in self.driver.bases() {
            let d = b.join(name);
            let made = match std::fs::create_dir(&d) {
                // Our subtree was removed while empty (an admin's or a tool's clean-up of empty
                // cgroups): make it again, once.
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.restore_bases()?;
                    std::fs::create_dir(&d)
                }
                r => r,
            };
            match made {
                Ok(()) => {}
                // Left over from a crashed agent: reuse it (it has no live tasks of ours).
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("create cgroup", &d)(e)),
            }
            cg.dirs.push(d);
        }
        self.driver.apply(name, binding, pids_max)?;
        for d in &cg.dirs {
            let p = d.join("cgroup.procs");
            cg.procs.push(std::fs::OpenOptions::new().write(true).open(&p).map_err(io("open", &p))?);
        }
        Ok(cg)
    }

    /// Makes this agent's subtree (`berth/<scope>` in each hierarchy) again where it is gone,
    /// as [`Cgroups::detect`] made it.
    fn restore_bases(&self) -> Result<(), CgroupError> {
        for base in self.driver.bases() {
            let levels = [base.parent(), Some(base)];
            for dir in levels.into_iter().flatten().filter(|d| !d.exists()) {
                self.driver.make_level(base, dir)?;
                tracing::warn!("cgroup {} was removed under the agent: made it again", dir.display());
            }
        }
        Ok(())
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
        self.driver.oom_kills(&self.name)
    }

    /// v1 without an `oom_kill` counter (kernels before 4.13): whether the limit was ever hit.
    pub fn limit_hit(&self) -> bool {
        self.driver.limit_hit(&self.name)
    }

    /// SIGKILLs whatever is left in the cgroup (daemons the kernel forked) until it is empty.
    pub async fn kill_remaining(&self) {
        let procs = self.driver.tasks_base().join(&self.name).join("cgroup.procs");
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
        self.driver.usage(&self.name).read()
    }

    /// The directories not yet removed.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
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

/// The binding's CPUs and memory nodes, or the parent's where it names none (v1 needs values).
fn cpus_mems(binding: &Binding, parent_cpus: &str, parent_mems: &str) -> (String, String) {
    let cpus = if binding.cpus.is_empty() { parent_cpus.to_string() } else { binding.cpuset() };
    let mems = if binding.mems.is_empty() { parent_mems.to_string() } else { binding.memset() };
    (cpus, mems)
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

    #[test]
    fn a_kernel_of_an_older_berth_is_opened_without_its_cpuacct_cgroup() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = v1::V1::in_dir(tmp.path(), true);
        let bases: Vec<PathBuf> = v1.bases().iter().map(|b| b.to_path_buf()).collect();
        let cgroups = Cgroups::with_driver(Arc::new(v1));
        for b in &bases[..3] {
            std::fs::create_dir_all(b.join("7.0.0")).unwrap();
        }
        let cg = cgroups.open("7.0.0", 1 << 20).expect("cpuacct is optional");
        assert_eq!(cg.dirs().len(), 3);
        std::fs::remove_dir(bases[1].join("7.0.0")).unwrap();
        assert!(cgroups.open("7.0.0", 1 << 20).is_none(), "memory is not optional");
    }
}
