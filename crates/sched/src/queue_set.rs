//! One queue's part of the pending set ([`crate::PendingSet`]): its jobs by (band, id), its
//! users and (project, user) pairs numbered once, the orderings' indexes, the wait bound's
//! (submit time, id) order and the smallest requests. Data only: the set fills it
//! (`pending_set.rs`, which knows each ordering's index group) and the orderings' cursors
//! read it (`orderings/`), so neither imports the other.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use rustc_hash::FxHashMap;

use berth_model::JobId;

/// One ordering's index in a queue's set: per (band, group), the job ids of the group.
pub(crate) type Groups = BTreeMap<(Reverse<i32>, u64), BTreeSet<JobId>>;

/// How many orderings a set can index (at least `berth_sched::Ordering`'s count, which a
/// test checks).
pub(crate) const SLOTS: usize = 8;

/// A (band, id) key: higher priority first, then lower id.
pub(crate) type Key = (Reverse<i32>, JobId);

/// Names numbered when first seen, with how many pending jobs each has now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names<K: Hash + Eq> {
    /// Hashed: each pass looks up every running job's user here (DRF).
    ids: FxHashMap<K, u32>,
    pub names: Vec<K>,
    pub count: Vec<usize>,
}

impl<K: Hash + Eq + Clone> Names<K> {
    pub(crate) fn add(&mut self, name: K) -> u32 {
        let next = self.names.len() as u32;
        let id = *self.ids.entry(name.clone()).or_insert_with(|| {
            self.names.push(name);
            self.count.push(0);
            next
        });
        self.count[id as usize] += 1;
        id
    }

    pub(crate) fn drop_one(&mut self, id: u32) {
        self.count[id as usize] -= 1;
    }

    pub fn id<Q: Hash + Eq + ?Sized>(&self, name: &Q) -> Option<u32>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.ids.get(name).copied()
    }
}

/// One queue's pending jobs, indexed for its orderings.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueueSet {
    pub order: BTreeSet<Key>,
    pub users: Names<String>,
    /// (project, user)
    pub pairs: Names<(String, String)>,
    /// Per ordering (by its place in `berth_sched::Ordering`): its index (its `Policy::group`);
    /// empty for the orderings that keep none or that the set does not index.
    pub(crate) indexes: [Groups; SLOTS],
    /// (submitted_at, id): the oldest first, for the wait bound.
    pub by_submit: BTreeSet<(crate::Millis, JobId)>,
    pub(crate) cpus: BTreeMap<u32, usize>,
    pub(crate) mem: BTreeMap<u64, usize>,
}

pub(crate) fn count_up<K: Ord>(m: &mut BTreeMap<K, usize>, k: K) {
    *m.entry(k).or_default() += 1;
}

pub(crate) fn count_down<K: Ord>(m: &mut BTreeMap<K, usize>, k: K) {
    if let Some(n) = m.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            m.remove(&k);
        }
    }
}

/// Takes `id` out of the set at `key`, dropping the set once empty.
pub(crate) fn take_out<K: Ord>(m: &mut BTreeMap<K, BTreeSet<JobId>>, key: K, id: JobId) {
    if let Some(s) = m.get_mut(&key) {
        s.remove(&id);
        if s.is_empty() {
            m.remove(&key);
        }
    }
}

impl QueueSet {
    /// The smallest whole-CPU and memory request of the queue ((0, 0) when empty), as the
    /// pool's floors.
    pub fn floors(&self) -> (u32, u64) {
        match (self.cpus.keys().next(), self.mem.keys().next()) {
            (Some(&c), Some(&m)) => (c, m),
            _ => (0, 0),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The index in `slot` (an ordering's place in `berth_sched::Ordering`; empty when the
    /// set does not keep it).
    pub fn index(&self, slot: usize) -> &Groups {
        &self.indexes[slot]
    }
}
