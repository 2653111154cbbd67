//! Preemption: which running jobs to stop so that a job that cannot start now can start once
//! they release their resources.
//!
//! Candidates are running jobs of the same queue that are `preemptible`, have strictly lower
//! priority than the waiting job (so two jobs can never preempt each other: no loops), have
//! run at least the queue's `min_runtime_ms`, and are not already victims in this pass. In a
//! `las` queue, a job of the same priority whose attained service is at a strictly higher
//! level is a candidate too (Tiresias: the job that got less service goes first; levels
//! only grow while a job runs, so again no two jobs preempt each other). In a `qssf` queue,
//! a job of the same priority expected to need more than [`QSSF_MARGIN`] times the waiting
//! job's service is one (shortest expected remaining service first; the margin keeps two
//! jobs of about the same size from trading places). Neither rule stops a job that waited
//! past the queue's wait bound to start: its wait has been long enough; and in either queue
//! a job pending past the bound may stop any job of its priority that did not (Tiresias'
//! starvation guard).
//!
//! Choice, deterministic: the fewest victims first. For k = 1, 2, 3, every node is tried with
//! every k-subset of its candidates (at most 12 per node, taken in preference order: lowest
//! priority, then most recently started, then id); among the subsets that make the job fit on
//! the node, the first in that order wins on the node, and across nodes the lowest key
//! `(highest victim priority, sum of priorities, most recent earliest start, node name)`.
//! Beyond 3 victims the candidates are added in preference order until the job fits. A gang
//! takes the nodes that fit already, then the nodes with the best victim sets.
//!
//! Every result is then pruned: each victim, most valuable first, is dropped when the job still
//! fits on enough nodes without stopping it. So removing any one remaining victim leaves the
//! job without room: never more than needed.

use std::collections::BTreeSet;

use berth_model::JobId;

use crate::node_counts::NodeCounts;
use crate::pool::Pool;
use crate::service::{attained_now, level, remaining_now};

/// How many times more service a running job must be expected to need than the waiting one
/// to be stopped for it in a `qssf` queue.
pub(crate) const QSSF_MARGIN: u64 = 2;
use crate::shortfall::Shortfall;
use crate::{Millis, NodeLedger, PendingJob, Preemption, RunningJob};

/// Victims to stop for a job, and where it will go.
pub(crate) struct Plan {
    /// Sorted by id.
    pub victims: Vec<JobId>,
    /// Nodes to hold for the job for the rest of the pass.
    pub nodes: Vec<usize>,
    /// What the victims free, e.g. `2 GPUs` (the first shortfall on the first such node).
    pub frees: String,
}

const MAX_PER_NODE: usize = 12;
const MAX_EXACT: usize = 3;

type Key = (usize, i32, i64, std::cmp::Reverse<Millis>, usize);

struct Ctx<'p, 'a, 'r> {
    pool: &'p Pool<'a>,
    job: &'p PendingJob,
    cands: Vec<&'r RunningJob>,
}

impl Ctx<'_, '_, '_> {
    /// The node's ledger with these victims' bindings on it released.
    fn without(&self, i: usize, victims: &[usize]) -> NodeLedger {
        let mut l = self.pool.nodes[i].clone().into_owned();
        for &v in victims {
            for b in &self.cands[v].bindings {
                l.release(b);
            }
        }
        l
    }

    fn fits(&self, i: usize, victims: &[usize]) -> bool {
        // The counts first: a node whose totals lack room once the victims are gone cannot
        // take the job, and most victim sets tried are such (up to 299 per node, each a
        // ledger copy and a binder run otherwise).
        let counts = self.counts_fit(i, victims);
        debug_assert!(
            counts || self.without(i, victims).bind_job(self.job).is_err(),
            "counts refused a fit on node {i}"
        );
        counts && self.without(i, victims).fits_job(self.job)
    }

    /// Whether the job fits node `i`'s totals once `victims` are stopped: necessary for
    /// [`Ctx::fits`] (the counts free at least what the ledger does), and monotone in the
    /// victims, so a node that fails it with all its candidates fails it with any subset.
    fn counts_fit(&self, i: usize, victims: &[usize]) -> bool {
        let l = &self.pool.nodes[i];
        let mut c = NodeCounts::of(l);
        for &v in victims {
            for b in self.cands[v].bindings.iter().filter(|b| b.node == l.name()) {
                c.release(b);
            }
        }
        c.fits(&self.job.request)
    }

    /// Usable nodes where the job fits once `victims` are stopped.
    fn fitting(&self, victims: &[usize], now_fit: &BTreeSet<usize>) -> BTreeSet<usize> {
        let mut out = now_fit.clone();
        for &v in victims {
            for b in &self.cands[v].bindings {
                if let Some(i) = self.pool.index_of(&b.node)
                    && self.pool.eligible(i, self.job)
                    && !out.contains(&i)
                    && self.fits(i, victims)
                {
                    out.insert(i);
                }
            }
        }
        out
    }

    fn key(&self, victims: &[usize], node: usize) -> Key {
        let max = victims.iter().map(|&v| self.cands[v].priority).max().unwrap_or(i32::MIN);
        let sum = victims.iter().map(|&v| self.cands[v].priority as i64).sum();
        let earliest = victims.iter().map(|&v| self.cands[v].started_at).min().unwrap_or(0);
        (victims.len(), max, sum, std::cmp::Reverse(earliest), node)
    }

    /// The best victim set on node `i` (candidates `on`, in preference order), if any.
    fn best_on(&self, i: usize, on: &[usize], k: usize) -> Option<Vec<usize>> {
        let on = &on[..on.len().min(MAX_PER_NODE)];
        if k > on.len() {
            return None;
        }
        let mut idx: Vec<usize> = (0..k).collect();
        loop {
            let set: Vec<usize> = idx.iter().map(|&x| on[x]).collect();
            if self.fits(i, &set) {
                return Some(set);
            }
            // Next k-combination in lexicographic order.
            let mut p = k;
            while p > 0 && idx[p - 1] == on.len() - k + p - 1 {
                p -= 1;
            }
            if p == 0 {
                return None;
            }
            idx[p - 1] += 1;
            for q in p..k {
                idx[q] = idx[q - 1] + 1;
            }
        }
    }

    fn greedy_on(&self, i: usize, on: &[usize]) -> Option<Vec<usize>> {
        let mut set = Vec::new();
        for &v in on {
            set.push(v);
            if self.fits(i, &set) {
                return Some(set);
            }
        }
        None
    }
}

/// Who may be stopped for a job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'t> {
    /// The queue's policy (or the borrowed-work reclaim in a queue without preemption).
    pub policy: Preemption,
    /// Whether the queue preempts lower-priority preemptible jobs.
    pub by_priority: bool,
    /// A `las` queue's thresholds: jobs at a higher level are candidates too.
    pub las: Option<&'t [u64]>,
    /// A `qssf` queue: jobs expected to need much more service are candidates too.
    pub qssf: bool,
    /// The wait bound's cutoff: a job submitted then or before may stop any job of its
    /// priority that did not wait past the bound.
    pub aged_cutoff: Option<Millis>,
    /// The wait bound: a running job that waited this long to start is never stopped for
    /// less service.
    pub bound_ms: Option<Millis>,
    pub now: Millis,
}

/// Plans the preemption for `job`, or `None` when no allowed set of victims makes room.
pub(crate) fn plan(
    pool: &Pool,
    job: &PendingJob,
    running: &[&RunningJob],
    taken: &BTreeSet<JobId>,
    rules: Rules,
) -> Option<Plan> {
    let Rules { policy, by_priority, las, qssf, aged_cutoff, bound_ms, now } = rules;
    let wants = crate::service::expected(job);
    let job_aged = aged_cutoff.is_some_and(|c| job.submitted_at <= c);
    let waited_long = |r: &RunningJob| bound_ms.is_some_and(|b| r.started_at.saturating_sub(r.submitted_at) >= b);
    let by_service = las.is_some() || qssf;
    let outranked = |r: &RunningJob| {
        r.priority < job.priority
            || (r.priority == job.priority
                && by_service
                && !waited_long(r)
                && (job_aged
                    || las.is_some_and(|t| level(attained_now(r, now), t) > level(job.attained, t))
                    || (qssf && remaining_now(r, now) / QSSF_MARGIN > wants)))
    };
    // Lower-priority preemptible jobs (when the queue preempts), and borrowed work of other
    // projects (whatever the priorities: borrowed capacity is lent, not owned). Only jobs
    // within their quota get here (borrowers are placed in a later round and never preempt),
    // so two jobs can still never preempt each other.
    let reclaims = |r: &RunningJob| r.borrowed && r.project != job.project;
    let mut cands: Vec<&RunningJob> = running
        .iter()
        .copied()
        .filter(|r| !taken.contains(&r.id))
        .filter(|r| (by_priority && r.preemptible && outranked(r)) || reclaims(r))
        .filter(|r| reclaims(r) || now.saturating_sub(r.started_at) >= policy.min_runtime_ms)
        .collect();
    if cands.is_empty() {
        return None;
    }
    cands.sort_by_key(|r| (r.priority, std::cmp::Reverse(r.started_at), r.id));
    let ctx = Ctx { pool, job, cands };
    let want = job.nodes.max(1) as usize;
    // Candidates per usable node, in preference order.
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); pool.nodes.len()];
    for (v, r) in ctx.cands.iter().enumerate() {
        let nodes: BTreeSet<usize> = r.bindings.iter().filter_map(|b| pool.index_of(&b.node)).collect();
        for i in nodes.into_iter().filter(|&i| pool.eligible(i, job)) {
            on[i].push(v);
        }
    }
    let now_fit: BTreeSet<usize> = if want > 1 {
        (0..pool.nodes.len()).filter(|&i| pool.eligible(i, job) && ctx.fits(i, &[])).collect()
    } else {
        BTreeSet::new()
    };
    let need = want.checked_sub(now_fit.len())?;
    // Each node's best set: the fewest victims, then the key.
    let mut per_node: Vec<(Key, usize, Vec<usize>)> = Vec::new();
    for (i, on_i) in on.iter().enumerate() {
        if on_i.is_empty() || now_fit.contains(&i) || !ctx.counts_fit(i, on_i) {
            continue;
        }
        let found = (1..=MAX_EXACT).find_map(|k| ctx.best_on(i, on_i, k)).or_else(|| ctx.greedy_on(i, on_i));
        if let Some(set) = found {
            per_node.push((ctx.key(&set, i), i, set));
        }
    }
    if per_node.len() < need {
        return None;
    }
    per_node.sort();
    let mut victims: Vec<usize> = per_node[..need].iter().flat_map(|(_, _, s)| s.iter().copied()).collect();
    victims.sort_unstable();
    victims.dedup();
    // Prune, most valuable victim first (highest priority, then longest running).
    let mut by_value = victims.clone();
    by_value.sort_by_key(|&v| (std::cmp::Reverse(ctx.cands[v].priority), ctx.cands[v].started_at, v));
    for v in by_value {
        let rest: Vec<usize> = victims.iter().copied().filter(|&x| x != v).collect();
        if ctx.fitting(&rest, &now_fit).len() >= want {
            victims = rest;
        }
    }
    let fitting = ctx.fitting(&victims, &now_fit);
    if fitting.len() < want || victims.is_empty() {
        return None;
    }
    // Hold the nodes that need the victims first, then the best of those that fit already.
    let mut nodes: Vec<usize> = fitting.iter().copied().filter(|i| !now_fit.contains(i)).collect();
    let mut rest: Vec<usize> = now_fit.into_iter().collect();
    rest.sort_by_key(|&i| (crate::place::score_key(pool.scoring(), &pool.nodes[i]), i));
    nodes.extend(rest);
    nodes.truncate(want);
    let first = nodes.iter().copied().find_map(|i| pool.nodes[i].bind_job(job).err());
    let mut frees = first.unwrap_or(Shortfall::Numa { policy: job.numa }).needs(&job.request);
    if want > 1 {
        frees = format!("{frees} on {} nodes", need);
    }
    let mut ids: Vec<JobId> = victims.iter().map(|&v| ctx.cands[v].id).collect();
    ids.sort_unstable();
    Some(Plan { victims: ids, nodes, frees })
}
