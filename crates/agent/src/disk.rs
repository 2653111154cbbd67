//! The agent's side of a full disk (issue 13): a kernel whose logs or work dir cannot be
//! written ends with a reason that names the full disk and where to free space, instead of
//! `exit code 1` with empty logs or a job that seems to hang.
//!
//! A process kernel writes its logs itself (the files are its stdout/stderr, so it keeps
//! running when the agent restarts); the agent sees a failed log write only as the state of
//! the disk when the kernel ends: a kernel that ends while the file system of its logs has no
//! block left for it is reported `Failed` with [`logs_lost`]. Container logs are copied by the
//! agent, which stops the container on the first failed write (`supervise`).

use std::io::ErrorKind;
use std::path::Path;

use berth_model::protocol::{KernelEvent, KernelOutcome};

/// Whether an I/O error means the file system (or the writer's quota) is full.
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded)
}

/// Under this much space left for an unprivileged writer a file system counts as full: the
/// agent's own small files (a pid file removed as the kernel ends) may have given a few
/// blocks back by the time the end is looked at.
const NEARLY_FULL: u64 = 64 << 10;

/// Whether the file system holding `path` has (next to) no space left for an unprivileged
/// writer (kernels run as other users than root, so root's reserved blocks do not count).
pub fn no_space_left(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path).is_ok_and(|s| s.blocks_available().saturating_mul(s.fragment_size()) < NEARLY_FULL)
}

/// An I/O error as lowercase text without the `(os error N)` suffix.
pub fn errno_text(e: &std::io::Error) -> String {
    let s = match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    };
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

/// What the agent was doing with a file when it failed.
#[derive(Debug, Clone, Copy)]
pub enum FileOp {
    Create,
    Write,
}

/// A file the agent could not create or write for a kernel; its text is [`io_text`]'s.
#[derive(Debug, thiserror::Error)]
#[error("{}", io_text(node, *op, path, source))]
pub struct FileError {
    pub node: String,
    pub op: FileOp,
    pub path: std::path::PathBuf,
    pub source: std::io::Error,
}

impl FileError {
    pub fn new(node: &str, op: FileOp, path: &Path, source: std::io::Error) -> FileError {
        FileError { node: node.to_string(), op, path: path.to_path_buf(), source }
    }
}

/// `cannot create `path`: reason`, or, when the disk is full, a message that starts with
/// `no space left on device` and says where to free space.
pub fn io_text(node: &str, op: FileOp, path: &Path, e: &std::io::Error) -> String {
    let (cannot, doing) = match op {
        FileOp::Create => ("create", "creating"),
        FileOp::Write => ("write", "writing"),
    };
    if is_full(e) {
        format!("no space left on device on node {node} {doing} `{}`: free some space there", path.display())
    } else {
        format!("cannot {cannot} `{}`: {}", path.display(), errno_text(e))
    }
}

/// The reason of a kernel whose logs could not be written: names the node and the data dir.
pub fn logs_lost(node: &str, data_dir: &Path) -> String {
    format!("node {node}: no space left on device writing logs under {}: free some space there", data_dir.display())
}

/// A kernel's end as reported: one that exited (succeeded or failed on its own) while its
/// log dir had no space left lost output it wrote, so it is `Failed` with [`logs_lost`] (and
/// how it exited); other ends, and ends with space left, are unchanged.
pub fn check_end(node: &str, data_dir: &Path, log_dir: &Path, event: KernelEvent) -> KernelEvent {
    match event {
        KernelEvent::Finished {
            outcome: outcome @ (KernelOutcome::Succeeded | KernelOutcome::Failed),
            exit_code,
            message,
            at,
            usage,
            signal,
        } if no_space_left(log_dir) => {
            let how = match (outcome, message.is_empty()) {
                (KernelOutcome::Succeeded, _) | (_, true) => format!("exit code {}", exit_code.unwrap_or(0)),
                _ => message,
            };
            let message = format!("{} (the kernel ended: {how})", logs_lost(node, data_dir));
            KernelEvent::Finished { outcome: KernelOutcome::Failed, exit_code, message, at, usage, signal }
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_named_with_where_to_free_space() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let t = io_text("n1", FileOp::Create, Path::new("/d/kernels/1.1.0/work"), &full);
        assert_eq!(t, "no space left on device on node n1 creating `/d/kernels/1.1.0/work`: free some space there");
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(io_text("n1", FileOp::Write, Path::new("/x"), &denied), "cannot write `/x`: permission denied");
        assert!(is_full(&std::io::Error::from_raw_os_error(libc::EDQUOT)));
    }

    #[test]
    fn ends_with_space_left_are_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let end = KernelEvent::Finished {
            outcome: KernelOutcome::Succeeded,
            exit_code: Some(0),
            message: String::new(),
            at: jiff::Timestamp::now(),
            usage: None,
            signal: None,
        };
        assert_eq!(check_end("n1", dir.path(), dir.path(), end.clone()), end);
    }
}
