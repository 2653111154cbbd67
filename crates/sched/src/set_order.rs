//! What a walk over the persistent pending set leaves behind: where it stopped, as an owned
//! cursor ([`UntriedRest`]) that stands for every untried job behind it, expanded only when
//! the caller asks ([`PendingSet::rest_ids`]). The orderings themselves are in `orderings/`.

use std::ops::Bound::{Excluded, Included, Unbounded};
use std::sync::Arc;

use berth_model::{JobId, PendingReason};

use crate::PassOutput;
use crate::orderings::Cursor;
use crate::pending_set::PendingSet;
use crate::queue_set::QueueSet;

/// The untried jobs of a queue that a pass over a [`PendingSet`] did not list: those after
/// [`crate::Untried::jobs`], in the order the pass would have walked them. Expand it with
/// [`PendingSet::rest_ids`] on the set the pass read (before the set changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntriedRest {
    pub(crate) queue: Arc<str>,
    pub(crate) cursor: Cursor,
    /// Under a wait bound, the jobs pending since `cutoff` or before come first, oldest
    /// first: those after `last` (the last one the pass tried), then the cursor's others.
    pub(crate) aged: Option<AgedRest>,
}

/// Where the wait bound's front of the queue stood (`UntriedRest::aged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgedRest {
    pub cutoff: crate::Millis,
    pub last: Option<(crate::Millis, JobId)>,
}

impl AgedRest {
    /// The aged jobs of `q` after `last`, oldest first.
    pub fn front<'q>(&self, q: &'q QueueSet) -> impl Iterator<Item = JobId> + 'q {
        let from = match self.last {
            None => Unbounded,
            Some(k) => Excluded(k),
        };
        q.by_submit.range((from, Included((self.cutoff, JobId::MAX)))).map(|k| k.1)
    }
}

/// Expanding untried rests: here, beside the cursors, so that the set knows no ordering.
impl PendingSet {
    /// The ids an [`UntriedRest`] stands for, in queue order.
    pub fn rest_ids(&self, rest: &UntriedRest) -> Vec<JobId> {
        let Some(q) = self.queues.get(&*rest.queue) else { return Vec::new() };
        let mut cursor = rest.cursor.clone();
        let mut ids: Vec<JobId> = rest.aged.iter().flat_map(|a| a.front(q)).collect();
        let cutoff = rest.aged.map(|a| a.cutoff);
        ids.extend(
            std::iter::from_fn(|| cursor.next(q)).filter(|&id| cutoff.is_none_or(|c| self.job(id).submitted_at > c)),
        );
        ids
    }

    /// Every job of `out`'s untried runs (those of [`crate::schedule_set`] included), with
    /// its position and reason.
    pub fn untried_jobs<'o>(&self, out: &'o PassOutput) -> Vec<(JobId, u32, &'o PendingReason)> {
        let mut all = Vec::new();
        for run in &out.untried {
            let rest = run.rest.as_ref().map(|r| self.rest_ids(r)).unwrap_or_default();
            for (k, id) in run.jobs.iter().chain(&rest).enumerate() {
                all.push((*id, run.first_position + k as u32, &run.reason));
            }
        }
        all
    }
}
