//! The orderings of `order.rs` walked over a [`QueueSet`] (the persistent pending set)
//! instead of a sorted copy of the queue: each is a small owned cursor that finds the next
//! job with a lookup or two in the set's indexes, so a pass pays for the jobs it takes, not
//! for the depth of the queue. The cursor is owned (no borrow of the set) so that where the
//! walk stops, a clone of it stands for every untried job behind ([`crate::UntriedRest`]).
//!
//! Each gives exactly the order of its counterpart in `order.rs` (the property tests compare
//! them): fifo and lifo by (band, id); DRF picks, within a band, the user with the smallest
//! dominant share (ties by head job id) and is charged as jobs start; fair share ranks the
//! (project, user) pairs by their factors once per pass and, within a band, walks the pairs
//! rank by rank, merging by id the pairs whose factors are equal; `qssf` walks the set's
//! (band, expected service, id) index; `las` walks each band level by level, merging by id
//! the attained-service entries of the level.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included, Unbounded};

use std::sync::Arc;

use berth_model::{JobId, PendingReason, ResourceRequest};

use crate::fairness::{binding_use, charge, dominant_share, fair_share_factors};
use crate::pending_set::{Key, PendingSet, QueueSet};
use crate::running_set::RunQueue;
use crate::{FairShare, Ordering, PassOutput, RunningJob};
use rustc_hash::FxHashSet;

/// Where a walk over a queue set stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// Fifo: the last key returned.
    Fifo(Option<Key>),
    /// Lifo: the last key returned (each band walked from its highest id down).
    Lifo(Option<Key>),
    Drf(Box<DrfCursor>),
    Fair(Box<FairCursor>),
    /// Qssf: the last key returned.
    Qssf(Option<(Reverse<i32>, u64, JobId)>),
    Las(Box<LasCursor>),
}

/// The key after `last` in `keys` (the first when none), which becomes `last`.
fn step<K: Ord + Copy>(keys: &BTreeSet<K>, last: &mut Option<K>) -> Option<K> {
    let k = match *last {
        None => keys.first().copied(),
        Some(k) => keys.range((Excluded(k), Unbounded)).next().copied(),
    }?;
    *last = Some(k);
    Some(k)
}

/// The first key of the band after `band` (or of the first band).
fn next_band<V>(
    m: &std::collections::BTreeMap<(Reverse<i32>, u32), V>,
    band: Option<Reverse<i32>>,
) -> Option<Reverse<i32>> {
    match band {
        None => m.keys().next().map(|k| k.0),
        Some(b) => m.range((Excluded((b, u32::MAX)), Unbounded)).next().map(|(k, _)| k.0),
    }
}

/// The numbers with jobs in `band`, with the set of their ids there.
fn in_band<V>(
    m: &std::collections::BTreeMap<(Reverse<i32>, u32), V>,
    band: Reverse<i32>,
) -> impl Iterator<Item = (u32, &V)> {
    m.range((band, 0)..=(band, u32::MAX)).map(|(k, v)| (k.1, v))
}

impl Cursor {
    /// A cursor at the start of `q` under `ordering`. `running`: the queue's running jobs
    /// (DRF holdings, fair-share pairs), or `kept`: the caller's running set's sums of them
    /// (then `running` is not read); `totals`: the queue's capacity (DRF).
    pub fn new(
        ordering: Ordering,
        las_thresholds: &[u64],
        q: &QueueSet,
        running: Running,
        fs: &FairShare,
        totals: [u64; 3],
    ) -> Self {
        match ordering {
            Ordering::Qssf => Cursor::Qssf(None),
            Ordering::Las => Cursor::Las(Box::new(LasCursor {
                thresholds: las_thresholds.to_vec(),
                band: None,
                level: 0,
                heads: BTreeSet::new(),
            })),
            Ordering::Fifo => Cursor::Fifo(None),
            Ordering::Lifo => Cursor::Lifo(None),
            Ordering::Drf => Cursor::Drf(Box::new(DrfCursor::new(q, running, totals))),
            Ordering::FairShare => Cursor::Fair(Box::new(FairCursor::new(q, running, fs))),
        }
    }

    /// The next job's id, in queue order.
    pub fn next(&mut self, q: &QueueSet) -> Option<JobId> {
        match self {
            Cursor::Fifo(last) => step(&q.order, last).map(|k| k.1),
            Cursor::Lifo(last) => {
                let lower_in_band = last.and_then(|(b, id)| q.order.range((b, JobId::MIN)..(b, id)).next_back());
                let k = match lower_in_band {
                    Some(k) => *k,
                    None => {
                        // The highest id of the next band.
                        let after = match *last {
                            None => q.order.first(),
                            Some((b, _)) => q.order.range((Excluded((b, JobId::MAX)), Unbounded)).next(),
                        }?;
                        let b = after.0;
                        *q.order.range((Included((b, JobId::MIN)), Included((b, JobId::MAX)))).next_back()?
                    }
                };
                *last = Some(k);
                Some(k.1)
            }
            Cursor::Drf(d) => d.next(q),
            Cursor::Fair(f) => f.next(q),
            Cursor::Qssf(last) => step(&q.by_service, last).map(|k| k.2),
            Cursor::Las(l) => l.next(q),
        }
    }

    /// The job last returned started: DRF charges it to its user.
    pub fn started(&mut self, req: &ResourceRequest, times: u64) {
        if let Cursor::Drf(d) = self
            && let Some((u, _)) = d.last
        {
            d.charge(u, req, times);
        }
    }
}

/// What the fair orderings read of a queue's running jobs: the jobs, or the sums the
/// caller's running set keeps of them (the same figures, without reading every job).
#[derive(Clone, Copy)]
pub(crate) enum Running<'r, 'a> {
    List(&'r [&'a RunningJob]),
    Kept(Option<&'a RunQueue>),
}

/// DRF over the set: the current band, each user's holdings, and the users ready to pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrfCursor {
    band: Option<Reverse<i32>>,
    /// By user number (the set's): CPU thousandths, memory bytes, GPU thousandths.
    used: Vec<[u64; 3]>,
    totals: [u64; 3],
    /// (dominant share, head job id, user) of the current band's users.
    ready: BTreeSet<(u64, JobId, u32)>,
    /// The user and job `next` returned last, re-entered on the next call.
    last: Option<(u32, JobId)>,
}

impl DrfCursor {
    fn new(q: &QueueSet, running: Running, totals: [u64; 3]) -> Self {
        let mut d = DrfCursor {
            band: None,
            used: vec![[0; 3]; q.users.names.len()],
            totals,
            ready: BTreeSet::new(),
            last: None,
        };
        // Holdings of users with nothing pending change no share that is compared.
        let pending = |user: &str| q.users.id(user).filter(|&u| q.users.count[u as usize] > 0);
        match running {
            Running::List(running) => {
                for r in running {
                    let Some(u) = pending(r.user.as_str()) else { continue };
                    for b in &r.bindings {
                        d.charge(u, &binding_use(b), 1);
                    }
                }
            }
            Running::Kept(kept) => {
                for (user, held) in kept.into_iter().flat_map(RunQueue::held) {
                    let Some(u) = pending(user) else { continue };
                    let used = &mut d.used[u as usize];
                    for k in 0..3 {
                        used[k] += held[k];
                    }
                }
            }
        }
        d
    }

    fn charge(&mut self, u: u32, req: &ResourceRequest, times: u64) {
        charge(&mut self.used[u as usize], req, times);
    }

    fn share(&self, u: u32) -> u64 {
        dominant_share(&self.used[u as usize], &self.totals)
    }

    fn next(&mut self, q: &QueueSet) -> Option<JobId> {
        if let (Some((u, id)), Some(band)) = (self.last.take(), self.band)
            && let Some(&head) = q.by_user.get(&(band, u)).and_then(|s| s.range((Excluded(id), Unbounded)).next())
        {
            self.ready.insert((self.share(u), head, u));
        }
        while self.ready.is_empty() {
            self.band = Some(next_band(&q.by_user, self.band)?);
            for (u, ids) in in_band(&q.by_user, self.band?) {
                let head = *ids.first().expect("empty sets are dropped");
                self.ready.insert((self.share(u), head, u));
            }
        }
        let (_, id, u) = self.ready.pop_first()?;
        self.last = Some((u, id));
        Some(id)
    }
}

/// Fair share over the set: each pending pair's rank for this pass, the current band's pairs
/// by rank, and the merge of the current rank's pairs by id.
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

impl FairCursor {
    fn new(q: &QueueSet, running: Running, fs: &FairShare) -> Self {
        let active: Vec<u32> = (0..q.pairs.names.len() as u32).filter(|&p| q.pairs.count[p as usize] > 0).collect();
        let name = |p: u32| {
            let (project, user) = &q.pairs.names[p as usize];
            (project.as_str(), user.as_str())
        };
        let mut distinct: BTreeSet<(&str, &str)> = active.iter().map(|&p| name(p)).collect();
        match running {
            Running::List(running) => {
                // Hashed with Fx first: every running job of the queue is read.
                let hashed: FxHashSet<(&str, &str)> =
                    running.iter().map(|r| (r.project.as_str(), r.user.as_str())).collect();
                distinct.extend(hashed);
            }
            Running::Kept(kept) => distinct.extend(kept.into_iter().flat_map(RunQueue::pairs)),
        }
        let f = fair_share_factors(&distinct, fs);
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
        FairCursor { rank, band: None, todo: Vec::new(), heads: BTreeSet::new() }
    }

    fn next(&mut self, q: &QueueSet) -> Option<JobId> {
        while self.heads.is_empty() {
            if self.todo.is_empty() {
                self.band = Some(next_band(&q.by_pair, self.band)?);
                self.todo = in_band(&q.by_pair, self.band?).map(|(p, _)| (self.rank[p as usize], p)).collect();
                self.todo.sort_unstable_by(|a, b| b.cmp(a));
            }
            let band = self.band?;
            let r = self.todo.last()?.0;
            while let Some(&(rp, p)) = self.todo.last()
                && rp == r
            {
                self.todo.pop();
                let head = *q.by_pair[&(band, p)].first().expect("empty sets are dropped");
                self.heads.insert((head, p));
            }
        }
        let (id, p) = self.heads.pop_first()?;
        let band = self.band?;
        if let Some(&next) = q.by_pair[&(band, p)].range((Excluded(id), Unbounded)).next() {
            self.heads.insert((next, p));
        }
        Some(id)
    }
}

/// LAS over the set: the current band and level, and the heads of the level's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LasCursor {
    thresholds: Vec<u64>,
    band: Option<Reverse<i32>>,
    /// The level being merged (0: least service).
    level: usize,
    /// (next id, attained) of each entry of the current band and level.
    heads: BTreeSet<(JobId, u64)>,
}

impl LasCursor {
    /// Attained service from `lo` (inclusive) to `hi` (exclusive) for `level`.
    fn bounds(&self, level: usize) -> (u64, Option<u64>) {
        let lo = if level == 0 { 0 } else { self.thresholds[level - 1] };
        (lo, self.thresholds.get(level).copied())
    }

    fn enter(&mut self, q: &QueueSet) {
        let (Some(band), (lo, hi)) = (self.band, self.bounds(self.level)) else { return };
        let upper = match hi {
            Some(h) => Excluded((band, h)),
            None => Included((band, u64::MAX)),
        };
        for (&(_, a), ids) in q.by_attained.range((Included((band, lo)), upper)) {
            self.heads.insert((*ids.first().expect("empty sets are dropped"), a));
        }
    }

    fn next(&mut self, q: &QueueSet) -> Option<JobId> {
        while self.heads.is_empty() {
            if self.band.is_some() && self.level < self.thresholds.len() {
                self.level += 1;
            } else {
                let after = match self.band {
                    None => q.by_attained.keys().next(),
                    Some(b) => q.by_attained.range((Excluded((b, u64::MAX)), Unbounded)).next().map(|(k, _)| k),
                };
                self.band = Some(after?.0);
                self.level = 0;
            }
            self.enter(q);
        }
        let (id, a) = self.heads.pop_first()?;
        let band = self.band?;
        if let Some(&next) = q.by_attained[&(band, a)].range((Excluded(id), Unbounded)).next() {
            self.heads.insert((next, a));
        }
        Some(id)
    }
}

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
