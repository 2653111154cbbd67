//! Whether agents can still reach the supervisor: the socket file it listens on
//! (`<data dir>/supervisor.sock`) must still be there, the same file. Once the data dir is
//! removed (or moved away, or replaced by another dir) no agent will ever connect again, so
//! nobody could take its kernels over or stop them: a `berth up` stopped with Ctrl-C leaves
//! its jobs running by design and passes no lease (its manager is down too), and its kernels
//! ran on for good after its data dir was deleted (issue 41). The supervisor looks while no
//! agent is connected and then stops them itself.
//!
//! The file is compared by device and inode, taken when the supervisor starts: a new agent on
//! a new dir at the same path binds a new socket there, with its own supervisor.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The socket file the supervisor was started on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Home {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Home {
    /// The file at `path` now; `None` (nothing is watched) when the path is relative (the
    /// supervisor runs in `/`, where it would name another file) or cannot be read.
    pub(super) fn of(path: &Path) -> Option<Home> {
        if !path.is_absolute() {
            return None;
        }
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Home { path: path.to_path_buf(), dev: m.dev(), ino: m.ino() })
    }

    /// Why no agent can reach the supervisor any more, if that is so. A file that cannot be
    /// looked at for another reason (permissions, I/O) counts as still there: stopping jobs
    /// needs certainty.
    pub(super) fn lost(&self) -> Option<String> {
        let p = self.path.display();
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (self.dev, self.ino) => None,
            Ok(_) => Some(format!("its socket `{p}` is another file now (the data dir was replaced)")),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                Some(format!("its socket `{p}` is gone (the data dir was removed or moved)"))
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_or_replaced_socket_is_lost_and_a_relative_path_is_not_watched() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let sock = data.join("supervisor.sock");
        std::fs::write(&sock, "").unwrap();
        let home = Home::of(&sock).unwrap();
        assert_eq!(home.lost(), None);
        // Another dir in its place, with a file of the same name.
        std::fs::rename(&data, d.path().join("old")).unwrap();
        let why = home.lost().unwrap();
        assert!(why.contains("is gone"), "{why}");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(&sock, "").unwrap();
        let why = home.lost().unwrap();
        assert!(why.contains("another file"), "{why}");
        std::fs::remove_dir_all(&data).unwrap();
        std::fs::write(&data, "").unwrap();
        assert!(home.lost().is_some(), "a file where the data dir was");
        assert_eq!(Home::of(Path::new("data/supervisor.sock")), None);
    }
}
