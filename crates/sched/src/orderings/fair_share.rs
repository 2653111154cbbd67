//! `fair-share` (Slurm's classic formula, ranked like its Fair Tree): with `P` the projects
//! having jobs (pending or running) in the queue, a project's share is `S_p = w_p / Σ_{q∈P} w_q`
//! (`w` from `project_weights`, default 1) and its usage share `U_p = u_p / Σ_{q∈P} u_q`
//! (decayed usage from `usage_by_project`, 0 when none); its factor is `F_p = 2^(−U_p / S_p)`
//! (0 when `S_p = 0`). Within a project, each of its `n` active users has share `1/n` and usage
//! share `U_u = u_u / Σ u_v` over those users (`usage_by_user`), so `F_u = 2^(−n·U_u)`. Jobs
//! are ordered by `F_p` descending, then `F_u` descending, then job id: lower decayed usage
//! relative to the share goes first. Factors are fixed for the pass (past usage, not this
//! pass's starts).
//!
//! Indexed by (project, user) pair: the cursor ranks the pairs by their factors once per pass
//! and, within a band, walks the pairs rank by rank, merging by id the pairs whose factors are
//! equal.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Unbounded};

use berth_model::JobId;
use rustc_hash::FxHashSet;

use super::{Groups, Numbers, Policy, Running, Start, in_band, next_band};
use crate::PendingJob;
use crate::fairness::fair_share_factors;
use crate::queue_set::QueueSet;
use crate::running_set::RunQueue;

pub(crate) struct FairShareOrder;

/// Each pending pair's rank for this pass, the current band's pairs by rank, and the merge of
/// the current rank's pairs by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FairCursor {
    /// By pair number: 0 goes first; pairs with equal factors share a rank.
    rank: Vec<u32>,
    band: Option<Reverse<i32>>,
    /// The current band's (rank, pair) not yet merged, in reverse (the next at the end).
    todo: Vec<(u32, u32)>,
    /// (head id, pair) of the pairs being merged.
    heads: BTreeSet<(JobId, u32)>,
}

impl Policy for FairShareOrder {
    type Cursor = Box<FairCursor>;

    fn group(_: &PendingJob, numbers: Numbers) -> Option<u64> {
        Some(numbers.pair as u64)
    }

    fn cursor(start: &Start) -> Box<FairCursor> {
        let q = start.q;
        let active: Vec<u32> = (0..q.pairs.names.len() as u32).filter(|&p| q.pairs.count[p as usize] > 0).collect();
        let name = |p: u32| {
            let (project, user) = &q.pairs.names[p as usize];
            (project.as_str(), user.as_str())
        };
        let mut distinct: BTreeSet<(&str, &str)> = active.iter().map(|&p| name(p)).collect();
        match start.running {
            Running::List(running) => {
                // Hashed with Fx first: every running job of the queue is read.
                let hashed: FxHashSet<(&str, &str)> =
                    running.iter().map(|r| (r.project.as_str(), r.user.as_str())).collect();
                distinct.extend(hashed);
            }
            Running::Kept(kept) => distinct.extend(kept.into_iter().flat_map(RunQueue::pairs)),
        }
        let f = fair_share_factors(&distinct, start.fs);
        let factors = |p: u32| f.get(&name(p)).copied().unwrap_or((0.0, 0.0));
        let mut by_factor = active;
        let desc = |a: (f64, f64), b: (f64, f64)| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1));
        by_factor.sort_by(|&a, &b| desc(factors(a), factors(b)));
        let mut rank = vec![u32::MAX; q.pairs.names.len()];
        let mut r = 0;
        for (k, &p) in by_factor.iter().enumerate() {
            if k > 0 && desc(factors(by_factor[k - 1]), factors(p)).is_ne() {
                r += 1;
            }
            rank[p as usize] = r;
        }
        Box::new(FairCursor { rank, band: None, todo: Vec::new(), heads: BTreeSet::new() })
    }

    fn next(f: &mut Box<FairCursor>, _: &QueueSet, index: &Groups) -> Option<JobId> {
        while f.heads.is_empty() {
            if f.todo.is_empty() {
                f.band = Some(next_band(index, f.band)?);
                f.todo = in_band(index, f.band?).map(|(p, _)| (f.rank[p as usize], p as u32)).collect();
                f.todo.sort_unstable_by(|a, b| b.cmp(a));
            }
            let band = f.band?;
            let r = f.todo.last()?.0;
            while let Some(&(rp, p)) = f.todo.last()
                && rp == r
            {
                f.todo.pop();
                let head = *index[&(band, p as u64)].first().expect("empty sets are dropped");
                f.heads.insert((head, p));
            }
        }
        let (id, p) = f.heads.pop_first()?;
        let band = f.band?;
        if let Some(&next) = index[&(band, p as u64)].range((Excluded(id), Unbounded)).next() {
            f.heads.insert((next, p));
        }
        Some(id)
    }
}
