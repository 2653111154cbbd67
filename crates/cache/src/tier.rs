//! A copy tier of the store: values kept per object id (an object's bytes in memory,
//! `hot.rs`; a big object's open file, `files.rs`), bounded by their total weight
//! and SIEVE-evicted (issue 43: both tiers held the same map, queue and epoch, written twice).
//!
//! A tier is a copy of what the index says, never the truth: it lives under the store's lock,
//! and the store drops an object's value in the same step as the index changes (a PUT
//! over it, a DELETE, an eviction, its bucket's deletion). A GET that read or opened the
//! object's file outside the lock may only add it if nothing was dropped since its lookup (the
//! *epoch*): otherwise what it read may already be an older version than the index's.

use std::collections::HashMap;

use crate::sieve::{Sieve, Slot};

/// What a value counts against its tier's bound (bytes, or one per file).
pub trait Weight {
    fn weight(&self) -> u64;
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    slot: Slot,
}

/// Values per object id, their total weight at most the limit.
#[derive(Debug)]
pub struct Tier<V> {
    limit: u64,
    used: u64,
    map: HashMap<u128, Entry<V>>,
    queue: Sieve<u128>,
    epoch: u64,
}

impl<V: Weight + Clone> Tier<V> {
    /// A tier of at most `limit` in weight (0: keeps nothing).
    pub fn new(limit: u64) -> Tier<V> {
        Tier { limit, used: 0, map: HashMap::new(), queue: Sieve::default(), epoch: 0 }
    }

    /// Changes the bound; returns what was dropped until it holds.
    pub fn set_limit(&mut self, limit: u64) -> Vec<V> {
        self.limit = limit;
        self.shrink()
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The counter a lookup takes before reading a file, to hand back to [`Tier::fill`].
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Object `id`'s value if kept (marked as used for eviction).
    pub fn get(&mut self, id: u128) -> Option<V> {
        let e = self.map.get(&id)?;
        self.queue.touch(e.slot);
        Some(e.value.clone())
    }

    /// Forgets `id` (its object was replaced, deleted or evicted); every call moves the epoch,
    /// whether or not `id` was kept, so that a fill racing with the change is refused. Returns
    /// the value, for the caller to drop after it let go of the store's lock.
    pub fn invalidate(&mut self, id: u128) -> Option<V> {
        self.epoch += 1;
        let e = self.map.remove(&id)?;
        self.queue.remove(e.slot);
        self.used -= e.value.weight();
        Some(e.value)
    }

    /// Keeps `value` as object `id`'s, read after a lookup that saw `epoch`; refused (false)
    /// when something was invalidated since, when `id` is kept already, when it weighs more
    /// than the whole bound, or the bound is 0. Returns what it dropped to make room, for the caller to drop
    /// outside the lock.
    pub fn fill(&mut self, id: u128, epoch: u64, value: V) -> (bool, Vec<V>) {
        let w = value.weight();
        if self.limit == 0 || epoch != self.epoch || w > self.limit || self.map.contains_key(&id) {
            return (false, Vec::new());
        }
        let slot = self.queue.insert(id);
        self.used += w;
        self.map.insert(id, Entry { value, slot });
        (true, self.shrink())
    }

    /// Evicts until the bound holds.
    fn shrink(&mut self) -> Vec<V> {
        let mut dropped = Vec::new();
        while self.used > self.limit {
            let Some(id) = self.queue.evict(None) else { break };
            if let Some(e) = self.map.remove(&id) {
                self.used -= e.value.weight();
                dropped.push(e.value);
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct W(u64);

    impl Weight for W {
        fn weight(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn the_bound_is_in_weight_and_what_goes_is_handed_back() {
        let mut t = Tier::new(10);
        assert_eq!(t.fill(1, 0, W(4)), (true, vec![]));
        assert_eq!(t.fill(2, 0, W(4)), (true, vec![]));
        t.get(1);
        // 1 was used since it came in: 2 goes
        assert_eq!(t.fill(3, 0, W(4)), (true, vec![W(4)]));
        assert_eq!((t.len(), t.used()), (2, 8));
        assert!(t.get(2).is_none() && t.get(1).is_some());
        assert_eq!(t.fill(4, 0, W(11)), (false, vec![]), "heavier than the bound");
        assert_eq!(t.set_limit(4).len(), 1);
        assert_eq!(t.used(), 4);
        assert_eq!(t.set_limit(0).len(), 1);
        assert!(t.is_empty() && t.used() == 0);
        assert!(!t.fill(5, 0, W(1)).0, "a zero bound keeps nothing");
    }

    #[test]
    fn a_fill_that_raced_with_an_invalidation_is_refused() {
        let mut t = Tier::new(10);
        let e = t.epoch();
        assert_eq!(t.invalidate(2), None);
        assert!(!t.fill(1, e, W(1)).0, "the file read may be older than the index");
        assert!(t.fill(1, t.epoch(), W(1)).0);
        assert!(!t.fill(1, t.epoch(), W(1)).0, "kept already");
        assert_eq!(t.invalidate(1), Some(W(1)));
        assert_eq!(t.used(), 0);
    }
}
