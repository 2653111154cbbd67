//! The pending jobs kept across passes, indexed the way the orderings read them, so that a
//! pass over a deep queue touches only the jobs it tries ([`crate::schedule_set`]).
//!
//! The caller keeps one [`PendingSet`] for the life of its cluster and changes it as jobs are
//! submitted, start, are cancelled or requeued (`insert`, `remove`) and as passes record their
//! blocked counts (`set_blocked_passes`). Per queue it keeps:
//!
//! - every job by (priority band, id): fifo walks it forwards, lifo each band backwards;
//! - the users and (project, user) pairs, numbered once, when first seen, so the per-pass work
//!   compares numbers;
//! - per ordering that keeps one (`orderings/`: DRF by user, fair share by pair, `qssf` by
//!   expected service, `las` by attained service, both fixed while a job is pending), per
//!   (band, group) the job ids, for the orderings the set indexes ([`PendingSet::indexing`]:
//!   every one unless told);
//! - by (submit time, id) for the wait bound (`reserve_after`: the oldest jobs first);
//! - the smallest CPU and memory request (as counts per value), which the pool needs.
//!
//! Every change costs O(log n); nothing in a pass is proportional to the depth of the queue.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use berth_model::JobId;

use crate::orderings::Numbers;
use crate::queue_set::QueueSet;
use crate::queue_set::{count_down, count_up, take_out};
use crate::{Ordering, PendingJob};

/// Changing a queue's set: here, where the orderings' index groups are known, so that the
/// set's own type ([`QueueSet`]) knows no ordering.
impl QueueSet {
    pub(crate) fn insert(&mut self, j: &PendingJob, indexed: &[Ordering]) {
        let band = Reverse(j.priority);
        self.order.insert((band, j.id));
        let user = self.users.add(j.user.clone());
        let pair = self.pairs.add((j.project.clone(), j.user.clone()));
        for &o in indexed {
            if let Some(g) = o.group(j, Numbers { user, pair }) {
                self.indexes[o as usize].entry((band, g)).or_default().insert(j.id);
            }
        }
        self.by_submit.insert((j.submitted_at, j.id));
        count_up(&mut self.cpus, j.request.whole_cpus());
        count_up(&mut self.mem, j.request.mem_bytes);
    }

    pub(crate) fn remove(&mut self, j: &PendingJob, indexed: &[Ordering]) {
        let band = Reverse(j.priority);
        self.order.remove(&(band, j.id));
        // Both were numbered when the job came in.
        let numbers = (self.users.id(j.user.as_str()), self.pairs.id(&(j.project.clone(), j.user.clone())));
        if let (Some(user), Some(pair)) = numbers {
            self.users.drop_one(user);
            self.pairs.drop_one(pair);
            for &o in indexed {
                if let Some(g) = o.group(j, Numbers { user, pair }) {
                    take_out(&mut self.indexes[o as usize], (band, g), j.id);
                }
            }
        }
        self.by_submit.remove(&(j.submitted_at, j.id));
        count_down(&mut self.cpus, j.request.whole_cpus());
        count_down(&mut self.mem, j.request.mem_bytes);
    }
}

/// The pending jobs of a cluster, kept across passes (module doc).
#[derive(Debug, Clone)]
pub struct PendingSet {
    jobs: BTreeMap<JobId, PendingJob>,
    pub(crate) queues: BTreeMap<Arc<str>, QueueSet>,
    /// The orderings whose indexes are kept.
    indexed: Vec<Ordering>,
}

impl Default for PendingSet {
    fn default() -> Self {
        Self::indexing(Ordering::ALL)
    }
}

impl PendingSet {
    /// A set that indexes every ordering, so that any queue configuration can walk it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set that keeps only the indexes of `orderings` (fifo and lifo need none): cheaper to
    /// change, for a caller whose queues use no other ordering (`berth sim`). A pass over a
    /// queue whose ordering is not indexed panics.
    pub fn indexing(orderings: &[Ordering]) -> Self {
        let mut indexed = orderings.to_vec();
        indexed.sort_unstable_by_key(|&o| o as usize);
        indexed.dedup();
        Self { jobs: BTreeMap::new(), queues: BTreeMap::new(), indexed }
    }

    /// Whether the set keeps `ordering`'s index.
    pub fn indexes(&self, ordering: Ordering) -> bool {
        self.indexed.contains(&ordering)
    }

    /// Adds a job (replacing one with the same id).
    pub fn insert(&mut self, job: PendingJob) {
        self.remove(job.id);
        self.queues.entry(job.queue.clone()).or_default().insert(&job, &self.indexed);
        self.jobs.insert(job.id, job);
    }

    /// Takes a job out (it started, was cancelled or left the queue).
    pub fn remove(&mut self, id: JobId) -> Option<PendingJob> {
        let job = self.jobs.remove(&id)?;
        if let Some(q) = self.queues.get_mut(&*job.queue) {
            q.remove(&job, &self.indexed);
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
