//! The running jobs kept across passes, indexed the way a pass reads them, so that the pass
//! after one job ends costs the same with a few running jobs or tens of thousands
//! ([`crate::schedule_set`]).
//!
//! The caller keeps one [`RunningSet`] beside its [`crate::PendingSet`] and changes it as
//! jobs start, end, are cancelled or preempted, or change in a way the scheduler sees
//! (`insert` replaces, `remove`). Per queue it keeps:
//!
//! - the jobs by id: a pass groups running jobs by queue in id order (preemption) without
//!   sorting them;
//! - what the fair orderings read of them: the (project, user) pairs that run jobs (fair
//!   share) and what each user's jobs hold (DRF), summed as jobs start and stop, so that a
//!   pass reads a few users instead of every running job;
//! - their ends, the timeline backfill's reservation walks: jobs with an estimate or a time
//!   limit by `started_at + estimate` (the smaller), jobs without either by `started_at` (their
//!   end depends on the queue's default limit, which only the pass knows, and grows with
//!   `started_at` all the same).
//!
//! Every change costs O(log n). A pass merges the per-queue ends ([`KeptEnds`]) only as far
//! as its reservations walk them, so it reads only the ends they release, never all of them;
//! the merge, and the order of the jobs past their planned end, are made once per pass and every
//! reservation of the pass reads them ([`Ends::merge`]), not once per reservation.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, btree_map};

use berth_model::{Binding, JobId};
use rustc_hash::FxHashMap;

use crate::fairness::{binding_use, charge};
use crate::pool::Pool;
use crate::{Millis, QueueConfig, RunningJob};

/// One queue's running jobs (by the queue each job names), in a dense slab: the walk of
/// the ends reads a job per end, and a slot is an index, not a search.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunQueue {
    slab: Vec<RunningJob>,
    /// Per slot, the set's number of each binding's node (`RunningSet::node_ids`), and of
    /// the first one apart: packed, so that the walk of a single-binding job's end reads no
    /// list of its own.
    nodes: Vec<Vec<u32>>,
    first_node: Vec<u32>,
    /// Each job's slot, by id.
    by_id: BTreeMap<JobId, u32>,
    /// (started_at + time limit, id) of the jobs that have a limit, with their slots.
    limited: BTreeMap<(Millis, JobId), u32>,
    /// (started_at, id) of the jobs that have none, with their slots.
    unlimited: BTreeMap<(Millis, JobId), u32>,
    /// How many jobs are `borrowed`.
    borrowed: usize,
    /// How many jobs each (project, user) pair runs, and what each user's jobs hold (CPU
    /// thousandths, memory bytes, GPU thousandths): what the fair orderings read of the
    /// running jobs, kept here so that a pass does not read every running job for them.
    pairs: BTreeMap<(String, String), u32>,
    held: BTreeMap<String, [u64; 3]>,
}

/// How long `r` is planned to run: its estimate, capped by its limit; `None`: neither.
pub(crate) fn planned(r: &RunningJob) -> Option<Millis> {
    match (r.estimate_ms, r.time_limit_ms) {
        (Some(e), Some(l)) => Some(e.min(l)),
        (e, l) => e.or(l),
    }
}

/// When a running job is expected to end, from its planned end (`started_at` + its estimate,
/// limit or the queue's default): that, while it lies ahead; once passed, the job is expected
/// to run as long again as it has run (a run that outlived its estimate tends to run long),
/// but never past its limit, after which it counts as ending now.
pub(crate) fn expected_end(r: &RunningJob, planned_end: Millis, now: Millis) -> Millis {
    if planned_end >= now {
        return planned_end;
    }
    let again = now.saturating_add(now.saturating_sub(r.started_at).max(0));
    match r.time_limit_ms {
        Some(l) => again.min(r.started_at.saturating_add(l)).max(now),
        None => again,
    }
}

/// What an expected end rests on (a reservation's start rests on the weakest of the ends it
/// waits for: [`Basis::weakest`]), so that the waiting job's reason can say how far to trust
/// its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) enum Basis {
    /// Time limits only (enforced: the job is stopped there), or nothing to wait for.
    #[default]
    Limits,
    /// A run time predicted from earlier runs (`predict.rs`), which may be wrong either way.
    Predicted,
    /// The queue's default limit, for a job with neither a limit nor earlier runs: not
    /// enforced, and usually far longer than the job (the default is a guess).
    Assumed,
}

impl Basis {
    /// How a job that started at `started_at` is expected to end at `end`: at (or past) its
    /// limit, by the limit; before it, by its estimate when it has one, else by the default.
    pub fn of(started_at: Millis, time_limit_ms: Option<Millis>, estimate_ms: Option<Millis>, end: Millis) -> Basis {
        if time_limit_ms.is_some_and(|l| end >= started_at.saturating_add(l)) {
            Basis::Limits
        } else if estimate_ms.is_some() {
            Basis::Predicted
        } else {
            Basis::Assumed
        }
    }

    /// The ends of a running job.
    pub fn of_running(r: &RunningJob, end: Millis) -> Basis {
        Basis::of(r.started_at, r.time_limit_ms, r.estimate_ms, end)
    }

    /// The weaker of two.
    pub fn weakest(self, other: Basis) -> Basis {
        self.max(other)
    }
}

/// A job started in this pass, for backfill's timeline: its expected end, id, bindings, and
/// what that end rests on.
pub(crate) type StartedEnd = (Millis, JobId, Vec<Binding>, Basis);

/// Whether `r` has a planned run time, and its key in that end index.
fn end_key(r: &RunningJob) -> (bool, (Millis, JobId)) {
    match planned(r) {
        Some(ms) => (true, (r.started_at.saturating_add(ms), r.id)),
        None => (false, (r.started_at, r.id)),
    }
}

impl RunQueue {
    fn ends(&mut self, limited: bool) -> &mut BTreeMap<(Millis, JobId), u32> {
        if limited { &mut self.limited } else { &mut self.unlimited }
    }

    fn insert(&mut self, job: RunningJob, nodes: Vec<u32>) {
        let slot = self.slab.len() as u32;
        self.first_node.push(nodes.first().copied().unwrap_or(ELSEWHERE));
        self.nodes.push(nodes);
        self.by_id.insert(job.id, slot);
        let (limited, key) = end_key(&job);
        self.ends(limited).insert(key, slot);
        self.borrowed += job.borrowed as usize;
        *self.pairs.entry((job.project.clone(), job.user.clone())).or_default() += 1;
        let held = match self.held.get_mut(job.user.as_str()) {
            Some(h) => h,
            None => self.held.entry(job.user.clone()).or_default(),
        };
        for b in &job.bindings {
            charge(held, &binding_use(b), 1);
        }
        self.slab.push(job);
    }

    fn remove(&mut self, id: JobId) -> Option<RunningJob> {
        let slot = self.by_id.remove(&id)?;
        let job = self.slab.swap_remove(slot as usize);
        self.nodes.swap_remove(slot as usize);
        self.first_node.swap_remove(slot as usize);
        let (limited, key) = end_key(&job);
        self.ends(limited).remove(&key);
        self.borrowed -= job.borrowed as usize;
        let pair = (job.project.clone(), job.user.clone());
        if let Some(n) = self.pairs.get_mut(&pair) {
            *n -= 1;
            if *n == 0 {
                self.pairs.remove(&pair);
            }
        }
        if let Some(held) = self.held.get_mut(job.user.as_str()) {
            for b in &job.bindings {
                let used = binding_use(b);
                held[0] -= used.cpu_milli;
                held[1] -= used.mem_bytes;
                held[2] -= used.gpu_milli;
            }
        }
        // The last job took the slot: its indexes follow.
        if let Some(moved) = self.slab.get(slot as usize) {
            let (id, (limited, key)) = (moved.id, end_key(moved));
            self.by_id.insert(id, slot);
            self.ends(limited).insert(key, slot);
        }
        Some(job)
    }

    /// The jobs by id.
    pub fn jobs(&self) -> impl Iterator<Item = &RunningJob> {
        self.by_id.values().map(|&s| &self.slab[s as usize])
    }

    fn get(&self, id: JobId) -> Option<&RunningJob> {
        self.by_id.get(&id).map(|&s| &self.slab[s as usize])
    }

    /// The distinct (project, user) pairs of the running jobs.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.keys().map(|(p, u)| (p.as_str(), u.as_str()))
    }

    /// What each user's running jobs hold, summed over their bindings (DRF).
    pub fn held(&self) -> impl Iterator<Item = (&str, &[u64; 3])> {
        self.held.iter().map(|(u, h)| (u.as_str(), h))
    }

    fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }
}

/// The running jobs of a cluster, kept across passes (module doc).
#[derive(Debug, Clone, Default)]
pub struct RunningSet {
    pub(crate) queues: BTreeMap<String, RunQueue>,
    /// Each job's queue, for `remove` by id.
    queue_of: FxHashMap<JobId, String>,
    /// Node names numbered when first seen in a binding: a reservation matches the pool's
    /// nodes to these numbers once, then follows each binding it releases by number, not by
    /// name.
    node_ids: FxHashMap<String, u32>,
}

impl RunningSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a job (replacing one with the same id: a job whose start time, limit, bindings
    /// or flags changed is inserted again).
    pub fn insert(&mut self, job: RunningJob) {
        self.remove(job.id);
        self.queue_of.insert(job.id, job.queue.clone());
        let nodes = job.bindings.iter().map(|b| self.node_id(&b.node)).collect();
        self.queues.entry(job.queue.clone()).or_default().insert(job, nodes);
    }

    fn node_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.node_ids.get(name) {
            return id;
        }
        let id = self.node_ids.len() as u32;
        self.node_ids.insert(name.to_string(), id);
        id
    }

    /// Takes a job out (it ended, was cancelled or preempted and gave its resources back).
    pub fn remove(&mut self, id: JobId) -> Option<RunningJob> {
        let name = self.queue_of.remove(&id)?;
        let q = self.queues.get_mut(&name)?;
        let job = q.remove(id)?;
        if q.is_empty() {
            self.queues.remove(&name);
        }
        Some(job)
    }

    pub fn get(&self, id: JobId) -> Option<&RunningJob> {
        self.queues.get(self.queue_of.get(&id)?)?.get(id)
    }

    pub fn len(&self) -> usize {
        self.queue_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue_of.is_empty()
    }

    /// Queue `q`'s running jobs by id, where its walk reads them: preemption and the reclaim
    /// of borrowed work (`gates.rs`); `None` where it does not, so that a fifo queue's pass
    /// does not list its running jobs. The fair orderings read the queue's sums instead
    /// ([`RunningSet::queue`]).
    pub(crate) fn list(&self, q: &QueueConfig) -> Option<Vec<&RunningJob>> {
        let rq = self.queues.get(&q.name)?;
        (q.preemption.is_some() || rq.borrowed > 0).then(|| rq.jobs().collect())
    }

    /// The running jobs of the queue named `name`.
    pub(crate) fn queue(&self, name: &str) -> Option<&RunQueue> {
        self.queues.get(name)
    }

    /// The jobs by queue name, then id.
    pub fn iter(&self) -> impl Iterator<Item = &RunningJob> {
        self.queues.values().flat_map(RunQueue::jobs)
    }
}

impl FromIterator<RunningJob> for RunningSet {
    fn from_iter<I: IntoIterator<Item = RunningJob>>(iter: I) -> Self {
        let mut s = RunningSet::new();
        for j in iter {
            s.insert(j);
        }
        s
    }
}

/// In [`KeptEnds`]' node numbering: a node that is not in the pool.
const ELSEWHERE: u32 = u32::MAX;

/// Where one sorted run of a queue's ends comes from: its overdue jobs ([`Walked::overdue`]),
/// or its limited or unlimited index as kept.
enum Keys<'a> {
    Overdue(usize),
    Kept(btree_map::Range<'a, (Millis, JobId), u32>),
}

impl Keys<'_> {
    /// The next (start or end, slot).
    fn next(&mut self, overdue: &mut [BinaryHeap<Reverse<(Millis, u32)>>]) -> Option<(Millis, u32)> {
        match self {
            Keys::Overdue(queue) => overdue[*queue].pop().map(|Reverse(head)| head),
            Keys::Kept(range) => range.next().map(|(&(t, _), &slot)| (t, slot)),
        }
    }
}

/// One sorted run of ends the walk merges: a queue's overdue, limited or unlimited jobs
/// (`add` is the queue's default limit for the latter).
struct Stream<'a> {
    keys: Keys<'a>,
    add: Millis,
    jobs: &'a RunQueue,
    /// The next (start or end, slot) in end order.
    head: Option<(Millis, u32)>,
}

/// The running jobs' ends as far as the pass's reservations have walked them.
struct Walked<'a> {
    streams: Vec<Stream<'a>>,
    /// Per queue of the set (in its order), the jobs past their planned end with their own
    /// ends (`expected_end`) not merged yet, in a heap: made in linear time, and the walk
    /// takes them in order only as far as it goes (ends and slots are unique, so the order is
    /// the sorted one).
    overdue: Vec<BinaryHeap<Reverse<(Millis, u32)>>>,
    /// Each group's end, and where its bindings begin in `bindings`.
    groups: Vec<(Millis, u32)>,
    /// The released bindings that lie on the pool's nodes: the node's index there, the
    /// binding, and what its end rests on.
    bindings: Vec<(u32, &'a Binding, Basis)>,
}

/// The walk of a kept set's ends for one pass, shared by every reservation of the pass: the
/// set, `now` and the pool's nodes do not change during a pass, so neither does the order in
/// which the running jobs' bindings are released. The first reservation to reach a group
/// merges the per-queue streams up to it; the later ones read the groups already merged and
/// only merge the pass's own starts ([`Ends::merge`]) into them. Worked out once per pass too:
/// each queue's overdue jobs' ends, and each node number's index in the pool.
pub(crate) struct KeptEnds<'a> {
    /// Per node number of the set, its index in the pool ([`ELSEWHERE`] for none).
    pool_index: Vec<u32>,
    now: Millis,
    walked: RefCell<Walked<'a>>,
}

impl<'a> KeptEnds<'a> {
    /// `pool`: the nodes the walk follows.
    pub fn new(pool: &Pool, set: &'a RunningSet, queues: &[QueueConfig], fallback_limit: Millis, now: Millis) -> Self {
        let mut overdue_of = Vec::with_capacity(set.queues.len());
        let mut streams = Vec::with_capacity(set.queues.len() * 3);
        for (k, (name, q)) in set.queues.iter().enumerate() {
            let default = queues.iter().find(|c| c.name == *name).map_or(fallback_limit, |c| c.default_time_limit_ms);
            // Jobs past their planned end have ends of their own (`expected_end`), ordered
            // here: they are the few that outlived their estimate, the rest are read as kept.
            let unlimited_from = now.saturating_sub(default);
            let mut overdue: Vec<Reverse<(Millis, u32)>> = Vec::new();
            for (m, from, add) in [(&q.limited, now, 0), (&q.unlimited, unlimited_from, default)] {
                for (&(t, _), &slot) in m.range(..(from, JobId::MIN)) {
                    overdue.push(Reverse((expected_end(&q.slab[slot as usize], t.saturating_add(add), now), slot)));
                }
            }
            overdue_of.push(BinaryHeap::from(overdue));
            let kept = |m: &'a BTreeMap<(Millis, JobId), u32>, from: Millis| Keys::Kept(m.range((from, JobId::MIN)..));
            streams.push(Stream { keys: Keys::Overdue(k), add: 0, jobs: q, head: None });
            streams.push(Stream { keys: kept(&q.limited, now), add: 0, jobs: q, head: None });
            streams.push(Stream { keys: kept(&q.unlimited, unlimited_from), add: default, jobs: q, head: None });
        }
        for s in &mut streams {
            s.head = s.keys.next(&mut overdue_of);
        }
        // Each pool node's number in the set, looked up once: the set's names are hashed
        // already, and the walk then follows a binding to its node by number.
        let mut pool_index = vec![ELSEWHERE; set.node_ids.len()];
        for (i, name) in pool.names().iter().enumerate() {
            if let Some(&n) = set.node_ids.get(*name) {
                pool_index[n as usize] = i as u32;
            }
        }
        let walked = Walked { streams, overdue: overdue_of, groups: Vec::new(), bindings: Vec::new() };
        KeptEnds { pool_index, now, walked: RefCell::new(walked) }
    }

    /// The end of group `g` of the running jobs' ends, merged now if no reservation of the
    /// pass reached it yet; `None` past the last.
    fn group(&self, g: usize) -> Option<Millis> {
        let mut w = self.walked.borrow_mut();
        while w.groups.len() <= g {
            if !self.merge_group(&mut w) {
                return None;
            }
        }
        Some(w.groups[g].0)
    }

    /// Puts group `g`'s bindings (merged already: [`KeptEnds::group`]) into `out`.
    fn release<'b>(&self, g: usize, out: &mut Vec<(usize, &'b Binding, Basis)>)
    where
        'a: 'b,
    {
        let w = self.walked.borrow();
        let from = w.groups[g].1 as usize;
        let to = w.groups.get(g + 1).map_or(w.bindings.len(), |next| next.1 as usize);
        out.extend(w.bindings[from..to].iter().map(|&(i, b, basis)| (i as usize, b, basis)));
    }

    /// Merges the next group of ends from the streams; `false` once all are merged. Within
    /// a group the bindings come stream by stream, as the walk has always released them.
    fn merge_group(&self, w: &mut Walked<'a>) -> bool {
        let Walked { streams, overdue, groups, bindings } = w;
        let now = self.now;
        let end_of = |s: &Stream, (t, _): (Millis, u32)| t.saturating_add(s.add).max(now);
        let Some(end) = streams.iter().filter_map(|s| s.head.map(|h| end_of(s, h))).min() else { return false };
        groups.push((end, bindings.len() as u32));
        for s in streams.iter_mut() {
            while let Some(h) = s.head.filter(|&h| end_of(s, h) == end) {
                let (q, slot) = (s.jobs, h.1 as usize);
                let basis = Basis::of_running(&q.slab[slot], end);
                let of_job = &q.slab[slot].bindings;
                let nodes = match of_job.len() {
                    1 => std::slice::from_ref(&q.first_node[slot]),
                    _ => &q.nodes[slot][..],
                };
                for (b, &n) in of_job.iter().zip(nodes) {
                    let i = self.pool_index[n as usize];
                    if i != ELSEWHERE {
                        bindings.push((i, b, basis));
                    }
                }
                s.head = s.keys.next(overdue);
            }
        }
        true
    }
}

/// The bindings of the running jobs and of the pass's starts, released group by group in
/// end order: an end is `started_at + limit` (the job's queue's default limit when it has
/// none), or now for a job past it. Within one end, the order is not defined: the walk
/// releases a whole group before it looks at any node.
pub(crate) enum Ends<'b, 'a> {
    /// Built from a list of running jobs each pass (`schedule`).
    Heap { heap: BinaryHeap<Reverse<(Millis, usize)>>, bindings: Vec<(&'b Binding, Basis)> },
    /// The pass's walk of the kept set's ends (`schedule_set`), read from group `group` on,
    /// with the pass's starts (`order`: their ends and indexes in `started`, sorted; `next`:
    /// the first not yet released) merged in.
    Merge {
        kept: &'b KeptEnds<'a>,
        group: usize,
        started: &'b [StartedEnd],
        order: Vec<(Millis, u32)>,
        next: usize,
        now: Millis,
    },
}

impl<'b, 'a> Ends<'b, 'a> {
    /// Every binding of `running` and `started`. `default_of(queue)`: the limit of a job
    /// without one.
    pub fn heap(
        running: &'b [RunningJob],
        started: &'b [StartedEnd],
        default_of: impl Fn(&str) -> Millis,
        now: Millis,
    ) -> Self {
        let mut bindings = Vec::with_capacity(running.len());
        let mut keys = Vec::with_capacity(running.len());
        for r in running {
            let planned_end = r.started_at.saturating_add(planned(r).unwrap_or_else(|| default_of(&r.queue)));
            let end = expected_end(r, planned_end, now);
            let basis = Basis::of_running(r, end);
            for b in &r.bindings {
                keys.push(Reverse((end, bindings.len())));
                bindings.push((b, basis));
            }
        }
        for (end, _, bs, basis) in started {
            for b in bs {
                keys.push(Reverse(((*end).max(now), bindings.len())));
                bindings.push((b, *basis));
            }
        }
        Ends::Heap { heap: BinaryHeap::from(keys), bindings }
    }

    /// The ends of the kept set's jobs (the pass's walk, [`KeptEnds`]) and of `started`.
    pub fn merge(kept: &'b KeptEnds<'a>, started: &'b [StartedEnd], now: Millis) -> Self {
        let mut order: Vec<(Millis, JobId, u32)> =
            started.iter().enumerate().map(|(k, (end, id, _, _))| (*end, *id, k as u32)).collect();
        order.sort_unstable();
        let order = order.into_iter().map(|(end, _, k)| (end, k)).collect();
        Ends::Merge { kept, group: 0, started, order, next: 0, now }
    }

    /// Puts the bindings of the next end that lie on `pool`'s nodes into `out`, with their
    /// node's index there and what their end rests on, and returns that end; `None` once all
    /// are released. Every call on one `Ends` must pass the same pool.
    pub fn next_group(&mut self, pool: &Pool, out: &mut Vec<(usize, &'b Binding, Basis)>) -> Option<Millis> {
        let by_name = |b: &'b Binding, basis: Basis| pool.index_of(&b.node).map(|i| (i, b, basis));
        match self {
            Ends::Heap { heap, bindings } => {
                let Reverse((end, _)) = *heap.peek()?;
                while let Some(&Reverse((e, k))) = heap.peek() {
                    if e != end {
                        break;
                    }
                    heap.pop();
                    let (b, basis) = bindings[k];
                    out.extend(by_name(b, basis));
                }
                Some(end)
            }
            Ends::Merge { kept, group, started, order, next, now } => {
                let running = kept.group(*group);
                let of_started = order.get(*next).map(|&(e, _)| e.max(*now));
                let end = match (running, of_started) {
                    (Some(r), Some(s)) => r.min(s),
                    (r, s) => r.or(s)?,
                };
                // The running jobs' group first, then the starts: the order the walk has
                // always released one end's bindings in.
                if running == Some(end) {
                    kept.release(*group, out);
                    *group += 1;
                }
                while let Some(&(e, k)) = order.get(*next) {
                    if e.max(*now) != end {
                        break;
                    }
                    let (_, _, bs, basis) = &started[k as usize];
                    out.extend(bs.iter().filter_map(|b| by_name(b, *basis)));
                    *next += 1;
                }
                Some(end)
            }
        }
    }
}
