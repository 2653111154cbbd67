//! `las` (Tiresias' 2D-LAS): within a band, by level of attained service (`service::level` of
//! [`PendingJob::attained`] against the queue's thresholds), then job id. Indexed by attained
//! service (most jobs never ran: one group); the cursor walks each band level by level,
//! merging by id the groups of the level.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included, Unbounded};

use berth_model::JobId;

use super::{Groups, Numbers, Policy, Start};
use crate::PendingJob;
use crate::queue_set::QueueSet;

pub(crate) struct Las;

/// The current band and level, and the heads of the level's groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LasCursor {
    thresholds: Vec<u64>,
    band: Option<Reverse<i32>>,
    /// The level being merged (0: least service).
    level: usize,
    /// (next id, attained) of each group of the current band and level.
    heads: BTreeSet<(JobId, u64)>,
}

impl Policy for Las {
    type Cursor = Box<LasCursor>;

    fn group(job: &PendingJob, _: Numbers) -> Option<u64> {
        Some(job.attained)
    }

    fn cursor(start: &Start) -> Box<LasCursor> {
        Box::new(LasCursor { thresholds: start.las_thresholds.to_vec(), band: None, level: 0, heads: BTreeSet::new() })
    }

    fn next(l: &mut Box<LasCursor>, _: &QueueSet, index: &Groups) -> Option<JobId> {
        while l.heads.is_empty() {
            if l.band.is_some() && l.level < l.thresholds.len() {
                l.level += 1;
            } else {
                let after = match l.band {
                    None => index.keys().next(),
                    Some(b) => index.range((Excluded((b, u64::MAX)), Unbounded)).next().map(|(k, _)| k),
                };
                l.band = Some(after?.0);
                l.level = 0;
            }
            l.enter(index);
        }
        let (id, a) = l.heads.pop_first()?;
        let band = l.band?;
        if let Some(&next) = index[&(band, a)].range((Excluded(id), Unbounded)).next() {
            l.heads.insert((next, a));
        }
        Some(id)
    }
}

impl LasCursor {
    /// Attained service from `lo` (inclusive) to `hi` (exclusive) for `level`.
    fn bounds(&self, level: usize) -> (u64, Option<u64>) {
        let lo = if level == 0 { 0 } else { self.thresholds[level - 1] };
        (lo, self.thresholds.get(level).copied())
    }

    fn enter(&mut self, index: &Groups) {
        let (Some(band), (lo, hi)) = (self.band, self.bounds(self.level)) else { return };
        let upper = match hi {
            Some(h) => Excluded((band, h)),
            None => Included((band, u64::MAX)),
        };
        for (&(_, a), ids) in index.range((Included((band, lo)), upper)) {
            self.heads.insert((*ids.first().expect("empty sets are dropped"), a));
        }
    }
}
