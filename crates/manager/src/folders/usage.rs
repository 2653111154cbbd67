//! What each folder holds: walked on demand (in a blocking task) and kept for a few seconds,
//! so that a burst of uploads does not walk a big folder once per file; uploads add what they
//! wrote in the meantime. Jobs write to folders too, which is why the figure ages out, and why
//! a user who asks (`berth folder usage`, `show`) gets a walk begun after they asked, never a
//! figure from before a job that just ended. One walk per folder runs at a time, and at most a
//! few over all folders.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::walk::{Walk, WalkError};

/// How long a walked figure is trusted.
const FRESH: Duration = Duration::from_secs(10);

/// Bytes and files in a folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
}

/// Walks at once, over all folders (each takes a blocking thread; a user with many folders
/// asking for all their uses at once must not take the pool).
const WALKS: usize = 16;

pub(super) struct UsageCache {
    known: Mutex<HashMap<i64, (Instant, Usage)>>,
    /// One walk per folder at a time: a burst of requests waits for it and takes its figure.
    walking: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    walks: Arc<tokio::sync::Semaphore>,
}

impl Default for UsageCache {
    fn default() -> UsageCache {
        UsageCache {
            known: Default::default(),
            walking: Default::default(),
            walks: Arc::new(tokio::sync::Semaphore::new(WALKS)),
        }
    }
}

/// Why a folder could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("directories in it were moved while berth measured it: try again")]
    Moved,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl UsageCache {
    /// The known figure if its walk began at `since` or later, or (no `since`) within
    /// [`FRESH`].
    fn fresh(&self, id: i64, since: Option<Instant>) -> Option<Usage> {
        let known = self.known.lock().expect("usage lock");
        let (at, u) = known.get(&id)?;
        let ok = match since {
            Some(t) => *at >= t,
            None => at.elapsed() < FRESH,
        };
        ok.then_some(*u)
    }

    /// What folder `id` (at `dir`) holds: a figure from the last few seconds, or with `since`
    /// one whose walk began at that instant or later.
    pub(super) async fn get(&self, id: i64, dir: &Path, since: Option<Instant>) -> Result<Usage, UsageError> {
        if let Some(u) = self.fresh(id, since) {
            return Ok(u);
        }
        let one = self.walking.lock().expect("usage lock").entry(id).or_default().clone();
        let _walking = one.lock().await;
        if let Some(u) = self.fresh(id, since) {
            return Ok(u);
        }
        let _slot = self.walks.clone().acquire_owned().await.expect("never closed");
        let dir = dir.to_path_buf();
        // Stamped with its start: what was written before it began is counted.
        let began = Instant::now();
        let u = tokio::task::spawn_blocking(move || walk(&dir))
            .await
            .map_err(|e| std::io::Error::other(format!("the walk failed: {e}")))??;
        self.known.lock().expect("usage lock").insert(id, (began, u));
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
        self.walking.lock().expect("usage lock").remove(&id);
    }
}

/// Bytes (apparent sizes) and regular files under `dir`, symlinks not followed, however deep
/// (see [`super::walk`]: no recursion, no long paths).
pub(crate) fn walk(dir: &Path) -> Result<Usage, UsageError> {
    let top = cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority())?;
    let mut u = Usage::default();
    let w = Walk { max_depth: usize::MAX, paths: false };
    let done = w.run(top, |e| {
        if e.md.is_file() {
            u.files += 1;
        }
        if !e.md.is_dir() {
            // Apparent sizes, as uploads count them (a sparse file counts whole).
            u.bytes = u.bytes.saturating_add(e.md.len());
        }
        Ok::<(), std::convert::Infallible>(())
    });
    match done {
        Ok(()) => Ok(u),
        Err(WalkError::Io(e)) => Err(e.into()),
        Err(WalkError::Moved(_)) => Err(UsageError::Moved),
        Err(WalkError::TooDeep(_)) => Err(std::io::Error::other("deeper than a walk can count").into()),
        Err(WalkError::Visit(never)) => match never {},
    }
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
