//! Big objects' files kept open, so that a GET of an object too big for the memory tier
//! ([`crate::hot`]) costs no `open`, header `pread` and `close` of its file, and, for a while,
//! no question to the kernel whether its pages are cached (issue 42: a 4 MiB GET cost about as
//! much CPU as nginx's, and those calls were what berth did that nginx's `sendfile` did not
//! need to).
//!
//! Like the memory tier it is a [`Tier`] (`tier.rs`), a copy of what the index says, never the
//! truth: [`crate::Store`] drops an object's file under its lock in the same step as the index
//! changes, and a GET that opened a file may only add it if nothing was dropped since its
//! lookup. So a kept file always holds the object the index holds now, and a replaced or
//! deleted object's file is closed as soon as the last GET sending from it ends, which frees
//! its disk space (an unlinked file's blocks stay while a descriptor holds them). Bounded by a
//! number of files, SIEVE-evicted.

use std::fs::File;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::tier::{Tier, Weight};

/// Files kept at most (fewer under a low descriptor limit: [`default_limit`]).
pub const MAX_FILES: usize = 256;

/// How long an object found wholly in the page cache is taken to still be there: its sends
/// skip the question meanwhile. The kernel may drop a page sooner under memory pressure; a
/// `sendfile` then reads it from disk on the worker, one short stall, never a wrong byte.
const RESIDENT_FOR_MS: u64 = 1000;

/// An object's file, open, its header checked: the data of the version the index holds.
#[derive(Debug)]
pub struct OpenFile {
    pub file: File,
    /// Where the data starts (after the header).
    pub data_offset: u64,
    pub etag: u64,
    pub size: u64,
    /// Milliseconds since [`epoch_start`] + 1 when every page of the data was last found in the
    /// page cache (0: never).
    resident_at: AtomicU64,
}

fn epoch_start() -> Instant {
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch_start().elapsed().as_millis() as u64 + 1
}

impl OpenFile {
    pub fn new(file: File, data_offset: u64, etag: u64, size: u64) -> OpenFile {
        OpenFile { file, data_offset, etag, size, resident_at: AtomicU64::new(0) }
    }

    /// Whether all of the data was found in the page cache moments ago.
    pub fn recently_resident(&self) -> bool {
        self.resident_at_time(now_ms())
    }

    fn resident_at_time(&self, now: u64) -> bool {
        let at = self.resident_at.load(Ordering::Relaxed);
        at != 0 && now.saturating_sub(at) < RESIDENT_FOR_MS
    }

    /// Notes that every page of the data was just found in the page cache.
    pub fn found_resident(&self) {
        self.resident_at.store(now_ms(), Ordering::Relaxed);
    }
}

impl Weight for Arc<OpenFile> {
    /// The tier is bounded by a number of files (descriptors), not their size.
    fn weight(&self) -> u64 {
        1
    }
}

/// The open-file tier of one store (kept under the store's lock): a [`Tier`] bounded by a
/// number of files.
#[derive(Debug)]
pub struct Files(Tier<Arc<OpenFile>>);

/// Files a store keeps: an eighth of the process's soft descriptor limit, at most
/// [`MAX_FILES`], so that connections never run short of descriptors because of this tier.
pub fn default_limit() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |l| l.0);
    (soft / 8).min(MAX_FILES as u64) as usize
}

impl Files {
    /// A tier of at most `limit` files (0: keeps none).
    pub fn new(limit: usize) -> Files {
        Files(Tier::new(limit as u64))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counter a lookup takes before opening a file, to hand back to [`Files::fill`].
    pub fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    /// The open file of object `id` if kept (marked as used for eviction).
    pub fn get(&mut self, id: u128) -> Option<Arc<OpenFile>> {
        self.0.get(id)
    }

    /// Forgets `id` (its object was replaced, deleted or evicted); every call moves the epoch,
    /// whether or not `id` was kept, so that a fill racing with the change is refused. Returns
    /// the file, for the caller to close after it let go of the store's lock.
    pub fn invalidate(&mut self, id: u128) -> Option<Arc<OpenFile>> {
        self.0.invalidate(id)
    }

    /// Keeps `file` as object `id`'s, opened after a lookup that saw `epoch`; refused (false)
    /// when something was invalidated since, or the tier keeps no files. Returns the file it
    /// dropped to make room, if any, for the caller to close outside the lock.
    pub fn fill(&mut self, id: u128, epoch: u64, file: Arc<OpenFile>) -> (bool, Option<Arc<OpenFile>>) {
        let (kept, mut dropped) = self.0.fill(id, epoch, file);
        // One file in, at most one out (each weighs one).
        (kept, dropped.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(etag: u64) -> Arc<OpenFile> {
        Arc::new(OpenFile::new(tempfile::tempfile().unwrap(), 10, etag, 100))
    }

    #[test]
    fn keeps_a_file_until_its_object_changes() {
        let mut f = Files::new(4);
        let e = f.epoch();
        assert!(f.fill(1, e, file(7)).0);
        assert_eq!(f.get(1).map(|o| o.etag), Some(7));
        assert!(f.invalidate(1).is_some(), "handed back to be closed outside the lock");
        assert!(f.get(1).is_none(), "a replaced, deleted or evicted object's file is gone");
    }

    #[test]
    fn a_fill_that_raced_with_an_invalidation_is_refused() {
        let mut f = Files::new(4);
        let e = f.epoch();
        // a PUT of any object commits between this GET's lookup and its fill
        assert!(f.invalidate(2).is_none());
        assert!(!f.fill(1, e, file(1)).0, "the file opened may be older than the index");
        assert!(f.get(1).is_none());
        assert!(f.fill(1, f.epoch(), file(1)).0);
    }

    #[test]
    fn stays_within_its_bound() {
        let mut f = Files::new(3);
        let mut dropped = 0;
        for id in 0..10u128 {
            let (kept, old) = f.fill(id, f.epoch(), file(id as u64));
            assert!(kept);
            dropped += usize::from(old.is_some());
            assert!(f.len() <= 3);
        }
        assert_eq!(dropped, 7);
        assert!(f.get(9).is_some(), "the newest is kept");
        assert!(!Files::new(0).fill(1, 0, file(1)).0, "a zero bound keeps nothing");
    }

    #[test]
    fn residency_is_remembered_for_a_moment_only() {
        let o = file(1);
        assert!(!o.recently_resident(), "never checked");
        o.found_resident();
        assert!(o.recently_resident());
        o.resident_at.store(5, Ordering::Relaxed);
        assert!(o.resident_at_time(4 + RESIDENT_FOR_MS));
        assert!(!o.resident_at_time(5 + RESIDENT_FOR_MS), "an old finding is asked again");
    }
}
