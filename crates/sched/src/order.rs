//! The order in which a pass walks a queue's pending jobs: the queue's ordering's cursor
//! (`orderings/`) over the pending set, priority bands first.
//!
//! Under a wait bound (`reserve_after`), the jobs pending since the cutoff or before come
//! first, oldest first (by submit time, then id), whatever their band; then the rest in the
//! ordering's order, without them.

use std::sync::Arc;

pub use crate::fairness::{fair_share_factor, fair_share_factors};
use crate::orderings::Running;
use crate::orderings::{Cursor, Start};
use crate::pending_set::PendingSet;
use crate::queue_set::QueueSet;
use crate::set_order::{AgedRest, UntriedRest};
use crate::{FairShare, Millis, Ordering, PendingJob};

/// A queue's pending jobs: its part of the caller's set, walked without reading the jobs the
/// walk does not reach.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub set: &'a PendingSet,
    pub name: &'a Arc<str>,
    pub q: &'a QueueSet,
}

impl Source<'_> {
    /// The smallest whole-CPU and memory request ((0, 0) when there is none), for the pool.
    pub fn floors(&self) -> (u32, u64) {
        self.q.floors()
    }
}

/// The queue's jobs in the order the pass considers them; DRF reorders as jobs start.
pub(crate) struct Order<'a> {
    source: Source<'a>,
    cursor: Cursor,
    /// Under a wait bound: where its front (the jobs submitted at the cutoff or before) stands.
    aged: Option<AgedRest>,
    /// Whether the job last returned came from the front (the ordering is not charged).
    from_front: bool,
    /// The front ran out: the set does not change during a pass, so it stays out (one range
    /// look-up per job saved).
    front_done: bool,
}

impl<'a> Order<'a> {
    /// `totals`: the queue's capacity (CPU thousandths, memory bytes, GPU thousandths);
    /// `running`: its running jobs, or the caller's running set's sums of them; `aged_cutoff`:
    /// the wait bound's cutoff, if the queue has one.
    pub fn new(
        ordering: Ordering,
        las_thresholds: &[u64],
        source: Source<'a>,
        running: Running,
        fs: &FairShare,
        totals: [u64; 3],
        aged_cutoff: Option<Millis>,
    ) -> Self {
        let cursor = ordering.cursor(&Start { q: source.q, running, fs, totals, las_thresholds });
        let aged = aged_cutoff.map(|cutoff| AgedRest { cutoff, last: None });
        Order { source, cursor, aged, from_front: false, front_done: false }
    }

    pub fn next(&mut self) -> Option<&'a PendingJob> {
        let Source { set, q, .. } = self.source;
        let Some(aged) = &mut self.aged else {
            return self.cursor.next(q).map(|id| set.job(id));
        };
        let front = (!self.front_done).then(|| aged.front(q).next()).flatten().map(|id| {
            let j = set.job(id);
            aged.last = Some((j.submitted_at, id));
            j
        });
        self.from_front = front.is_some();
        if front.is_some() {
            return front;
        }
        self.front_done = true;
        let cutoff = aged.cutoff;
        std::iter::from_fn(|| self.cursor.next(q)).map(|id| set.job(id)).find(|j| j.submitted_at > cutoff)
    }

    /// A cursor that stands for the jobs not yet returned (none is started: DRF's shares
    /// stay).
    pub fn rest(&self) -> UntriedRest {
        UntriedRest { queue: Arc::clone(self.source.name), cursor: self.cursor.clone(), aged: self.aged }
    }

    /// The job last returned by `next` started: DRF charges it to its user.
    pub fn started(&mut self, job: &PendingJob) {
        if !self.from_front {
            self.cursor.started(&job.request, job.kernel_count() as u64);
        }
    }
}
