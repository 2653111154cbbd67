//! Fast cgroup joins on cgroup v1: the kernel's `favordynmods` mode.
//!
//! A process kernel joins its cgroups between fork and exec (`cgroup.rs`). On cgroup v1 such a
//! move takes the kernel's global threadgroup rwsem for writing, which waits for an RCU grace
//! period unless another move happened just before: measured on the 2-core VM, a join after
//! 0.5 s of quiet took 13.4 ms (p50), back to back 0.18 ms. That grace period was half of a
//! job's submit→start on an idle node (docs/perf.md). With `favordynmods` (Linux 6.0+) the
//! rwsem stays in its writer-friendly mode and a quiet join takes 0.4 ms; forks and exits pay
//! a little more (not measurable in a fork+exit+wait loop, ~1 ms each either way).
//!
//! The option is a property of a cgroup hierarchy, but its effect is global, so the agent
//! mounts a named hierarchy of its own with it (`name=berth-dynmods`, no controllers) instead
//! of remounting the system's, at `/run/berth/cgroup-dynmods` (in a 0700 directory: a cgroup
//! file system's files are world-readable, and the agent's data dir holds nothing other users
//! may read). It is the node's setting, not one agent's: every agent on the machine finds and
//! keeps the one mount (an agent killed with SIGKILL could not remove its own anyway), until
//! the machine reboots or an admin unmounts it. `berth agent --no-favordynmods` leaves the
//! machine alone.

use std::path::{Path, PathBuf};

/// The hierarchy's name (a second agent on the machine mounts the same one).
const NAME: &str = "berth-dynmods";

/// Where the mounts go: root's, closed to others.
const RUN_DIR: &str = "/run/berth";

/// The node's `favordynmods` mount, found or made by this agent.
#[derive(Debug)]
pub struct FavorDynmods {
    mount: PathBuf,
}

impl FavorDynmods {
    /// Finds the node's mount at `/run/berth/cgroup-dynmods`, or makes it. `None` (logged)
    /// where the kernel does not know the option or the agent may not mount.
    pub fn enable() -> Option<FavorDynmods> {
        let base = Path::new(RUN_DIR);
        let mount = base.join("cgroup-dynmods");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if mounted_at(&mountinfo, &mount) {
            return Some(FavorDynmods { mount });
        }
        let made = std::fs::create_dir_all(&mount).and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))
        });
        if let Err(e) = made {
            tracing::info!("no favordynmods cgroup mount (cannot create `{}`: {e})", mount.display());
            return None;
        }
        let options = format!("none,name={NAME},favordynmods");
        let flags = nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV | nix::mount::MsFlags::MS_NOEXEC;
        match nix::mount::mount(Some("cgroup"), &mount, Some("cgroup"), flags, Some(options.as_str())) {
            Ok(()) => {
                tracing::info!(mount = %mount.display(), "cgroup joins in favordynmods mode (fast kernel starts)");
                Some(FavorDynmods { mount })
            }
            Err(e) => {
                // EINVAL: a kernel before 6.0, or one without the v1 option.
                tracing::info!("no favordynmods cgroup mount ({e}): kernel starts on a quiet node wait longer");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.mount
    }
}

/// Whether `/proc/self/mountinfo` text shows a cgroup hierarchy mounted with `favordynmods`
/// at `mount`.
pub fn mounted_at(mountinfo: &str, mount: &Path) -> bool {
    let target = mount.to_string_lossy();
    mountinfo.lines().any(|line| {
        let Some((left, right)) = line.split_once(" - ") else { return false };
        let mut r = right.split(' ');
        r.next() == Some("cgroup")
            && r.nth(1).is_some_and(|opts| opts.split(',').any(|o| o == "favordynmods"))
            && left.split(' ').nth(4) == Some(target.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mount_in_mountinfo() {
        let info = "36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids\n\
                    90 25 0:52 / /run/berth/cgroup-dynmods-n1-ab12 rw,nosuid - cgroup cgroup rw,favordynmods,name=berth-dynmods\n";
        assert!(mounted_at(info, Path::new("/run/berth/cgroup-dynmods-n1-ab12")));
        assert!(!mounted_at(info, Path::new("/sys/fs/cgroup/pids")));
        assert!(!mounted_at(info, Path::new("/elsewhere")));
    }
}
