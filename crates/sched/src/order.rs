//! The order in which a queue's pending jobs are considered. Priority bands always come first
//! (higher priority first); within a band the queue's [`Ordering`] decides:
//!
//! - `fifo`: job id ascending; `lifo`: job id descending.
//! - `drf` (dominant resource fairness over users): a user's dominant share is
//!   `max(cpu_u / cpu_T, mem_u / mem_T, gpu_u / gpu_T)`, where `x_u` is what the user's jobs
//!   of this queue hold (running jobs' bindings, plus the requests of jobs started earlier in
//!   this pass, times their node count) and `x_T` the queue's capacity (every node of the
//!   queue; a resource the queue has none of is left out). The next job is the oldest (lowest
//!   id) pending job of the user with the smallest share; ties go to the lower job id.
//!   Shares are exact integers (parts per billion), so the order is deterministic, and are
//!   recomputed after every start of the pass.
//! - `fair-share` (Slurm's classic formula, ranked like its Fair Tree): with `P` the projects
//!   having jobs (pending or running) in the queue, a project's share is
//!   `S_p = w_p / Σ_{q∈P} w_q` (`w` from `project_weights`, default 1) and its usage share
//!   `U_p = u_p / Σ_{q∈P} u_q` (decayed usage from `usage_by_project`, 0 when none); its
//!   factor is `F_p = 2^(−U_p / S_p)` (0 when `S_p = 0`). Within a project, each of its `n`
//!   active users has share `1/n` and usage share `U_u = u_u / Σ u_v` over those users
//!   (`usage_by_user`), so `F_u = 2^(−n·U_u)`. Jobs are ordered by `F_p` descending, then
//!   `F_u` descending, then job id: lower decayed usage relative to the share goes first.
//!   Factors are fixed for the pass (past usage, not this pass's starts).
//! - `las` (Tiresias' 2D-LAS): by level of attained service (`service::level` of
//!   [`PendingJob::attained`] against the queue's thresholds), then job id.
//! - `qssf`: by expected service (`service::expected`), then job id.
//!
//! Under a wait bound (`reserve_after`), the jobs pending since the cutoff or before come
//! first, oldest first (by submit time, then id), whatever their band; then the rest in the
//! ordering's order ([`Order::aged`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use berth_model::{JobId, ResourceRequest};

use crate::fairness::{binding_use, charge, dominant_share};
pub use crate::fairness::{fair_share_factor, fair_share_factors};
use crate::pending_set::{PendingSet, QueueSet};
use crate::running_set::RunningSet;
use crate::set_order::{Cursor, Running, UntriedRest};
use crate::{FairShare, Ordering, PendingJob, RunningJob};

/// A job's (project, user), and their fair-share factors `(F_project, F_user)`.
type Pair<'s> = (&'s str, &'s str);
type Factors = (f64, f64);

/// A job with its sort key (priority band, id) beside it, so that sorting and listing the
/// untried rest of a deep queue read one compact array instead of every job.
type Keyed<'a> = (std::cmp::Reverse<i32>, JobId, &'a PendingJob);

/// Where a queue's pending jobs come from: a list made for this pass (`schedule`), or the
/// caller's persistent set (`schedule_set`), walked without reading the jobs it does not reach.
#[derive(Clone)]
pub(crate) enum Source<'a> {
    Jobs(Vec<&'a PendingJob>),
    Set(&'a PendingSet, &'a Arc<str>, &'a QueueSet),
}

impl Source<'_> {
    /// The smallest whole-CPU and memory request ((0, 0) when there is none), for the pool.
    pub fn floors(&self) -> (u32, u64) {
        match self {
            // One scan: a deep queue's jobs do not fit in the cache.
            Source::Jobs(jobs) => jobs
                .iter()
                .map(|j| (j.request.whole_cpus(), j.request.mem_bytes))
                .reduce(|(c, m), (c2, m2)| (c.min(c2), m.min(m2)))
                .unwrap_or((0, 0)),
            Source::Set(_, _, q) => q.floors(),
        }
    }
}

/// The queue's jobs in the order the pass considers them; DRF reorders as jobs start.
pub(crate) enum Order<'a> {
    Fixed(std::vec::IntoIter<Keyed<'a>>),
    Drf(Box<Drf<'a>>),
    /// Over the caller's set (`set_order.rs`).
    Set {
        set: &'a PendingSet,
        name: &'a Arc<str>,
        q: &'a QueueSet,
        cursor: Cursor,
    },
    /// Under a wait bound: the aged jobs first, then the inner order without them.
    Aged(Box<Aged<'a>>),
}

/// The wait bound's front of the queue (jobs submitted at `cutoff` or before), then `inner`.
pub(crate) struct Aged<'a> {
    cutoff: crate::Millis,
    front: Front<'a>,
    inner: Order<'a>,
    /// Whether the job last returned came from the front (the inner order is not charged).
    from_front: bool,
}

enum Front<'a> {
    /// Sorted by (submitted_at, id); with their ids, to leave them out of the inner rest.
    List(std::vec::IntoIter<&'a PendingJob>, HashSet<JobId>),
    Set(&'a PendingSet, &'a QueueSet, crate::set_order::AgedRest),
}

impl<'a> Order<'a> {
    /// `totals`: the queue's capacity (CPU thousandths, memory bytes, GPU thousandths).
    pub fn new(
        ordering: Ordering,
        source: Source<'a>,
        running: &[&RunningJob],
        fs: &FairShare,
        totals: [u64; 3],
    ) -> Self {
        Self::with(ordering, &crate::DEFAULT_LAS_THRESHOLDS, source, running, None, fs, totals)
    }

    /// [`Order::new`] with the queue's `las` thresholds; over a set, with the caller's running
    /// set (`kept`), whose sums the fair orderings read instead of `running`.
    pub fn with(
        ordering: Ordering,
        las_thresholds: &[u64],
        source: Source<'a>,
        running: &[&RunningJob],
        kept: Option<&'a RunningSet>,
        fs: &FairShare,
        totals: [u64; 3],
    ) -> Self {
        let jobs = match source {
            Source::Jobs(jobs) => jobs,
            Source::Set(set, name, q) => {
                let running = match kept {
                    Some(set) => Running::Kept(set.queue(name)),
                    None => Running::List(running),
                };
                let cursor = Cursor::new(ordering, las_thresholds, q, running, fs, totals);
                return Order::Set { set, name, q, cursor };
            }
        };
        let band = |j: &PendingJob| std::cmp::Reverse(j.priority);
        let keyed =
            |jobs: Vec<&'a PendingJob>| -> Vec<Keyed<'a>> { jobs.into_iter().map(|j| (band(j), j.id, j)).collect() };
        match ordering {
            // Ids are unique, so an unstable sort gives one order.
            Ordering::Fifo => {
                let mut k = keyed(jobs);
                k.sort_unstable_by_key(|&(b, id, _)| (b, id));
                Order::Fixed(k.into_iter())
            }
            Ordering::Lifo => {
                let mut k = keyed(jobs);
                k.sort_unstable_by_key(|&(b, id, _)| (b, std::cmp::Reverse(id)));
                Order::Fixed(k.into_iter())
            }
            Ordering::FairShare => {
                // Each job's (project, user) is looked up once, by hash, and the sort compares
                // numbers: a deep queue has many jobs and few pairs.
                let pair = |j: &'a PendingJob| (j.project.as_str(), j.user.as_str());
                let distinct: HashSet<(&str, &str)> = jobs
                    .iter()
                    .map(|j| pair(j))
                    .chain(running.iter().map(|r| (r.project.as_str(), r.user.as_str())))
                    .collect();
                let f: HashMap<(&str, &str), (f64, f64)> =
                    fair_share_factors(&distinct.into_iter().collect(), fs).into_iter().collect();
                // Consecutive jobs are often one user's: the last pair is tried before the map.
                let mut last: Option<(Pair, Factors)> = None;
                let mut factor = |j: &'a PendingJob| match last {
                    Some((p, k)) if p == pair(j) => k,
                    _ => {
                        let k = f.get(&pair(j)).copied().unwrap_or((0.0, 0.0));
                        last = Some((pair(j), k));
                        k
                    }
                };
                let mut keyed: Vec<(std::cmp::Reverse<i32>, Factors, JobId, &PendingJob)> =
                    jobs.iter().map(|j| (band(j), factor(j), j.id, *j)).collect();
                keyed.sort_unstable_by(|(ba, ka, ia, _), (bb, kb, ib, _)| {
                    ba.cmp(bb).then(kb.0.total_cmp(&ka.0)).then(kb.1.total_cmp(&ka.1)).then(ia.cmp(ib))
                });
                Order::Fixed(keyed.into_iter().map(|(b, _, id, j)| (b, id, j)).collect::<Vec<_>>().into_iter())
            }
            Ordering::Drf => Order::Drf(Box::new(Drf::new(jobs, running, totals))),
            Ordering::Las | Ordering::Qssf => {
                let key = |j: &PendingJob| match ordering {
                    Ordering::Las => crate::service::level(j.attained, las_thresholds) as u64,
                    _ => crate::service::expected(j),
                };
                let mut k: Vec<(std::cmp::Reverse<i32>, u64, JobId, &PendingJob)> =
                    jobs.into_iter().map(|j| (band(j), key(j), j.id, j)).collect();
                k.sort_unstable_by_key(|&(b, key, id, _)| (b, key, id));
                Order::Fixed(k.into_iter().map(|(b, _, id, j)| (b, id, j)).collect::<Vec<_>>().into_iter())
            }
        }
    }

    /// This order under a wait bound: the jobs submitted at `cutoff` or before first, oldest
    /// first, then the others in this order. `source`'s jobs are the same as this order's.
    pub fn aged(self, cutoff: crate::Millis, source: &Source<'a>) -> Self {
        let front = match source {
            Source::Jobs(jobs) => {
                let mut old: Vec<&PendingJob> = jobs.iter().copied().filter(|j| j.submitted_at <= cutoff).collect();
                old.sort_unstable_by_key(|j| (j.submitted_at, j.id));
                let ids = old.iter().map(|j| j.id).collect();
                Front::List(old.into_iter(), ids)
            }
            Source::Set(set, _, q) => Front::Set(set, q, crate::set_order::AgedRest { cutoff, last: None }),
        };
        Order::Aged(Box::new(Aged { cutoff, front, inner: self, from_front: false }))
    }

    pub fn next(&mut self) -> Option<&'a PendingJob> {
        match self {
            Order::Fixed(it) => it.next().map(|(_, _, j)| j),
            Order::Drf(d) => d.next(),
            Order::Set { set, q, cursor, .. } => cursor.next(q).map(|id| set.job(id)),
            Order::Aged(a) => {
                let front = match &mut a.front {
                    Front::List(it, _) => it.next(),
                    Front::Set(set, q, rest) => rest.front(q).next().map(|id| {
                        let j = set.job(id);
                        rest.last = Some((j.submitted_at, id));
                        j
                    }),
                };
                a.from_front = front.is_some();
                if front.is_some() {
                    return front;
                }
                let cutoff = a.cutoff;
                std::iter::from_fn(|| a.inner.next()).find(|j| j.submitted_at > cutoff)
            }
        }
    }

    /// The ids of the jobs not yet returned, in order (none is started: DRF's shares stay);
    /// over a set, a cursor that stands for them instead.
    pub fn rest_ids(&mut self, into: &mut Vec<JobId>) -> Option<UntriedRest> {
        match self {
            Order::Fixed(it) => into.extend(it.map(|(_, id, _)| id)),
            Order::Drf(d) => {
                while let Some(j) = d.next() {
                    into.push(j.id);
                }
            }
            Order::Set { name, cursor, .. } => {
                return Some(UntriedRest { queue: Arc::clone(name), cursor: cursor.clone(), aged: None });
            }
            Order::Aged(a) => match &mut a.front {
                Front::List(it, old) => {
                    into.extend(it.map(|j| j.id));
                    let mut rest = Vec::new();
                    a.inner.rest_ids(&mut rest);
                    into.extend(rest.into_iter().filter(|id| !old.contains(id)));
                }
                Front::Set(_, _, aged) => {
                    let mut rest = a.inner.rest_ids(into)?;
                    rest.aged = Some(*aged);
                    return Some(rest);
                }
            },
        }
        None
    }

    /// The job last returned by `next` started: DRF charges it to its user.
    pub fn started(&mut self, job: &PendingJob) {
        match self {
            Order::Drf(d) => d.charge(&job.user, &job.request, job.kernel_count() as u64),
            Order::Set { cursor, .. } => cursor.started(&job.request, job.kernel_count() as u64),
            Order::Aged(a) if !a.from_front => a.inner.started(job),
            Order::Fixed(_) | Order::Aged(_) => {}
        }
    }
}

/// DRF state: per band, per user, the user's pending jobs by id; and each user's holdings.
/// Users are numbered once per pass (first seen first), so that the per-job work compares
/// numbers, not names.
pub(crate) struct Drf<'a> {
    bands: VecDeque<BTreeMap<u32, VecDeque<&'a PendingJob>>>,
    /// The number of each user with pending jobs.
    users: HashMap<&'a str, u32>,
    /// What each numbered user holds (CPU thousandths, memory bytes, GPU thousandths).
    used: Vec<[u64; 3]>,
    totals: [u64; 3],
    /// Users of the current band ready to pick: (dominant share, head job id, user). Head ids
    /// are unique, so the user number never decides.
    ready: BTreeSet<(u64, JobId, u32)>,
    /// The user whose job `next` returned last, re-entered on the next call.
    last: Option<u32>,
}

impl<'a> Drf<'a> {
    fn new(mut jobs: Vec<&'a PendingJob>, running: &[&RunningJob], totals: [u64; 3]) -> Self {
        jobs.sort_unstable_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        let mut users: HashMap<&str, u32> = HashMap::new();
        let mut bands: VecDeque<BTreeMap<u32, VecDeque<&PendingJob>>> = VecDeque::new();
        let mut prio = None;
        // Consecutive jobs are often one user's: the last number is tried before the map.
        let mut last: Option<(&str, u32)> = None;
        for j in jobs {
            if prio != Some(j.priority) {
                bands.push_back(BTreeMap::new());
                prio = Some(j.priority);
            }
            let u = match last {
                Some((name, u)) if name == j.user => u,
                _ => {
                    let n = users.len() as u32;
                    let u = *users.entry(j.user.as_str()).or_insert(n);
                    last = Some((j.user.as_str(), u));
                    u
                }
            };
            bands.back_mut().expect("pushed").entry(u).or_default().push_back(j);
        }
        let used = vec![[0; 3]; users.len()];
        let mut d = Drf { bands, users, used, totals, ready: BTreeSet::new(), last: None };
        for r in running {
            // Holdings of users with nothing pending change no share that is compared.
            let Some(&u) = d.users.get(r.user.as_str()) else { continue };
            for b in &r.bindings {
                d.charge_user(u, &binding_use(b), 1);
            }
        }
        d.fill();
        d
    }

    fn charge(&mut self, user: &str, req: &ResourceRequest, times: u64) {
        if let Some(&u) = self.users.get(user) {
            self.charge_user(u, req, times);
        }
    }

    fn charge_user(&mut self, u: u32, req: &ResourceRequest, times: u64) {
        charge(&mut self.used[u as usize], req, times);
    }

    /// Dominant share in parts per billion.
    fn share(&self, u: u32) -> u64 {
        dominant_share(&self.used[u as usize], &self.totals)
    }

    /// Enters every user of the front band once it is the current band.
    fn fill(&mut self) {
        while self.ready.is_empty() {
            let Some(band) = self.bands.front() else { return };
            if band.is_empty() {
                self.bands.pop_front();
                continue;
            }
            let heads: Vec<(u32, JobId)> = band.iter().map(|(u, q)| (*u, q[0].id)).collect();
            for (u, id) in heads {
                self.ready.insert((self.share(u), id, u));
            }
        }
    }

    fn next(&mut self) -> Option<&'a PendingJob> {
        if let Some(u) = self.last.take() {
            let band = self.bands.front_mut()?;
            if let Some(head) = band.get(&u).and_then(|q| q.front()) {
                let id = head.id;
                self.ready.insert((self.share(u), id, u));
            } else {
                band.remove(&u);
            }
        }
        if self.ready.is_empty() {
            self.bands.pop_front();
            self.fill();
        }
        let (_, _, u) = self.ready.pop_first()?;
        let job = self.bands.front_mut()?.get_mut(&u)?.pop_front()?;
        self.last = Some(u);
        Some(job)
    }
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
