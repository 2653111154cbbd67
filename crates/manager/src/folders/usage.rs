//! What each folder holds: walked on demand (in a blocking task) and kept for a few seconds,
//! so that a burst of uploads does not walk a big folder once per file; uploads add what they
//! wrote in the meantime. Jobs write to folders too, which is why the figure ages out.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a walked figure is trusted.
const FRESH: Duration = Duration::from_secs(10);

/// Bytes and files in a folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
}

#[derive(Default)]
pub(super) struct UsageCache {
    known: Mutex<HashMap<i64, (Instant, Usage)>>,
}

impl UsageCache {
    pub(super) async fn get(&self, id: i64, dir: &Path) -> std::io::Result<Usage> {
        if let Some((at, u)) = self.known.lock().expect("usage lock").get(&id)
            && at.elapsed() < FRESH
        {
            return Ok(*u);
        }
        let dir = dir.to_path_buf();
        let u = tokio::task::spawn_blocking(move || walk(&dir))
            .await
            .map_err(|e| std::io::Error::other(format!("the walk failed: {e}")))??;
        self.known.lock().expect("usage lock").insert(id, (Instant::now(), u));
        Ok(u)
    }

    pub(super) fn grew(&self, id: i64, bytes: u64, files: u64) {
        if let Some((_, u)) = self.known.lock().expect("usage lock").get_mut(&id) {
            u.bytes = u.bytes.saturating_add(bytes);
            u.files = u.files.saturating_add(files);
        }
    }

    pub(super) fn forget(&self, id: i64) {
        self.known.lock().expect("usage lock").remove(&id);
    }
}

/// Bytes (apparent sizes) and regular files under `dir`, symlinks not followed.
pub(crate) fn walk(dir: &Path) -> std::io::Result<Usage> {
    use std::os::unix::fs::MetadataExt;
    let mut u = Usage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            // A directory a job removed meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(e),
        };
        for e in entries {
            let e = e?;
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else {
                if md.is_file() {
                    u.files += 1;
                }
                // Apparent sizes, as uploads count them (a sparse file counts whole).
                u.bytes = u.bytes.saturating_add(md.size());
            }
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_counts_files_and_bytes_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/one"), vec![1u8; 10_000]).unwrap();
        std::fs::write(d.path().join("a/b/two"), vec![2u8; 20_000]).unwrap();
        std::os::unix::fs::symlink("/usr", d.path().join("link")).unwrap();
        let u = walk(d.path()).unwrap();
        assert_eq!(u.files, 2);
        assert!(u.bytes >= 30_000 && u.bytes < 40_000, "{u:?}");
    }
}
