//! Backfill reservations kept from one pass to the next, for a caller that runs pass after
//! pass over the same sets (`berth sim`). A replay of a busy trace runs a pass after every
//! arrival and every end, and most of them leave most reservations as they were: the same
//! blocked jobs get the same start on the same nodes, each a walk over hundreds of running
//! jobs' ends (`backfill::reserve`).
//!
//! A reservation is made from the working ledgers, the job, the nodes earlier reservations of
//! the pass took, and the ends up to its start. One of the last pass is used again only when
//! it was made before anything started or was held in that pass, and the same holds in this
//! one (so both walked the caller's ledgers and no end of the pass's own starts), for the
//! same job (every field but `blocked_passes`), equally firm, with the same nodes taken, a
//! start still ahead of `now`, and when no change since can have moved it ([`holds`]):
//!
//! - the nodes where a job started or stopped since (the running set's log,
//!   [`RunningSet::log_changes`]) and those where an end moved with `now` (a job past its
//!   planned end is expected to run as long again: `running_set::expected_end`) are none of
//!   the reserved ones, and none of them can have room for the job by its start, even
//!   counting everything removed from it as free; ends only move later and a start only
//!   takes room, so such a node has no room earlier either;
//! - every other node has the same ledger and the same ends up to the start, so the walk
//!   takes the same steps there and picks the same nodes at the same end.
//!
//! In debug builds each reservation used again is also made afresh and compared; the test
//! below replays a trace both ways.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backfill::{Counts, Reservation};
use crate::ledger::NodeLedger;
use crate::node_counts::NodeCounts;
use crate::pool::Pool;
use crate::running_set::{KeptEnds, RunningSet};
use crate::{Millis, PendingJob};

/// Per queue (by name), the reservations of its last pass.
#[derive(Default)]
pub(crate) struct ReservationMemo {
    queues: BTreeMap<String, QueueMemo>,
}

impl ReservationMemo {
    pub fn queue(&mut self, name: &str) -> &mut QueueMemo {
        if !self.queues.contains_key(name) {
            self.queues.insert(name.to_string(), QueueMemo::default());
        }
        self.queues.get_mut(name).expect("inserted above")
    }

    /// How many reservations were used again, over every queue.
    #[cfg(test)]
    pub fn hits(&self) -> u64 {
        self.queues.values().map(|q| q.hits).sum()
    }
}

/// One queue's reservations: those of the last pass (to use now), and this pass's.
#[derive(Default)]
pub(crate) struct QueueMemo {
    /// The queue's nodes in the last pass, by name: node indices mean the same only while
    /// they are the same.
    nodes: Vec<Arc<str>>,
    before: Vec<Kept>,
    now: Vec<Kept>,
    hits: u64,
}

/// A reservation as made for a job at `now`.
struct Kept {
    /// The job (`blocked_passes` aside: [`same_job`]).
    job: PendingJob,
    firm: bool,
    /// The nodes earlier reservations of the pass held, sorted.
    taken: Vec<usize>,
    now: Millis,
    /// The running set's generation then.
    generation: u64,
    start: Millis,
    nodes: Vec<usize>,
    at_start: BTreeMap<usize, NodeLedger>,
    basis: crate::running_set::Basis,
    /// The walk's counts at `start`, in the pass it was made in.
    counts: Counts,
}

/// What a reservation was asked for (the part the memo compares).
pub(crate) struct Asked<'j> {
    pub job: &'j PendingJob,
    pub firm: bool,
    pub taken: Vec<usize>,
    pub now: Millis,
}

impl QueueMemo {
    /// A pass over `nodes` (the pool's, in order) begins: the last pass's reservations are
    /// looked at only if it had the same.
    pub fn begin(&mut self, nodes: &[&NodeLedger]) {
        let same = self.nodes.len() == nodes.len()
            && self.nodes.iter().zip(nodes).all(|(a, l)| Arc::ptr_eq(a, l.name_arc()) || **a == *l.name());
        if same {
            self.before = std::mem::take(&mut self.now);
        } else {
            self.before.clear();
            self.now.clear();
            self.nodes = nodes.iter().map(|l| l.name_arc().clone()).collect();
        }
    }

    /// Whether the last pass left any reservation to look at.
    pub fn any(&self) -> bool {
        !self.before.is_empty()
    }

    /// The last pass's reservation for `asked`, when it holds now (module doc); `pos`: the
    /// job's position in this pass. `kept`/`set`: this pass's ends.
    pub fn find(
        &mut self,
        asked: &Asked,
        pos: u32,
        pool: &Pool,
        kept: &KeptEnds,
        set: &RunningSet,
    ) -> Option<Reservation> {
        if self.before.is_empty() {
            return None;
        }
        let at = self.before.iter().position(|k| {
            k.firm == asked.firm && k.taken == asked.taken && k.job.id == asked.job.id && same_job(&k.job, asked.job)
        })?;
        let k = &mut self.before[at];
        if !(asked.now >= k.now && k.start > asked.now && holds(k, &asked.job.request, pool, kept, set)) {
            return None;
        }
        self.hits += 1;
        // A job is reserved once a pass: the entry is used up.
        let k = self.before.swap_remove(at);
        Some(Reservation {
            start: k.start,
            nodes: k.nodes,
            at_start: k.at_start,
            job_req: asked.job.clone(),
            firm: asked.firm,
            pos,
            basis: k.basis,
            counts: Some(k.counts),
        })
    }

    /// Keeps the reservations of a pass that changed nothing (no start, no node held for
    /// preemption), made at `now` in this order, for the next pass; their counts go with
    /// them. A reservation that queued behind others, or starts now (it would move with
    /// `now`), is not kept.
    pub fn record(&mut self, reservations: &mut [Reservation], now: Millis, generation: u64) {
        let mut taken: Vec<usize> = Vec::new();
        for r in reservations {
            if r.start > now
                && let Some(counts) = r.counts.take()
            {
                let mut t = taken.clone();
                t.sort_unstable();
                t.dedup();
                self.now.push(Kept {
                    job: r.job_req.clone(),
                    firm: r.firm,
                    taken: t,
                    now,
                    generation,
                    start: r.start,
                    nodes: r.nodes.clone(),
                    at_start: r.at_start.clone(),
                    basis: r.basis,
                    counts,
                });
            }
            taken.extend(&r.nodes);
        }
    }
}

/// Whether the kept reservation `k` (for a job asking `r` per kernel) holds in this pass,
/// which has the same ledgers but for the nodes of the jobs started or stopped since (the
/// set's log), and the same ends but for those that moved with `now`. A node where
/// anything changed must not be one `k` reserved, and must not have room for `r` by `k`'s
/// start even at best: its counts then, plus every binding removed from it since (or, if the
/// walk did not reach it, its counts now plus every binding started on it since). Ends only
/// move later (`expected_end`), a started job only takes room, so a node without room then
/// has none earlier; every other node is as it was, and the walk decides as it did.
///
/// When it holds, those best counts become the node's in `k`: still at least the room each
/// node has by the start, which is all the next pass's check needs.
fn holds(k: &mut Kept, r: &berth_model::ResourceRequest, pool: &Pool, kept: &KeptEnds, set: &RunningSet) -> bool {
    let Some(changes) = set.changes_since(k.generation) else { return false };
    // (node, binding, whether it was started) of the changes on the pool's nodes, by node.
    let mut changed: Vec<(usize, &berth_model::Binding, bool)> = Vec::new();
    for c in changes {
        for (&n, b) in c.nodes.iter().zip(&c.bindings) {
            if let Some(i) = kept.pool_index(n) {
                changed.push((i, b, c.inserted));
            }
        }
    }
    changed.sort_by_key(|c| c.0);
    let best = |i: usize, on: &[(usize, &berth_model::Binding, bool)]| -> Option<NodeCounts> {
        if k.nodes.contains(&i) {
            return None;
        }
        let (mut best, walked) = match k.counts.get(i) {
            Some(c) => (c.clone(), true),
            None => (NodeCounts::of(&pool.nodes[i]), false),
        };
        // Walked: its counts at the start, plus what was removed since (if it had not ended
        // by then). Not walked: nothing on it had ended by the start; of its jobs now, only
        // those started since may have.
        for &(_, b, started) in on {
            if started != walked {
                best.release(b);
            }
        }
        (!best.fits(r)).then_some(best)
    };
    let mut updates = Vec::new();
    for on in changed.chunk_by(|a, b| a.0 == b.0) {
        match best(on[0].0, on) {
            Some(c) => updates.push((on[0].0, c)),
            None => return false,
        }
    }
    let changed_at = |i: usize| changed.binary_search_by_key(&i, |c| c.0).is_ok();
    if kept.moved_on(set, k.now, k.start, |i| !changed_at(i) && best(i, &[]).is_none()) {
        return false;
    }
    for (i, c) in updates {
        k.counts.set(i, c);
    }
    true
}

/// Whether `kept` is `job` in every field but `blocked_passes` (which grows every pass, and
/// the walk does not read). Every field is named, so that a new one is compared too.
fn same_job(kept: &PendingJob, job: &PendingJob) -> bool {
    let PendingJob {
        id,
        priority,
        queue,
        request,
        nodes,
        numa,
        blocked_passes: _,
        user,
        project,
        submitted_at,
        time_limit_ms,
        estimate_ms,
        attained,
        image,
        kernels,
        mounts,
        folders,
        data_on,
        avoid,
        constraint,
        exclusive,
    } = kept;
    *id == job.id
        && *priority == job.priority
        && *queue == job.queue
        && *request == job.request
        && *nodes == job.nodes
        && *numa == job.numa
        && *user == job.user
        && *project == job.project
        && *submitted_at == job.submitted_at
        && *time_limit_ms == job.time_limit_ms
        && *estimate_ms == job.estimate_ms
        && *attained == job.attained
        && *image == job.image
        && *kernels == job.kernels
        && *mounts == job.mounts
        && *folders == job.folders
        && *data_on == job.data_on
        && *avoid == job.avoid
        && *constraint == job.constraint
        && *exclusive == job.exclusive
}

#[cfg(test)]
mod tests {
    use super::ReservationMemo;
    use crate::sim::{self, Cluster, Policy, SimOptions, Window};

    /// The head of the vendored Philly trace on a small cluster, replayed with reservations
    /// kept between passes and without: the same outcome for every job, and some kept ones
    /// used (in debug builds each of those is also checked against one made afresh).
    #[test]
    fn kept_reservations_replay_like_fresh_ones() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/philly.csv");
        let text = std::fs::read_to_string(&path).expect("the vendored trace");
        let mut trace = sim::parse_philly(text.as_bytes(), sim::PhillyOptions::default()).expect("parses");
        trace.select(Window { limit: Some(1200), ..Window::default() });
        let cluster = Cluster { nodes: 12, gpus_per_node: 8, cpus_per_node: 64, mem_per_node: 512 << 30 };
        let opts = SimOptions { checkpoint_interval_ms: Some(1_800_000), ..SimOptions::default() };
        for policy in [Policy::Spread, Policy::Las] {
            let setup = policy.setup(&opts);
            let replay = |memo| sim::simulate_memo(&trace, &cluster, &setup, &opts, &mut |_| {}, memo);
            let mut memo = ReservationMemo::default();
            let kept = replay(Some(&mut memo)).expect("replays");
            let fresh = replay(None).expect("replays");
            assert_eq!(kept.1, fresh.1, "{policy:?}: outcomes");
            assert_eq!(kept.0.passes, fresh.0.passes, "{policy:?}: passes");
            assert!(memo.hits() > 0, "{policy:?}: no reservation was kept");
        }
    }
}
