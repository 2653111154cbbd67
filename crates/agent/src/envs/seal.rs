//! Sealing a built environment before it enters the cache: its description, then every file
//! root-owned (when the agent is root) and read-only, so its builder cannot change what later
//! users' kernels run (docs/environments.md).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::{META_DIR, META_FILE, Meta, USED_FILE, record};

/// Makes the built environment the cache's: its description and last use, then every file
/// root-owned (when the agent is root) and read-only: 0755 directories and executables, 0644
/// other files; sockets and fifos a build left are removed.
pub(super) fn seal(env: &Path, mut meta: Meta) -> std::io::Result<()> {
    let dir = env.join(META_DIR);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(USED_FILE), b"")?;
    std::fs::write(dir.join(META_FILE), b"{}")?;
    let root = nix::unistd::Uid::effective().is_root();
    meta.installed = record::installed(env);
    meta.size_bytes = seal_tree(env, root)?;
    std::fs::write(dir.join(META_FILE), serde_json::to_vec(&meta).map_err(std::io::Error::other)?)?;
    Ok(())
}

fn seal_tree(dir: &Path, root: bool) -> std::io::Result<u64> {
    let mut size = 0;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let m = std::fs::symlink_metadata(&path)?;
        let ft = m.file_type();
        if ft.is_symlink() {
            if root {
                std::os::unix::fs::lchown(&path, Some(0), Some(0))?;
            }
            continue;
        }
        if ft.is_dir() {
            size += seal_tree(&path, root)?;
        } else if ft.is_file() {
            if m.nlink() > 1 {
                // A fresh inode: the other link may be the builder's.
                let copy = path.with_extension("berth-copy");
                std::fs::copy(&path, &copy)?;
                std::fs::rename(&copy, &path)?;
            }
            size += m.len();
        } else {
            std::fs::remove_file(&path)?;
            continue;
        }
        let mode = if ft.is_dir() || m.mode() & 0o111 != 0 { 0o755 } else { 0o644 };
        if root {
            std::os::unix::fs::chown(&path, Some(0), Some(0))?;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    if root {
        std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_makes_everything_read_only_and_counts_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("env");
        std::fs::create_dir_all(env.join("bin")).unwrap();
        std::fs::write(env.join("bin/tool"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(env.join("bin/tool"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(env.join(".lock"), b"").unwrap();
        std::fs::set_permissions(env.join(".lock"), std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::write(env.join("data"), b"12345").unwrap();
        std::fs::hard_link(env.join("data"), dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", env.join("bin/python")).unwrap();
        let meta = Meta {
            python: "3.11".into(),
            kind: berth_model::EnvKind::Requirements,
            size_bytes: 0,
            inputs: None,
            private: None,
            installed: vec![],
        };
        seal(&env, meta).unwrap();
        let mode = |p: &str| std::fs::symlink_metadata(env.join(p)).unwrap().mode() & 0o7777;
        assert_eq!((mode("bin"), mode("bin/tool"), mode(".lock"), mode("data")), (0o755, 0o755, 0o644, 0o644));
        assert_eq!(std::fs::metadata(env.join("data")).unwrap().nlink(), 1, "hard link broken");
        let (meta, _) = super::super::read_meta(&env).unwrap();
        assert!(meta.size_bytes >= 15, "{}", meta.size_bytes);
    }
}
