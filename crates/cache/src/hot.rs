//! Small objects kept in memory, so that a hot GET costs no open, read and close of its file
//! (for a 4 KiB object those three system calls were a fifth of the server's time, and for
//! 64 KiB the read's copy was another; docs/perf.md).
//!
//! A [`Tier`] bounded in bytes: a copy of what the index says is on disk, never the truth,
//! dropped under the store lock in the same step as the index changes and filled only if
//! nothing changed since the lookup (see `tier.rs`).

use bytes::Bytes;

use crate::tier::{Tier, Weight};

/// Objects larger than this are never kept (they are read from the file, or streamed).
pub const MAX_OBJECT: u64 = 256 * 1024;

/// An object's data and the metadata a response needs.
#[derive(Debug, Clone)]
pub struct HotObject {
    pub data: Bytes,
    pub etag: u64,
}

impl Weight for HotObject {
    fn weight(&self) -> u64 {
        self.data.len() as u64
    }
}

/// The memory tier of one store (kept under the store's lock).
#[derive(Debug)]
pub struct Hot {
    tier: Tier<HotObject>,
    /// GETs answered from memory, for `/metrics`.
    hits: u64,
}

impl Hot {
    /// A tier of at most `limit` bytes of object data (0: keeps nothing).
    pub fn new(limit: u64) -> Hot {
        Hot { tier: Tier::new(limit), hits: 0 }
    }

    /// Changes the bound, dropping objects until it holds.
    pub fn set_limit(&mut self, limit: u64) {
        self.tier.set_limit(limit);
    }

    pub fn used(&self) -> u64 {
        self.tier.used()
    }

    pub fn limit(&self) -> u64 {
        self.tier.limit()
    }

    /// How many lookups found their object here.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    pub fn len(&self) -> usize {
        self.tier.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tier.is_empty()
    }

    /// The counter a lookup takes before reading a file, to hand back to [`Hot::fill`].
    pub fn epoch(&self) -> u64 {
        self.tier.epoch()
    }

    /// The object if held (marked as used for eviction).
    pub fn get(&mut self, id: u128) -> Option<HotObject> {
        let found = self.tier.get(id)?;
        self.hits += 1;
        Some(found)
    }

    /// Forgets `id` (its object was replaced, deleted or evicted); every call moves the epoch,
    /// whether or not `id` was held, so that a fill racing with the change is refused.
    pub fn invalidate(&mut self, id: u128) {
        self.tier.invalidate(id);
    }

    /// Keeps `obj` as object `id`, read from a file after a lookup that saw `epoch`; refused
    /// (false) when something was invalidated since, or when it is too big to keep (over
    /// [`MAX_OBJECT`], or a quarter of the bound: one object must not empty the tier).
    pub fn fill(&mut self, id: u128, epoch: u64, obj: HotObject) -> bool {
        let size = obj.weight();
        size <= MAX_OBJECT && size <= self.tier.limit() / 4 && self.tier.fill(id, epoch, obj).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(n: usize, etag: u64) -> HotObject {
        HotObject { data: Bytes::from(vec![etag as u8; n]), etag }
    }

    #[test]
    fn holds_what_was_filled_until_invalidated() {
        let mut h = Hot::new(1 << 20);
        let e = h.epoch();
        assert!(h.fill(1, e, obj(100, 7)));
        let got = h.get(1).expect("held");
        assert_eq!((got.data.len(), got.etag), (100, 7));
        assert_eq!(h.hits(), 1, "the lookup that found it counts");
        h.invalidate(1);
        assert!(h.get(1).is_none(), "a replaced or deleted object is gone from memory");
        assert_eq!((h.used(), h.hits()), (0, 1), "a miss is not a memory hit");
    }

    #[test]
    fn a_fill_that_raced_with_an_invalidation_is_refused() {
        let mut h = Hot::new(1 << 20);
        let e = h.epoch();
        // a PUT of another object commits between this GET's lookup and its fill
        h.invalidate(2);
        assert!(!h.fill(1, e, obj(100, 1)), "the file read may be older than the index");
        assert!(h.get(1).is_none());
        assert!(h.fill(1, h.epoch(), obj(100, 1)));
    }

    #[test]
    fn stays_within_its_bound() {
        let mut h = Hot::new(10_000);
        for id in 0..100u128 {
            let e = h.epoch();
            h.fill(id, e, obj(1000, id as u64));
            assert!(h.used() <= 10_000, "{} bytes held past the bound", h.used());
        }
        assert_eq!(h.len(), 10);
        assert!(h.get(99).is_some(), "the newest is kept");
        assert!(!h.fill(1000, h.epoch(), obj(2501, 0)), "objects over a quarter of the bound are not kept");
        h.set_limit(3000);
        assert!(h.used() <= 3000 && h.len() == 3);
        h.set_limit(0);
        assert!(h.is_empty() && h.used() == 0);
        assert!(!h.fill(5, h.epoch(), obj(1, 0)), "a zero bound keeps nothing");
    }

    #[test]
    fn eviction_spares_objects_in_use() {
        let mut h = Hot::new(4000);
        for id in 0..4u128 {
            assert!(h.fill(id, h.epoch(), obj(1000, 0)));
        }
        h.get(0);
        assert!(h.fill(4, h.epoch(), obj(1000, 0)));
        assert!(h.get(0).is_some(), "a hit object survives one sweep");
        assert!(h.get(1).is_none(), "the oldest unused one went");
        assert!(h.used() <= 4000);
    }
}
