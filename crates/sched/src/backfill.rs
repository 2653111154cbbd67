//! Backfill: the first `reservations` jobs in order that cannot start now, and that could
//! start once running jobs end, each get a reservation (1: classic EASY, as in Slurm's and
//! Maui's original; more: towards conservative backfill). A later job may start now only if
//! it can delay none of them. A later reservation does not take an earlier one's nodes, unless
//! only those can take it: then it starts once the jobs reserved there are expected to end
//! (`gates.rs`).
//!
//! Ends are planned with each job's estimate (`PendingJob::estimate_ms`, a prediction never
//! above the limit), else its limit. A job past its estimate is expected to run as long again
//! (never past its limit), a job past its limit to end now (`running_set::expected_end`).
//!
//! A **firm** reservation (a job past the queue's wait bound) takes the nodes that can
//! take the job earliest (the free ones first), and admits a later job on them only if
//! its own time limit (enforced, unlike an estimate or the queue's default) ends before the
//! reserved start, or if both fit there at the reserved start: a job merely expected to end
//! before it is no exception, as the expectation may be wrong. The reserved nodes then only
//! drain, so the job's wait is bounded.
//!
//! The reservation's time comes from the running jobs' ends (`started_at + time_limit`, the
//! queue's default limit when a job has none; a job past its limit counts as ending now) and
//! the ends of the jobs started earlier in the pass (`now + limit`): their bindings are released
//! in end order (`running_set::Ends`), as counts per node (`node_counts.rs`), until enough nodes can
//! take the job (the binder checks the best-scored candidates on ledgers rebuilt for them);
//! its start is that end time and its nodes are the best-scored among those that fit then.
//! The reservation keeps what that start rests on (`running_set::Basis`): the weakest of the
//! ends released on its nodes until then (time limits, predictions, or the queue's default
//! limit for a job with neither), which the waiting job's reason states, so that a start that
//! is only the default limit never reads as a forecast.
//! A job that fits nowhere even when every running job has ended (its nodes are down or
//! held) gets no reservation, and the next blocked job may get it instead.
//!
//! A later job that can start now is allowed when either it ends before the reserved start
//! (`now + limit ≤ start`), or every one of its kernels on a reserved node leaves room for the
//! reserved kernel there at the reserved start (checked on the copy of that node at that time,
//! which then keeps the new job's binding for the next checks). Otherwise it is placed again
//! away from the reserved nodes, and waits only if that fails too.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::Binding;

use crate::node_counts::NodeCounts;
use crate::pool::Pool;
use crate::running_set::{Basis, Ends};
use crate::{Millis, PendingJob};

/// When a job started now ends: as expected (its estimate, else its limit, else the queue's
/// default) and at the latest (its own time limit, which is enforced; `Millis::MAX` without
/// one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobEnds {
    pub expected: Millis,
    pub by_limit: Millis,
}

impl JobEnds {
    /// Whether a job ending so is admitted nowhere a job ending as `other` was refused.
    pub fn no_sooner(self, other: JobEnds) -> bool {
        self.expected >= other.expected && self.by_limit >= other.by_limit
    }
}

pub(crate) struct Reservation {
    pub start: Millis,
    /// Reserved node indices in the pool, in placement order.
    pub nodes: Vec<usize>,
    /// The reserved nodes' ledgers at `start`, without the reserved job.
    at_start: BTreeMap<usize, crate::NodeLedger>,
    job_req: PendingJob,
    /// Past the wait bound (module doc).
    pub firm: bool,
    /// The reserved job's queue position (reasons name jobs by position).
    pub pos: u32,
    /// What the start rests on: the weakest of the ends released on the reserved nodes up to
    /// it, and of the reservations it queues behind.
    pub basis: Basis,
}

/// What a reservation is asked for: the job (which cannot start now), its queue position,
/// whether it is firm, and the nodes earlier reservations hold.
pub(crate) struct Ask<'j> {
    pub job: &'j PendingJob,
    pub pos: u32,
    pub firm: bool,
    pub taken: &'j BTreeSet<usize>,
    /// Nodes an earlier reservation holds until a time (its expected end, with what that
    /// rests on), which this one may share from then on: the start is then the latest of
    /// those on its nodes, and the nodes are chosen for the earliest start.
    pub queued: &'j BTreeMap<usize, (Millis, Basis)>,
}

/// The reservation asked for, or `None` when the job never fits.
/// `ends`: the running jobs' and this pass's starts' bindings, released end by end.
pub(crate) fn reserve<'b>(pool: &Pool, ask: Ask, mut ends: Ends<'b, '_>, now: Millis) -> Option<Reservation> {
    let Ask { job, pos, firm, taken, queued } = ask;
    let free_from = |i: usize| queued.get(&i).map_or(Millis::MIN, |q| q.0);
    let mut made: Option<Reservation> = None;
    let eligible = |i: usize| !taken.contains(&i) && pool.eligible(i, job);
    let want = job.nodes.max(1) as usize;
    let r = &job.request;
    // Released nodes are followed as counts; the binder runs only on the best-scored nodes
    // whose counts fit, on a ledger rebuilt for them, until enough take the job. The replay
    // of a busy trace asks this for every blocked head, with hundreds of ends to release.
    // By node index: the walk may release thousands of bindings, each looked up here.
    let mut counts = Counts { slot: vec![NONE; pool.nodes.len()], dense: Vec::new() };
    // Nodes the binder accepted (they stay acceptable: ends only free resources), and nodes
    // whose counts fit but that the binder has not seen in their current state.
    let mut fits: BTreeSet<usize> = BTreeSet::new();
    let mut maybe: BTreeSet<usize> = BTreeSet::new();
    // Firm: when each node could first take the job (ends-so-far order), to prefer the
    // earliest; nodes that can already are first of all.
    let mut since: BTreeMap<usize, Millis> = BTreeMap::new();
    // Queued behind earlier reservations, a job may fit already where they hold the nodes.
    let mut look_now = !queued.is_empty();
    if want > 1 || look_now {
        // Nodes that take a kernel already (a gang that lacks only some nodes).
        maybe.extend((0..pool.nodes.len()).filter(|&i| eligible(i) && NodeCounts::of(&pool.nodes[i]).fits(r)));
        if firm {
            since.extend(maybe.iter().map(|&i| (i, Millis::MIN)));
        }
    }
    // The ends come in order, group by group (a heap, or the caller's kept timeline): the
    // walk usually stops after a few of a deep cluster's tens of thousands of bindings, and
    // only those are looked up by node.
    let n = pool.nodes.len();
    let mut timeline =
        Timeline { pool, released: Vec::new(), first: vec![NONE; n], last: vec![NONE; n], rebuilt: BTreeMap::new() };
    let mut changed = Vec::new();
    let mut group = Vec::new();
    loop {
        // First, when queued, the nodes as they are now; then end after end.
        let end = if std::mem::take(&mut look_now) {
            now
        } else {
            let Some(end) = ends.next_group(pool, &mut group) else { break };
            if made.as_ref().is_some_and(|m| end >= m.start) {
                break;
            }
            changed.clear();
            for (i, b, basis) in group.drain(..) {
                counts.get_or_add(i, pool).release(b);
                timeline.push(i, b, basis);
                changed.push(i);
            }
            // A node released twice is checked twice: the same answer. The counts first:
            // they are at hand, the node's ledger may not be.
            for &i in &changed {
                if !fits.contains(&i) && counts.get(i).is_some_and(|c| c.fits(r)) && eligible(i) {
                    maybe.insert(i);
                    if firm {
                        since.entry(i).or_insert(end);
                    }
                }
            }
            end
        };
        if fits.len() + maybe.len() < want {
            continue;
        }
        let score = |i: usize| match counts.get(i) {
            Some(c) => c.score_key(pool.scoring()),
            None => crate::place::score_key(pool.scoring(), &pool.nodes[i]),
        };
        // Each node's score once (it is looked up in `counts`), then one sort: the keys
        // are unique, so the order is the one a stable sort by key gives.
        let first = |i: usize| if firm { since.get(&i).copied().unwrap_or(end) } else { 0 };
        let mut candidates: Vec<_> =
            fits.iter().chain(&maybe).map(|&i| ((free_from(i).max(end), first(i), score(i)), i)).collect();
        candidates.sort_unstable();
        let mut best = Vec::with_capacity(want);
        for (_, i) in candidates {
            if !fits.contains(&i) {
                maybe.remove(&i);
                let l = timeline.ledger(i);
                debug_assert!(counts.get(i).is_none_or(|c| c.agrees_with(l)), "counts of node {i} drifted");
                if !l.fits_job(job) {
                    // Seen again only once a later end changes it.
                    continue;
                }
                fits.insert(i);
            }
            best.push(i);
            if best.len() == want {
                break;
            }
        }
        if best.len() == want {
            let start = best.iter().map(|&i| free_from(i)).max().unwrap_or(Millis::MIN).max(end).max(now);
            if made.as_ref().is_none_or(|m| start < m.start) {
                let at_start = best.iter().map(|&i| (i, timeline.ledger(i).clone())).collect();
                let basis = best
                    .iter()
                    .map(|&i| timeline.basis(i).weakest(queued.get(&i).map_or(Basis::Limits, |q| q.1)))
                    .fold(Basis::Limits, Basis::weakest);
                made = Some(Reservation { start, nodes: best, at_start, job_req: job.clone(), firm, pos, basis });
            }
            if queued.is_empty() {
                break;
            }
        }
    }
    made
}

/// The ledgers of nodes at the time `reserve` has reached, rebuilt on demand from the pass's
/// ledger and the bindings released on them so far.
struct Timeline<'p, 'a, 'h> {
    pool: &'p Pool<'a>,
    /// Every binding released so far, with the entry of the next one released on the same
    /// node: a list per node threaded through one vector, as the walk may touch thousands of
    /// nodes and allocates nothing per node.
    released: Vec<(&'h Binding, u32, Basis)>,
    /// Per node (by index), the first and last entries of its list ([`NONE`]: empty).
    first: Vec<u32>,
    last: Vec<u32>,
    /// Per node, its rebuilt ledger and the last entry of its list applied to it.
    rebuilt: BTreeMap<usize, (crate::NodeLedger, u32)>,
}

/// No entry.
const NONE: u32 = u32::MAX;

/// The counts of the nodes the walk released something on: a slot per node of the pool,
/// the counts themselves packed in the order first touched.
struct Counts {
    slot: Vec<u32>,
    dense: Vec<NodeCounts>,
}

impl Counts {
    fn get(&self, i: usize) -> Option<&NodeCounts> {
        self.dense.get(self.slot[i] as usize)
    }

    fn get_or_add(&mut self, i: usize, pool: &Pool) -> &mut NodeCounts {
        if self.slot[i] == NONE {
            self.slot[i] = self.dense.len() as u32;
            self.dense.push(NodeCounts::of(&pool.nodes[i]));
        }
        &mut self.dense[self.slot[i] as usize]
    }
}

impl<'h> Timeline<'_, '_, 'h> {
    fn push(&mut self, i: usize, b: &'h Binding, basis: Basis) {
        let k = self.released.len() as u32;
        self.released.push((b, NONE, basis));
        match self.last[i] {
            NONE => self.first[i] = k,
            prev => self.released[prev as usize].1 = k,
        }
        self.last[i] = k;
    }

    /// The weakest basis of the ends released on node `i` so far (`Limits` for none).
    fn basis(&self, i: usize) -> Basis {
        let mut k = self.first[i];
        let mut basis = Basis::Limits;
        while k != NONE {
            let (_, next, b) = self.released[k as usize];
            basis = basis.weakest(b);
            k = next;
        }
        basis
    }

    fn ledger(&mut self, i: usize) -> &crate::NodeLedger {
        if self.first[i] == NONE {
            return &self.pool.nodes[i];
        }
        let (l, applied) = self.rebuilt.entry(i).or_insert_with(|| (self.pool.nodes[i].clone().into_owned(), NONE));
        let mut k = if *applied == NONE { self.first[i] } else { self.released[*applied as usize].1 };
        while k != NONE {
            l.release(self.released[k as usize].0);
            *applied = k;
            k = self.released[k as usize].1;
        }
        l
    }
}

impl Reservation {
    /// Whether a job placed now with `chosen` bindings (already committed to `pool`), ending
    /// at `end`, leaves the reserved start intact: `None` if not, else the reserved nodes'
    /// ledgers at the start with its kernels on them (each with the memory split it got in
    /// `pool`), to [`Reservation::keep`] once every reservation admits the job.
    pub fn admits(&self, pool: &Pool, chosen: &[(usize, Binding)], end: JobEnds) -> Option<Trial> {
        if end.by_limit <= self.start || (end.expected <= self.start && !self.firm) {
            return Some(Trial::default());
        }
        // Keyed by node: a job with several kernels per node has several bindings on one.
        let mut trial: BTreeMap<usize, crate::NodeLedger> = BTreeMap::new();
        for (i, b) in chosen {
            let Some(l) = trial.get(i).or_else(|| self.at_start.get(i)) else { continue };
            let mut l = l.clone();
            if l.allocate_like(b, &pool.nodes[*i]).is_err() || !l.fits_job(&self.job_req) {
                return None;
            }
            trial.insert(*i, l);
        }
        Some(Trial(trial))
    }

    /// The reserved job.
    pub fn job(&self) -> &PendingJob {
        &self.job_req
    }

    /// Records an admitted job's kernels on the reserved nodes ([`Reservation::admits`]).
    pub fn keep(&mut self, trial: Trial) {
        self.at_start.extend(trial.0);
    }

    /// `reserved to start in ~1h30m on n3, n4 (backfill; predicted from earlier runs)`: when,
    /// where, and what the start rests on, so that a start that is only a guess reads as one
    /// (`~` marks a prediction; a start by the queue's default limit says so).
    /// `default_limit`: the queue's default time limit.
    pub fn describe(&self, pool: &Pool, now: Millis, default_limit: Millis) -> String {
        let names: Vec<&str> = self.nodes.iter().map(|&i| pool.nodes[i].name()).collect();
        let when = match self.basis {
            _ if self.start <= now => "now".to_string(),
            Basis::Predicted => format!("in ~{}", duration_text(self.start - now)),
            Basis::Limits | Basis::Assumed => format!("in {}", duration_text(self.start - now)),
        };
        let firm = if self.firm { ", firm: waited past the queue's bound" } else { "" };
        let basis = match self.basis {
            Basis::Limits => "by time limits".to_string(),
            Basis::Predicted => "predicted from earlier runs".to_string(),
            Basis::Assumed => format!(
                "assumes the queue's default limit, {}, for jobs with no time limit and no earlier runs",
                duration_text(default_limit)
            ),
        };
        format!("reserved to start {when} on {} (backfill{firm}; {basis})", names.join(", "))
    }
}

/// A job's kernels on a reservation's nodes at its start, until every reservation admits it.
#[derive(Default)]
pub(crate) struct Trial(BTreeMap<usize, crate::NodeLedger>);

/// `1h30m`, `45s`, `0s`; milliseconds round up to the next second.
pub(crate) fn duration_text(ms: Millis) -> String {
    berth_model::format_duration(((ms.max(0) + 999) / 1000) as u64)
}

#[cfg(test)]
mod tests {
    use super::duration_text;

    #[test]
    fn durations() {
        assert_eq!(duration_text(0), "0s");
        assert_eq!(duration_text(1), "1s");
        assert_eq!(duration_text(3_600_000), "1h");
        assert_eq!(duration_text(5_400_000), "1h30m");
        assert_eq!(duration_text(3_661_000), "1h1m1s");
        assert_eq!(duration_text(-5), "0s");
    }
}
