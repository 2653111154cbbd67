//! A private `/dev/shm` and `/tmp` for each process kernel, charged to its memory limit and
//! gone with it (issue 13: files a job left in the node's `/dev/shm` outlived it, beyond its
//! `--mem`, readable by other users' jobs).
//!
//! Between fork and exec the kernel's first process enters a mount namespace of its own
//! (`unshare(CLONE_NEWNS)`), makes every mount a slave of the host's (host mounts still show
//! up in the kernel, nothing the kernel mounts reaches the host), and mounts a fresh tmpfs
//! (mode 1777, `size` = the kernel's memory limit) on `/dev/shm` and on `/tmp`. tmpfs pages are
//! charged to the memory cgroup of the process that writes them, so a kernel that fills them
//! past its `--mem` is OOM-killed (or gets ENOSPC at `size`), and the namespace, with both
//! mounts and their pages, goes when the kernel's last process exits.
//!
//! Mounts need CAP_SYS_ADMIN: [`Plan::enter`] runs after the cgroup join and does the switch
//! to the kernel's uid itself, after the mounts. The kernel's own dir and work dir may lie
//! under `/tmp` (test data dirs, the work-dir fallback of a root agent whose data dir the run
//! user cannot reach): they are bound back at the same path inside the private `/tmp`, so
//! `HOME`, the work dir and the cache token file keep working. So are the directories a
//! Slurm job sees on the host's `/tmp` and counts on (issue 48): the submit directory
//! (`SLURM_SUBMIT_DIR`), the submitter's virtual environment and the first of its `PATH`
//! entries there (a venv, an `srun` link), each only when the kernel's user could reach it on
//! the host ([`reachable`]), since the dirs recreated on the way are traversable by anyone;
//! nothing else of the host's `/tmp` is visible. An agent that is not root (or may not make namespaces) runs kernels
//! on the node's `/dev/shm` and `/tmp` and says so once.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a kernel's private mounts (its `/dev/shm` and `/tmp`, its data folders) cannot be
/// planned or made on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    #[error("path `{0}` holds a NUL byte")]
    NulByte(String),
    #[error("bad tmpfs options")]
    TmpfsOptions,
    #[error("bad mount point")]
    MountPoint,
    /// The probe's child could not unshare or mount (errno text, lowercase).
    #[error("cannot make a mount namespace: {0}")]
    Namespace(String),
    #[error("the mount namespace probe ended oddly: {0}")]
    ProbeEnded(String),
    #[error("cannot fork the mount namespace probe: {0}")]
    Fork(String),
    #[error(transparent)]
    Folder(#[from] super::folder_mounts::FolderError),
}

/// The mount points a kernel gets privately.
const POINTS: [&str; 2] = ["/dev/shm", "/tmp"];

/// At most this many of a kernel's paths are bound back into one private mount (its kernel
/// dir, work dir, environment, submit dir, venv, `PATH` entries), so the child needs no
/// allocation.
const MAX_BINDS: usize = 8;

/// Dirs recreated inside a private mount on the way to a bound path: traversable only.
const DIR_MODE: libc::mode_t = 0o711;

/// That this node can give kernels private mounts, and on which of [`POINTS`].
#[derive(Debug, Clone)]
pub(crate) struct PrivateTmp {
    points: Vec<PathBuf>,
}

impl PrivateTmp {
    /// Probes once (a forked child tries the namespace and a tmpfs mount): `None`, after a
    /// warning, when kernels must share the node's `/dev/shm` and `/tmp`.
    pub(crate) fn detect() -> Option<PrivateTmp> {
        let points: Vec<PathBuf> = POINTS.iter().map(PathBuf::from).filter(|p| p.is_dir()).collect();
        if points.is_empty() {
            return None;
        }
        let why = if !nix::unistd::Uid::effective().is_root() {
            Some("the agent is not root".to_string())
        } else {
            probe(&points[0]).err().map(|e| e.to_string())
        };
        match why {
            None => Some(PrivateTmp { points }),
            Some(why) => {
                tracing::warn!(
                    "kernels share the node's /dev/shm and /tmp ({why}): files they leave there outlive them and \
                     are not charged to their memory limit; run the agent as root for a private /dev/shm and /tmp per kernel"
                );
                None
            }
        }
    }

    /// A kernel's private mounts of `size` bytes (0: tmpfs's default), with `keep` bound back
    /// when under a mount point: plain data, so that the kernel supervisor (another process)
    /// can make the [`Plan`] of a kernel it forks.
    /// `folders` are bound into the same namespace ([`super::folder_mounts`]).
    pub(crate) fn request(
        &self,
        size: u64,
        keep: &[&Path],
        folders: &[berth_model::folder::FolderBind],
    ) -> PrivateTmpRequest {
        PrivateTmpRequest {
            points: self.points.clone(),
            size,
            keep: keep.iter().map(|p| p.to_path_buf()).collect(),
            folders: folders.to_vec(),
        }
    }
}

/// What [`PrivateTmp::request`] asks for a kernel (sent to the supervisor in its spawn request).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrivateTmpRequest {
    points: Vec<PathBuf>,
    size: u64,
    keep: Vec<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    folders: Vec<berth_model::folder::FolderBind>,
}

impl PrivateTmpRequest {
    /// What the kernel's child does before exec: the private mounts, then the switch to
    /// `user` (uid, gid) and `chdir(workdir)` as that user. Made in the parent: the child may
    /// not allocate.
    pub(crate) fn plan(&self, user: Option<&UserSwitch>, workdir: &Path) -> Result<Plan, MountError> {
        let (size, keep) = (self.size, &self.keep);
        let c =
            |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| MountError::NulByte(p.display().to_string()));
        let data = match size {
            0 => CString::new("mode=1777"),
            n => CString::new(format!("size={n},mode=1777")),
        }
        .map_err(|_| MountError::TmpfsOptions)?;
        let keep: Vec<PathBuf> = keep.iter().filter_map(|p| p.canonicalize().ok()).collect();
        let mut mounts = Vec::new();
        for point in &self.points {
            let mut under: Vec<&PathBuf> = keep.iter().filter(|k| k.starts_with(point) && *k != point).collect();
            under.sort();
            under.dedup();
            // A path inside another bound one comes along with it.
            let outer: Vec<&PathBuf> =
                under.iter().copied().filter(|k| !under.iter().any(|o| o != k && k.starts_with(o))).collect();
            let mut binds = Vec::new();
            for k in outer.into_iter().take(MAX_BINDS) {
                let rel = k.strip_prefix(point).unwrap_or(k);
                let mut dirs = Vec::new();
                let mut at = point.clone();
                for part in rel.iter() {
                    at.push(part);
                    dirs.push(c(&at)?);
                }
                binds.push(Bind { source: c(k)?, dirs });
            }
            mounts.push(PrivateMount { target: c(point)?, binds });
        }
        let folders = super::folder_mounts::plan(&self.folders)?;
        Ok(Plan { mounts, folders, data, user: user.cloned(), workdir: c(workdir)? })
    }
}

/// How many of the submitter's `PATH` entries under a private mount are bound back.
const MAX_PATH_BINDS: usize = 2;

/// The host directories of a job that Slurm's jobs see and that lie under `/tmp` or
/// `/dev/shm`: its submit directory, the submitter's virtual environment and the first
/// [`MAX_PATH_BINDS`] of the `PATH` entries of its environment `env` there, as far as the
/// kernel's user (`who`: uid, gid and groups) could reach them on the host.
pub(crate) fn seen_on_host(
    spec: &berth_model::JobSpec,
    env: &std::collections::BTreeMap<String, String>,
    who: (u32, u32, &[u32]),
) -> Vec<PathBuf> {
    let under_points = |p: &&str| POINTS.iter().any(|m| Path::new(p).starts_with(m));
    let venv = spec.env.get("VIRTUAL_ENV").or_else(|| spec.submit_env.get("VIRTUAL_ENV"));
    let path_dirs = env.get("PATH").into_iter().flat_map(|p| p.split(':')).filter(under_points).take(MAX_PATH_BINDS);
    spec.submit_dir
        .iter()
        .chain(venv)
        .map(String::as_str)
        .filter(under_points)
        .chain(path_dirs)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && reachable(p, who.0, who.1, who.2))
        .collect()
}

/// Whether the user `uid` (primary group `gid`, supplementary `groups`) could reach the
/// directory `path` on the host: every directory from `/` down to it searchable by them
/// (mode bits: owner, else group, else other), and it a directory. Said from the canonical
/// path, so a link cannot lead the bind elsewhere; root reaches everything.
pub(crate) fn reachable(path: &Path, uid: u32, gid: u32, groups: &[u32]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = path.canonicalize() else { return false };
    if !real.is_dir() {
        return false;
    }
    if uid == 0 {
        return true;
    }
    real.ancestors().all(|dir| {
        let Ok(m) = std::fs::metadata(dir) else { return false };
        let mode = m.mode();
        let bit = if m.uid() == uid {
            mode & 0o100
        } else if m.gid() == gid || groups.contains(&m.gid()) {
            mode & 0o010
        } else {
            mode & 0o001
        };
        bit != 0
    })
}

/// The Unix user a kernel's child switches to: uid, primary gid and supplementary groups
/// (the user's groups on this node, as `initgroups` would set them).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UserSwitch {
    pub uid: u32,
    pub gid: u32,
    #[serde(default)]
    pub groups: Vec<u32>,
}

/// What a kernel's child does before exec besides its session and cgroups: the private
/// mounts `private` asks for, the switch to `user`, and entering `workdir` as that user.
/// `None` when there is nothing to do (no private mounts, no switch: the spawn's own
/// `current_dir` enters the work dir).
pub(crate) fn child_plan(
    private: Option<&PrivateTmpRequest>,
    user: Option<&UserSwitch>,
    workdir: &Path,
) -> Result<Option<Plan>, MountError> {
    match (private, user) {
        (Some(p), _) => p.plan(user, workdir).map(Some),
        (None, Some(u)) => {
            let workdir = CString::new(workdir.as_os_str().as_bytes())
                .map_err(|_| MountError::NulByte(workdir.display().to_string()))?;
            Ok(Some(Plan {
                mounts: Vec::new(),
                folders: Vec::new(),
                data: CString::default(),
                user: Some(u.clone()),
                workdir,
            }))
        }
        (None, None) => Ok(None),
    }
}

/// One private mount and the kernel's paths bound back into it.
#[derive(Debug)]
struct PrivateMount {
    target: CString,
    binds: Vec<Bind>,
}

/// A path under a mount point that the kernel keeps seeing: `dirs` are the dirs from the
/// mount point down to it (the last one is the bind target).
#[derive(Debug)]
struct Bind {
    source: CString,
    dirs: Vec<CString>,
}

/// Everything the child does before exec, prepared by the parent (the child may not allocate).
#[derive(Debug)]
pub(crate) struct Plan {
    mounts: Vec<PrivateMount>,
    /// Data folders bound into the namespace.
    folders: Vec<super::folder_mounts::FolderPlan>,
    /// tmpfs options: `size=N,mode=1777`.
    data: CString,
    user: Option<UserSwitch>,
    workdir: CString,
}

impl Plan {
    /// Enters the kernel's mount namespace, mounts its private `/dev/shm` and `/tmp`, switches
    /// to its user and enters its work dir. Runs between fork and exec, after the cgroup join
    /// (so the kernel's tmpfs pages are charged to it), as root: only async-signal-safe calls.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        let check = |r: libc::c_int| if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
        // SAFETY: plain system calls on NUL-terminated strings and a gid array the parent built.
        unsafe {
            if !self.mounts.is_empty() || !self.folders.is_empty() {
                check(libc::unshare(libc::CLONE_NEWNS))?;
                // Slave, not shared: the kernel's mounts never reach the host (or other kernels).
                let root = c"/";
                check(libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ))?;
            }
            // Before the private /tmp hides the host's: a folder's storage may lie under it.
            super::folder_mounts::bind(&self.folders)?;
            for m in &self.mounts {
                // Opened in the new namespace, before the tmpfs hides them: a bind's source
                // must be a mount of the caller's namespace.
                let mut fds = [-1; MAX_BINDS];
                for (fd, b) in fds.iter_mut().zip(&m.binds) {
                    *fd = libc::open(b.source.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
                    check(*fd)?;
                }
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    m.target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    self.data.as_ptr().cast(),
                ))?;
                for (&fd, b) in fds.iter().zip(&m.binds) {
                    for d in &b.dirs {
                        if libc::mkdir(d.as_ptr(), DIR_MODE) == 0 {
                            // Whatever the agent's umask: the kernel's user must pass through.
                            check(libc::chmod(d.as_ptr(), DIR_MODE))?;
                        } else {
                            let e = std::io::Error::last_os_error();
                            if e.raw_os_error() != Some(libc::EEXIST) {
                                return Err(e);
                            }
                        }
                    }
                    let mut buf = [0u8; 32];
                    let source = fd_path(fd, &mut buf);
                    let Some(target) = b.dirs.last() else { continue };
                    check(libc::mount(
                        source.cast(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                    libc::close(fd);
                }
            }
            if let Some(u) = &self.user {
                check(libc::setgroups(u.groups.len(), u.groups.as_ptr()))?;
                check(libc::setgid(u.gid))?;
                check(libc::setuid(u.uid))?;
            }
            // As the kernel's user, in its namespace: a work dir it may not enter fails here,
            // as it would without private mounts.
            check(libc::chdir(self.workdir.as_ptr()))
        }
    }
}

/// `/proc/self/fd/<fd>` into `buf` (NUL-terminated), without allocating.
fn fd_path(fd: libc::c_int, buf: &mut [u8; 32]) -> *const u8 {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr()
}

/// Whether a child of this process may enter a mount namespace and mount a tmpfs on `point`
/// there (a container without CAP_SYS_ADMIN may not); the error says why not.
fn probe(point: &Path) -> Result<(), MountError> {
    let target = CString::new(point.as_os_str().as_bytes()).map_err(|_| MountError::MountPoint)?;
    // SAFETY: the child makes only async-signal-safe calls and leaves with `_exit`.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"size=4096".as_ptr().cast(),
                ) == 0;
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            libc::_exit(if ok { 0 } else { errno & 0xff })
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => match nix::sys::wait::waitpid(child, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, errno)) => {
                Err(MountError::Namespace(nix::errno::Errno::from_raw(errno).desc().to_lowercase()))
            }
            other => Err(MountError::ProbeEnded(format!("{other:?}"))),
        },
        Err(e) => Err(MountError::Fork(e.desc().to_lowercase())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_the_user_could_reach_are_bound() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir_in("/tmp").unwrap();
        let open = base.path().join("open/sub");
        let shut = base.path().join("shut");
        let inside = shut.join("data");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(shut.as_path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = nix::unistd::Uid::effective().as_raw();
        let other = if me == 0 { 4242 } else { 0 };
        assert!(reachable(&open, other, other, &[]) || me != 0, "an open dir is anyone's");
        assert!(reachable(&inside, 0, 0, &[]), "root reaches everything");
        if me == 0 {
            assert!(!reachable(&inside, other, other, &[]), "a dir under another's 0700 dir stays hidden");
            assert!(!reachable(&open.join("missing"), other, other, &[]));
            std::fs::write(open.join("f"), "").unwrap();
            assert!(!reachable(&open.join("f"), other, other, &[]), "only directories");
        }
    }

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        for (fd, want) in [(0, "/proc/self/fd/0"), (7, "/proc/self/fd/7"), (1234, "/proc/self/fd/1234")] {
            let p = fd_path(fd, &mut buf);
            // SAFETY: fd_path NUL-terminates within buf.
            let s = unsafe { std::ffi::CStr::from_ptr(p.cast()) };
            assert_eq!(s.to_str().unwrap(), want);
        }
    }

    #[test]
    fn paths_under_a_mount_point_are_bound_back_once() {
        let base = tempfile::tempdir_in("/tmp").unwrap();
        let kernel = base.path().join("kernels/1.1.0");
        let work = kernel.join("work");
        std::fs::create_dir_all(&work).unwrap();
        // Under no mount point, wherever the repository is cloned (a clone under /tmp too).
        let outside = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = PrivateTmp { points: vec!["/dev/shm".into(), "/tmp".into()] };
        let user = UserSwitch { uid: 7, gid: 8, groups: vec![8, 27] };
        let plan = p.request(64 << 20, &[&kernel, &work, outside.path()], &[]).plan(Some(&user), &work).unwrap();
        assert_eq!(plan.user.as_ref(), Some(&user));
        assert_eq!(plan.data.to_str().unwrap(), format!("size={},mode=1777", 64 << 20));
        assert_eq!(plan.mounts.len(), 2);
        assert!(plan.mounts[0].binds.is_empty(), "nothing of the kernel's lies in /dev/shm");
        let tmp = &plan.mounts[1];
        assert_eq!(tmp.target.to_str().unwrap(), "/tmp");
        assert_eq!(tmp.binds.len(), 1, "the work dir comes along with the kernel dir: {:?}", tmp.binds);
        let kernel = kernel.canonicalize().unwrap();
        assert_eq!(tmp.binds[0].source.to_str().unwrap(), kernel.to_str().unwrap());
        let dirs: Vec<&str> = tmp.binds[0].dirs.iter().map(|d| d.to_str().unwrap()).collect();
        assert_eq!(dirs.len(), 3, "{dirs:?}");
        assert_eq!(dirs[2], kernel.to_str().unwrap());
        assert!(kernel.starts_with(dirs[0]) && Path::new(dirs[0]).parent() == Some(Path::new("/tmp")));
        let plan = p.request(0, &[], &[]).plan(None, &work).unwrap();
        assert_eq!(plan.data.to_str().unwrap(), "mode=1777", "no memory limit: tmpfs's default size");
        // Without private mounts a switch still goes through a plan (groups, then chdir as
        // the user), and nothing at all needs none.
        let only = child_plan(None, Some(&user), &work).unwrap().unwrap();
        assert!(only.mounts.is_empty());
        assert!(child_plan(None, None, &work).unwrap().is_none());
    }
}
