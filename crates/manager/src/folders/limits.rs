//! Folder quotas enforced by the filesystem, so that a job writing into a folder past its
//! quota gets `EDQUOT` ("Disk quota exceeded") from the kernel, as an upload past it gets a
//! 413 from the API. berth checks uploads itself; jobs write through their own mount of the
//! folder, which only the filesystem can hold to a limit.
//!
//! - **btrfs with quotas enabled** (`btrfs quota enable ROOT`): each folder is a subvolume,
//!   its quota the subvolume's qgroup limit (`btrfs subvolume create`, `btrfs qgroup limit`,
//!   from btrfs-progs). Folders made before quotas were enabled, or on another filesystem, are
//!   plain directories and keep upload-only quotas.
//! - **Anything else** (ext4 and XFS without project quotas here, NFS): quotas hold for
//!   uploads only, and the manager says so at start and in `berth folder show`.
//!
//! The tools run without a shell, with the path as an argument of its own.

use std::path::Path;

use tokio::process::Command;

/// Why a folder's directory or filesystem quota could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("cannot run btrfs (install btrfs-progs): {0}")]
    NoBtrfs(std::io::Error),
    /// `btrfs ARGS` failed: its error output.
    #[error("btrfs {args}: {stderr}")]
    Btrfs { args: String, stderr: String },
    #[error("{0}")]
    Create(std::io::Error),
}

/// How the folder root's filesystem limits what jobs write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limits {
    /// btrfs with quotas on: folders are subvolumes with qgroup limits.
    BtrfsQgroups,
    /// Quotas hold for uploads only; why, for people.
    UploadsOnly(String),
}

impl Limits {
    /// Looks at the filesystem of `root` (which exists).
    pub async fn detect(root: &Path) -> Limits {
        let fs = match nix::sys::statfs::statfs(root) {
            Ok(s) => s.filesystem_type(),
            Err(e) => return Limits::UploadsOnly(format!("cannot look at the folder root's filesystem: {e}")),
        };
        if fs != nix::sys::statfs::BTRFS_SUPER_MAGIC {
            return Limits::UploadsOnly(
                "the folder root is not on btrfs: put it on btrfs with quotas enabled to hold jobs' writes too".into(),
            );
        }
        match run(&["qgroup", "show", "--raw"], root).await {
            Ok(_) => Limits::BtrfsQgroups,
            Err(e) => Limits::UploadsOnly(format!(
                "btrfs quotas are not usable on the folder root ({e}): run `btrfs quota enable {}` to hold jobs' writes too",
                root.display()
            )),
        }
    }

    /// Whether jobs' writes into new folders are held to their quotas.
    pub fn enforced(&self) -> bool {
        matches!(self, Limits::BtrfsQgroups)
    }

    /// Makes a new folder's directory: a subvolume where quotas are enforced.
    pub async fn make_dir(&self, dir: &Path) -> Result<(), LimitError> {
        match self {
            Limits::BtrfsQgroups => run(&["subvolume", "create"], dir).await.map(|_| ()),
            Limits::UploadsOnly(_) => std::fs::create_dir(dir).map_err(LimitError::Create),
        }
    }

    /// Sets (or, with `None`, lifts) the limit of the folder at `dir`. Returns whether the
    /// filesystem holds jobs to it: `false` for a folder that is not a subvolume.
    pub async fn set(&self, dir: &Path, quota: Option<u64>) -> Result<bool, LimitError> {
        if !self.enforced() || !is_subvolume(dir) {
            return Ok(false);
        }
        let limit = quota.map_or("none".to_string(), |q| q.to_string());
        run(&["qgroup", "limit", &limit], dir).await.map(|_| true)
    }

    /// Whether the folder at `dir` has its quota held by the filesystem.
    pub fn holds(&self, dir: &Path) -> bool {
        self.enforced() && is_subvolume(dir)
    }
}

/// A btrfs subvolume's root directory has inode number 256.
fn is_subvolume(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| m.ino() == 256)
}

/// Runs `btrfs ARGS... PATH`; its error output when it fails.
async fn run(args: &[&str], path: &Path) -> Result<String, LimitError> {
    let out = Command::new("btrfs").args(args).arg(path).output().await.map_err(LimitError::NoBtrfs)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(LimitError::Btrfs { args: args.join(" "), stderr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plain_directory_keeps_upload_only_quotas() {
        let d = tempfile::tempdir().unwrap();
        // /tmp here is not btrfs; a btrfs root is covered by the folders e2e test.
        let l = Limits::detect(d.path()).await;
        if let Limits::UploadsOnly(why) = &l {
            assert!(why.contains("btrfs"), "{why}");
            l.make_dir(&d.path().join("7")).await.unwrap();
            assert!(!l.set(&d.path().join("7"), Some(1 << 20)).await.unwrap());
            assert!(!l.holds(&d.path().join("7")));
        }
    }
}
