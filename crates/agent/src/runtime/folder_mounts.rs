//! Data folders in process kernels (docs/folders.md): each folder's directory on the storage
//! backend is bind-mounted at its path inside the kernel's private mount namespace (the one
//! `private_tmp` makes), read-only when the job or its share says so. Read-only is
//! the kernel's doing (a remount with `MS_RDONLY`: writes fail with EROFS), not a convention,
//! and every folder is `nosuid,nodev`, so nothing in it can raise privileges.
//!
//! The mount point is made on the node (an empty directory, root's, 0755) before the fork:
//! the namespace isolates mounts, not directories. Paths are only under `/data` or `/mnt`
//! (`FolderMount::process_target_allowed`, checked at submit), never over system files.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use berth_model::folder::FolderBind;

/// Why a job's data folders cannot be mounted into its kernel on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FolderError {
    #[error(
        "folder {name} is not on node {node}: its directory `{source_path}` is missing there; mount the manager's \
         folder storage (--folder-root) at the same path on every node"
    )]
    Missing { name: String, source_path: String, node: String },
    #[error("cannot make the mount point `{target}` of folder {name} on node {node}: {why}")]
    Target { target: String, name: String, node: String, why: String },
    #[error("path `{0}` holds a NUL byte")]
    NulByte(String),
}

/// The sources must be directories on this node: the folder storage is mounted at the same
/// path on every node (or the node is the manager's own machine).
pub(crate) fn check_sources(folders: &[FolderBind], node: &str) -> Result<(), FolderError> {
    for f in folders {
        let p = Path::new(&f.source);
        if !p.is_dir() {
            return Err(FolderError::Missing {
                name: f.name.clone(),
                source_path: f.source.clone(),
                node: node.to_string(),
            });
        }
    }
    Ok(())
}

/// Says at the agent's start that process kernels here get no data folders (an agent that is
/// not root, or may not make mount namespaces: see `private_tmp`), so that whoever
/// starts it (`berth up` as a user) reads it before a job with `--folder` fails here.
pub(crate) fn warn_cannot_mount(node: &str) {
    let head = format!("node {node} cannot mount data folders into process kernels");
    let tail = "jobs with --folder fail here unless they run in a container (--image)";
    if nix::unistd::Uid::effective().is_root() {
        // The namespace probe failed (a container without CAP_SYS_ADMIN): its warning says why.
        tracing::warn!("{head} (no private mount namespace here, see above): {tail}");
    } else {
        tracing::warn!(
            "{head} (that needs a private mount namespace, which needs the agent to run as root): {tail}; to use \
             folders, run berth as root (sudo berth up, or the agent's service)"
        );
    }
}

/// Makes the mount points that do not exist yet (root's, 0755, as `mkdir -p` would).
pub(crate) fn make_targets(folders: &[FolderBind], node: &str) -> Result<(), FolderError> {
    use std::os::unix::fs::DirBuilderExt;
    for f in folders {
        let t = Path::new(&f.target);
        if t.is_dir() {
            continue;
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(t).map_err(|e| FolderError::Target {
            target: f.target.clone(),
            name: f.name.clone(),
            node: node.to_string(),
            why: e.to_string(),
        })?;
    }
    Ok(())
}

/// One folder as the child binds it, prepared by the parent (the child may not allocate).
#[derive(Debug)]
pub(crate) struct FolderPlan {
    source: CString,
    target: CString,
    read_only: bool,
}

/// The child's plan of `folders`.
pub(crate) fn plan(folders: &[FolderBind]) -> Result<Vec<FolderPlan>, FolderError> {
    let c =
        |p: &str| CString::new(Path::new(p).as_os_str().as_bytes()).map_err(|_| FolderError::NulByte(p.to_string()));
    folders
        .iter()
        .map(|f| Ok(FolderPlan { source: c(&f.source)?, target: c(&f.target)?, read_only: f.read_only }))
        .collect()
}

/// Binds every folder (in the child, inside its new mount namespace, as root): only
/// async-signal-safe calls.
pub(crate) fn bind(folders: &[FolderPlan]) -> std::io::Result<()> {
    let check = |r: libc::c_int| if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
    for f in folders {
        // SAFETY: plain system calls on NUL-terminated strings the parent built.
        unsafe {
            check(libc::mount(
                f.source.as_ptr(),
                f.target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            // A bind mount takes its flags only from a remount of it.
            let ro = if f.read_only { libc::MS_RDONLY } else { 0 };
            check(libc::mount(
                std::ptr::null(),
                f.target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | ro,
                std::ptr::null(),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind_of(source: &str, target: &str) -> FolderBind {
        FolderBind { name: "data".into(), source: source.into(), target: target.into(), read_only: true }
    }

    #[test]
    fn a_folder_missing_on_the_node_is_named_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        assert!(check_sources(&[bind_of(d.path().to_str().unwrap(), "/data/x")], "n1").is_ok());
        let missing = d.path().join("7");
        let e = check_sources(&[bind_of(missing.to_str().unwrap(), "/data/x")], "n1").unwrap_err().to_string();
        assert!(e.contains("folder data is not on node n1") && e.contains("--folder-root"), "{e}");
    }

    #[test]
    fn plans_keep_paths_and_modes() {
        let p = plan(&[bind_of("/srv/folders/3", "/data/x")]).unwrap();
        assert_eq!(
            (p[0].source.to_str().unwrap(), p[0].target.to_str().unwrap(), p[0].read_only),
            ("/srv/folders/3", "/data/x", true)
        );
        assert!(plan(&[bind_of("/srv/\0", "/data/x")]).is_err());
    }
}
