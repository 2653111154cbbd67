//! Where the daemons keep their data when `--data-dir` (or `BERTH_DATA_DIR`) does not say: a
//! user's `berth up` under `$XDG_DATA_HOME/berth` (`~/.local/share/berth`), root's, a system
//! service's, under `/var/lib/berth` (root's kernels run as other users, who must pass
//! through the path, and `/root` is closed to them). Never the current directory, so that
//! `berth up` finds the same cluster wherever it is started.
//!
//! The agent of `berth agent` keeps its data in `agent/` below, as `berth up`'s does, so that
//! a manager and an agent run as services on one host share one tree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::bail;

/// The data dir of root's berth (also where users' CLIs find its socket).
pub const SYSTEM_DATA_DIR: &str = "/var/lib/berth";

/// Which daemon a data dir is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `berth up` and `berth manager`: the store and the manager's files.
    Manager,
    /// `berth agent`: kernels, logs and the kernel supervisor's socket.
    Agent,
    /// `berth cache serve`: cached objects, which may be thrown away (`/var/cache/berth` for
    /// root, `$XDG_CACHE_HOME/berth/cache` for a user).
    Cache,
}

/// Where root's cache node keeps its objects.
pub const SYSTEM_CACHE_DIR: &str = "/var/cache/berth";

/// The data dir a daemon of `role` uses: `given` (`--data-dir`), else the default. A default
/// that is still empty while the old default under the current directory holds a cluster is
/// refused: starting an empty cluster there would look like lost jobs.
pub fn resolve(given: Option<PathBuf>, role: Role) -> anyhow::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d);
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let xdg = if role == Role::Cache { "XDG_CACHE_HOME" } else { "XDG_DATA_HOME" };
    let dir = default_dir(role, root, std::env::var_os(xdg), std::env::var_os("HOME"))?;
    let legacy = Path::new(match role {
        Role::Manager => "berth-data",
        Role::Agent => "berth-agent-data",
        Role::Cache => "berth-cache",
    });
    check_legacy(&dir, legacy, role)?;
    Ok(dir)
}

/// The default data dir of `role` for a user (`root` or not) with these variables (`xdg`:
/// `XDG_DATA_HOME`, or for the cache `XDG_CACHE_HOME`).
pub fn default_dir(role: Role, root: bool, xdg: Option<OsString>, home: Option<OsString>) -> anyhow::Result<PathBuf> {
    let (system, under_home, var) = match role {
        Role::Cache => (SYSTEM_CACHE_DIR, ".cache/berth", "XDG_CACHE_HOME"),
        Role::Manager | Role::Agent => (SYSTEM_DATA_DIR, ".local/share/berth", "XDG_DATA_HOME"),
    };
    let base = if root {
        PathBuf::from(system)
    } else {
        // The XDG spec says a relative XDG_* directory is invalid and must be ignored.
        match (xdg.map(PathBuf::from).filter(|p| p.is_absolute()), home) {
            (Some(x), _) => x.join("berth"),
            (None, Some(h)) if !h.is_empty() => PathBuf::from(h).join(under_home),
            _ => bail!("cannot choose a data dir: neither {var} nor HOME is set; pass --data-dir DIR"),
        }
    };
    Ok(match role {
        Role::Manager => base,
        Role::Agent => base.join("agent"),
        Role::Cache if root => base,
        Role::Cache => base.join("cache"),
    })
}

/// Refuses to start a new, empty cluster in `dir` while `legacy` (relative to the current
/// directory: where berth kept its data before) holds one.
fn check_legacy(dir: &Path, legacy: &Path, role: Role) -> anyhow::Result<()> {
    let marker = |d: &Path| match role {
        Role::Manager => d.join("berth.db"),
        Role::Agent => d.join("kernels"),
        Role::Cache => d.join("cache.key"),
    };
    if marker(legacy).exists() && !marker(dir).exists() {
        let legacy = std::path::absolute(legacy).unwrap_or_else(|_| legacy.to_path_buf());
        bail!(
            "{} holds a berth data dir from an older berth, which kept its data in the current directory; \
             the default is now {}. To go on with it, pass --data-dir {} (or move it to {}); to start a new \
             cluster, pass --data-dir {}",
            legacy.display(),
            dir.display(),
            legacy.display(),
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_get_xdg_data_and_root_the_system_dir() {
        let d = |root, xdg: Option<&str>, home: Option<&str>| {
            default_dir(Role::Manager, root, xdg.map(Into::into), home.map(Into::into))
        };
        assert_eq!(d(false, None, Some("/home/a")).unwrap(), PathBuf::from("/home/a/.local/share/berth"));
        assert_eq!(d(false, Some("/x/data"), Some("/home/a")).unwrap(), PathBuf::from("/x/data/berth"));
        assert_eq!(d(false, Some("rel"), Some("/home/a")).unwrap(), PathBuf::from("/home/a/.local/share/berth"));
        assert_eq!(d(true, Some("/x/data"), Some("/root")).unwrap(), PathBuf::from("/var/lib/berth"));
        assert!(d(false, None, None).unwrap_err().to_string().contains("--data-dir"));
        let agent = default_dir(Role::Agent, true, None, None).unwrap();
        assert_eq!(agent, PathBuf::from("/var/lib/berth/agent"), "beside its manager, as under berth up");
        let cache =
            |root, xdg: Option<&str>| default_dir(Role::Cache, root, xdg.map(Into::into), Some("/home/a".into()));
        assert_eq!(cache(true, None).unwrap(), PathBuf::from("/var/cache/berth"));
        assert_eq!(cache(false, None).unwrap(), PathBuf::from("/home/a/.cache/berth/cache"));
        assert_eq!(cache(false, Some("/x/cache")).unwrap(), PathBuf::from("/x/cache/berth/cache"));
    }

    #[test]
    fn an_old_data_dir_in_the_current_directory_is_never_silently_left_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let (legacy, new) = (tmp.path().join("berth-data"), tmp.path().join("new"));
        check_legacy(&new, &legacy, Role::Manager).unwrap();
        std::fs::create_dir_all(&legacy).unwrap();
        std::fs::write(legacy.join("berth.db"), "").unwrap();
        let e = check_legacy(&new, &legacy, Role::Manager).unwrap_err().to_string();
        assert!(e.contains(&format!("pass --data-dir {}", legacy.display())), "{e}");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("berth.db"), "").unwrap();
        check_legacy(&new, &legacy, Role::Manager).expect("the new default is in use: no question");
    }
}
