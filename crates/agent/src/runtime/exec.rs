//! A command started inside a running process kernel (`berth exec`), as the kernel's own
//! processes are: in its mount namespace (its private `/tmp` and `/dev/shm`), its cgroups
//! (cpuset, memory and pids limits, usage), its session-less process group of its own, as its
//! user and groups, in its working directory, with its environment. All of it is read from the
//! kernel's main process in `/proc`, so kernels taken over from an earlier agent work too.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::cgroup_fs;

/// Why a kernel's context cannot be read (the kernel ended, or its cgroups cannot be joined).
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("the kernel's process {pid} is gone ({source})")]
    Gone { pid: u32, source: std::io::Error },
    #[error("cannot read the user of the kernel's process {pid}")]
    NoUser { pid: u32 },
    #[error("cannot open {}: {source}", path.display())]
    Cgroup { path: PathBuf, source: std::io::Error },
}

/// What a command started in a kernel needs from it.
#[derive(Debug)]
pub struct KernelContext {
    mount_ns: File,
    cgroup_procs: Vec<File>,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    cwd: PathBuf,
    env: Vec<(OsString, OsString)>,
}

impl KernelContext {
    /// The kernel's variable `name`, when set.
    pub fn var(&self, name: &str) -> Option<String> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_string_lossy().into_owned())
    }

    /// Reads the context of the kernel whose main process is `pid`.
    pub fn of_pid(pid: u32) -> Result<KernelContext, ContextError> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let gone = |source| ContextError::Gone { pid, source };
        let status = std::fs::read_to_string(proc_dir.join("status")).map_err(gone)?;
        let ids = |field: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .map(|rest| rest.split_whitespace().filter_map(|v| v.parse().ok()).collect())
                .unwrap_or_default()
        };
        let (uid, gid) = (ids("Uid:"), ids("Gid:"));
        let (Some(&uid), Some(&gid)) = (uid.first(), gid.first()) else {
            return Err(ContextError::NoUser { pid });
        };
        let env = environ(pid).map_err(gone)?;
        let cgroups = std::fs::read_to_string(proc_dir.join("cgroup")).map_err(gone)?;
        Ok(KernelContext {
            mount_ns: File::open(proc_dir.join("ns/mnt")).map_err(gone)?,
            cgroup_procs: cgroup_procs(&cgroups)?,
            uid,
            gid,
            groups: ids("Groups:"),
            cwd: std::fs::read_link(proc_dir.join("cwd")).map_err(gone)?,
            env,
        })
    }

    /// `command` set up to start inside the kernel (stdio is the caller's to set), with `extra`
    /// over the kernel's environment (but not over its device variables).
    pub fn command(self, argv: &[String], extra: &BTreeMap<String, String>) -> tokio::process::Command {
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.envs(super::env::exec_vars(extra));
        // The closure owns the files, so their descriptors stay open until the child uses
        // them (they close on exec).
        let (files, ns_file) = (self.cgroup_procs, self.mount_ns);
        let procs: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        let ns = ns_file.as_raw_fd();
        let (uid, gid, groups) = (self.uid, self.gid, self.groups);
        let cwd = std::ffi::CString::new(self.cwd.as_os_str().as_encoded_bytes()).unwrap_or_default();
        // SAFETY: between fork and exec only async-signal-safe calls: prctl, getppid, setns,
        // write (cgroups, in `child_setup`), setgroups/setgid/setuid and chdir.
        let agent = std::process::id() as libc::pid_t;
        unsafe {
            cmd.pre_exec(move || {
                let _open = (&files, &ns_file);
                if libc::setns(ns, libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                super::child_setup(&procs)?;
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The command is the stream's: an agent that dies (SIGKILL, a crash) takes it
                // along instead of leaving it in the kernel. Set after the user change, which
                // clears it; the signal follows the forking thread, so [`spawn`] forks from
                // one that lives as long as the agent; a parent already gone is caught by
                // getppid.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != agent {
                    return Err(std::io::Error::other("the agent is gone"));
                }
                Ok(())
            });
        }
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        cmd
    }
}

/// Starts a command built by [`KernelContext::command`] from the agent's spawner thread: the
/// command's parent-death signal fires when the thread that forked it ends, and runtime
/// threads come and go (`block_in_place`, the blocking pool), while this one lives as long as
/// the agent.
pub async fn spawn(cmd: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    type Job = (tokio::process::Command, tokio::sync::oneshot::Sender<std::io::Result<tokio::process::Child>>);
    static SPAWNER: std::sync::OnceLock<std::sync::mpsc::Sender<Job>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("berth-exec-spawner".into())
            .spawn(move || {
                // Children are registered with the runtime's process driver.
                let _in = runtime.enter();
                for (mut cmd, done) in rx {
                    let _ = done.send(cmd.spawn());
                }
            })
            .expect("start the exec spawner thread");
        tx
    });
    let (done, child) = tokio::sync::oneshot::channel();
    let lost = || std::io::Error::other("the exec spawner thread is gone");
    if spawner.send((cmd, done)).is_err() {
        return Err(lost());
    }
    child.await.map_err(|_| lost())?
}

/// The environment process `pid` started with (`/proc/<pid>/environ`).
pub fn environ(pid: u32) -> std::io::Result<Vec<(OsString, OsString)>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let i = kv.iter().position(|b| *b == b'=')?;
            Some((OsString::from_vec(kv[..i].to_vec()), OsString::from_vec(kv[i + 1..].to_vec())))
        })
        .collect())
}

/// Opens the `cgroup.procs` of every cgroup the process is in (`/proc/<pid>/cgroup` text).
fn cgroup_procs(proc_cgroup: &str) -> Result<Vec<File>, ContextError> {
    let paths = cgroup_fs::own_paths(proc_cgroup);
    let open = |dir: PathBuf| {
        let path = dir.join("cgroup.procs");
        std::fs::OpenOptions::new().write(true).open(&path).map_err(|source| ContextError::Cgroup { path, source })
    };
    let root = Path::new(cgroup_fs::CGROUP_ROOT);
    if cgroup_fs::is_unified() {
        return match paths.get("") {
            Some(rel) => Ok(vec![open(root.join(rel.trim_start_matches('/')))?]),
            None => Ok(Vec::new()),
        };
    }
    let mountinfo = cgroup_fs::read_proc(Path::new("/proc/self/mountinfo"));
    let mut files = Vec::new();
    for controller in ["cpuset", "memory", "pids", "cpuacct"] {
        if let (Some(rel), Some(mount)) = (paths.get(controller), cgroup_fs::v1_mount(&mountinfo, controller)) {
            files.push(open(mount.join(rel.trim_start_matches('/')))?);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own context: our user, directory and environment (the namespace and cgroups are
    /// ours, so a command started in it is started like us).
    #[test]
    fn reads_a_processes_context() {
        let c = KernelContext::of_pid(std::process::id()).unwrap();
        assert_eq!(c.uid, unsafe { libc::getuid() });
        assert_eq!(c.cwd, std::env::current_dir().unwrap());
        assert!(c.env.iter().any(|(k, _)| k == "PATH"));
        let e = KernelContext::of_pid(u32::MAX - 1).unwrap_err();
        assert!(matches!(e, ContextError::Gone { .. }) && e.to_string().contains("is gone"), "{e}");
    }
}
