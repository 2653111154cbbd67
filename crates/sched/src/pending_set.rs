//! The pending jobs kept across passes, indexed the way the orderings read them, so that a
//! pass over a deep queue touches only the jobs it tries ([`crate::schedule_set`]).
//!
//! The caller keeps one [`PendingSet`] for the life of its cluster and changes it as jobs are
//! submitted, start, are cancelled or requeued (`insert`, `remove`) and as passes record their
//! blocked counts (`set_blocked_passes`). Per queue it keeps:
//!
//! - every job by (priority band, id): fifo walks it forwards, lifo each band backwards;
//! - per (band, user) and per (band, project, user), the job ids: DRF merges users' queues,
//!   fair share ranks (project, user) pairs; users and pairs are numbered once, when first
//!   seen, so the per-pass work compares numbers;
//! - by (band, expected service, id) for `qssf`, by (band, attained service) for `las`
//!   (`service.rs`: both are fixed while a job is pending), and by (submit time, id) for the
//!   wait bound (`reserve_after`: the oldest jobs first);
//! - the smallest CPU and memory request (as counts per value), which the pool needs.
//!
//! Every change costs O(log n); nothing in a pass is proportional to the depth of the queue.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use berth_model::JobId;

use crate::PendingJob;

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
    fn add(&mut self, name: K) -> u32 {
        let next = self.names.len() as u32;
        let id = *self.ids.entry(name.clone()).or_insert_with(|| {
            self.names.push(name);
            self.count.push(0);
            next
        });
        self.count[id as usize] += 1;
        id
    }

    fn drop_one(&mut self, id: u32) {
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
    /// Per (band, user number): the user's job ids in the band.
    pub by_user: BTreeMap<(Reverse<i32>, u32), BTreeSet<JobId>>,
    /// Per (band, pair number): the pair's job ids in the band.
    pub by_pair: BTreeMap<(Reverse<i32>, u32), BTreeSet<JobId>>,
    /// (band, expected service, id): `qssf`.
    pub by_service: BTreeSet<(Reverse<i32>, u64, JobId)>,
    /// Per (band, attained service): the job ids (`las`; most jobs never ran: one entry).
    pub by_attained: BTreeMap<(Reverse<i32>, u64), BTreeSet<JobId>>,
    /// (submitted_at, id): the oldest first, for the wait bound.
    pub by_submit: BTreeSet<(crate::Millis, JobId)>,
    cpus: BTreeMap<u32, usize>,
    mem: BTreeMap<u64, usize>,
}

fn count_up<K: Ord>(m: &mut BTreeMap<K, usize>, k: K) {
    *m.entry(k).or_default() += 1;
}

fn count_down<K: Ord>(m: &mut BTreeMap<K, usize>, k: K) {
    if let Some(n) = m.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            m.remove(&k);
        }
    }
}

/// Takes `id` out of the set at `key`, dropping the set once empty.
fn take_out<K: Ord>(m: &mut BTreeMap<K, BTreeSet<JobId>>, key: K, id: JobId) {
    if let Some(s) = m.get_mut(&key) {
        s.remove(&id);
        if s.is_empty() {
            m.remove(&key);
        }
    }
}

impl QueueSet {
    fn insert(&mut self, j: &PendingJob) {
        let band = Reverse(j.priority);
        self.order.insert((band, j.id));
        let u = self.users.add(j.user.clone());
        let p = self.pairs.add((j.project.clone(), j.user.clone()));
        self.by_user.entry((band, u)).or_default().insert(j.id);
        self.by_pair.entry((band, p)).or_default().insert(j.id);
        self.by_service.insert((band, crate::service::expected(j), j.id));
        self.by_attained.entry((band, j.attained)).or_default().insert(j.id);
        self.by_submit.insert((j.submitted_at, j.id));
        count_up(&mut self.cpus, j.request.whole_cpus());
        count_up(&mut self.mem, j.request.mem_bytes);
    }

    fn remove(&mut self, j: &PendingJob) {
        let band = Reverse(j.priority);
        self.order.remove(&(band, j.id));
        if let Some(u) = self.users.id(j.user.as_str()) {
            self.users.drop_one(u);
            take_out(&mut self.by_user, (band, u), j.id);
        }
        if let Some(p) = self.pairs.id(&(j.project.clone(), j.user.clone())) {
            self.pairs.drop_one(p);
            take_out(&mut self.by_pair, (band, p), j.id);
        }
        self.by_service.remove(&(band, crate::service::expected(j), j.id));
        take_out(&mut self.by_attained, (band, j.attained), j.id);
        self.by_submit.remove(&(j.submitted_at, j.id));
        count_down(&mut self.cpus, j.request.whole_cpus());
        count_down(&mut self.mem, j.request.mem_bytes);
    }

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
}

/// The pending jobs of a cluster, kept across passes (module doc).
#[derive(Debug, Clone, Default)]
pub struct PendingSet {
    jobs: BTreeMap<JobId, PendingJob>,
    pub(crate) queues: BTreeMap<Arc<str>, QueueSet>,
}

impl PendingSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a job (replacing one with the same id).
    pub fn insert(&mut self, job: PendingJob) {
        self.remove(job.id);
        self.queues.entry(job.queue.clone()).or_default().insert(&job);
        self.jobs.insert(job.id, job);
    }

    /// Takes a job out (it started, was cancelled or left the queue).
    pub fn remove(&mut self, id: JobId) -> Option<PendingJob> {
        let job = self.jobs.remove(&id)?;
        if let Some(q) = self.queues.get_mut(&*job.queue) {
            q.remove(&job);
            if q.is_empty() {
                self.queues.remove(&*job.queue);
            }
        }
        Some(job)
    }

    pub fn get(&self, id: JobId) -> Option<&PendingJob> {
        self.jobs.get(&id)
    }

    /// Records a pass's new `blocked_passes` for a job; false when it is not in the set.
    pub fn set_blocked_passes(&mut self, id: JobId, blocked_passes: u32) -> bool {
        self.jobs.get_mut(&id).map(|j| j.blocked_passes = blocked_passes).is_some()
    }

    /// Records where a job's data is cached now ([`PendingJob::data_on`]); false when it is
    /// not in the set. Placement only: the queue indexes do not depend on it.
    pub fn set_data_on(&mut self, id: JobId, data_on: Vec<(String, u64)>) -> bool {
        self.jobs.get_mut(&id).map(|j| j.data_on = data_on).is_some()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The jobs by id.
    pub fn iter(&self) -> impl Iterator<Item = &PendingJob> {
        self.jobs.values()
    }

    /// The job with this id; the set's indexes only name jobs it holds.
    pub(crate) fn job(&self, id: JobId) -> &PendingJob {
        &self.jobs[&id]
    }
}

impl FromIterator<PendingJob> for PendingSet {
    fn from_iter<I: IntoIterator<Item = PendingJob>>(iter: I) -> Self {
        let mut s = PendingSet::new();
        for j in iter {
            s.insert(j);
        }
        s
    }
}
