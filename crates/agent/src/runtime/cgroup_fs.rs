//! What the kernel says about cgroups, read from `/proc` and `/sys` directly: whether the
//! machine runs the unified (v2) hierarchy, where each v1 controller is mounted, and which
//! cgroup this process is in. The few limit files berth writes are plain writes
//! (`cgroup.rs`); a crate for this pulled in an old `nix` and `thiserror` for no more.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where the unified hierarchy (or the v1 controllers' tmpfs) is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether `/sys/fs/cgroup` is the unified (v2) hierarchy.
pub fn is_unified() -> bool {
    use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, statfs};
    statfs(CGROUP_ROOT).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC)
}

/// This process's cgroup per v1 controller (`cpuset` → `/a/b`), and on v2 under `""`, from
/// the text of `/proc/self/cgroup`.
pub fn own_paths(proc_self_cgroup: &str) -> HashMap<String, String> {
    let mut paths = HashMap::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if controllers.is_empty() {
            paths.insert(String::new(), path.to_string());
        }
        for c in controllers.split(',').filter(|c| !c.is_empty()) {
            paths.insert(c.to_string(), path.to_string());
        }
    }
    paths
}

/// The mount point of v1 controller `controller` in the text of `/proc/self/mountinfo`.
pub fn v1_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // `id parent major:minor root mount-point options [optional...] - fstype source super-options`
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split(' ');
        if right.next()? != "cgroup" {
            return None;
        }
        let super_options = right.nth(1)?;
        let mount_point = left.split(' ').nth(4)?;
        super_options.split(',').any(|o| o == controller).then(|| PathBuf::from(unescape(mount_point)))
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as octal escapes (`\040`).
fn unescape(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads a file of `/proc`, empty when it cannot be read.
pub fn read_proc(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroups_per_controller_and_unified() {
        let text = "12:pids:/user.slice\n4:cpuset:/\n3:memory:/docker/abc\n2:cpu,cpuacct:/x\n0::/init.scope\n";
        let p = own_paths(text);
        assert_eq!(p["pids"], "/user.slice");
        assert_eq!(p["memory"], "/docker/abc");
        assert_eq!(p["cpuacct"], "/x");
        assert_eq!(p[""], "/init.scope");
    }

    #[test]
    fn v1_controllers_are_found_in_mountinfo() {
        let text = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/my\\040memory rw shared:9 - cgroup cgroup rw,memory
";
        assert_eq!(v1_mount(text, "cpuset"), Some(PathBuf::from("/sys/fs/cgroup/cpuset")));
        assert_eq!(v1_mount(text, "cpu"), Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")));
        assert_eq!(v1_mount(text, "memory"), Some(PathBuf::from("/sys/fs/cgroup/my memory")), "escaped path");
        assert_eq!(v1_mount(text, "pids"), None);
    }

    #[test]
    fn this_machine_agrees_with_itself() {
        // Whatever the machine: a v1 machine lists controllers, a v2 one the unified line.
        let own = own_paths(&read_proc(Path::new("/proc/self/cgroup")));
        if is_unified() {
            assert!(own.contains_key(""), "{own:?}");
        } else if let Some(m) = v1_mount(&read_proc(Path::new("/proc/self/mountinfo")), "memory") {
            assert!(m.join("memory.limit_in_bytes").exists() || !own.contains_key("memory"), "{m:?}");
        }
    }
}
