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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use berth_model::{JobId, ResourceRequest};

use crate::{FairShare, Ordering, PendingJob, RunningJob};

/// Slurm's fair-share factor `2^(−usage_share / shares_share)`: 1 for no usage, 0.5 for
/// usage equal to the share, towards 0 above it. 0 for a zero share; non-finite or negative
/// inputs count as 0.
pub fn fair_share_factor(usage_share: f64, shares_share: f64) -> f64 {
    let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let (u, s) = (clean(usage_share), clean(shares_share));
    if s == 0.0 { 0.0 } else { (-u / s).exp2() }
}

/// `(F_project, F_user)` for every (project, user) with jobs in the queue (module doc).
pub fn fair_share_factors<'s>(
    pairs: &BTreeSet<(&'s str, &'s str)>,
    fs: &FairShare,
) -> BTreeMap<(&'s str, &'s str), (f64, f64)> {
    let clean = |x: Option<&f64>| x.copied().filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0);
    let projects: BTreeSet<&str> = pairs.iter().map(|&(p, _)| p).collect();
    let w_sum: f64 = projects.iter().map(|p| fs.project_weights.get(*p).map_or(1.0, |w| clean(Some(w)))).sum();
    let u_sum: f64 = projects.iter().map(|p| clean(fs.usage_by_project.get(*p))).sum();
    let mut out = BTreeMap::new();
    for &p in &projects {
        let w = fs.project_weights.get(p).map_or(1.0, |w| clean(Some(w)));
        let s_p = if w_sum > 0.0 { w / w_sum } else { 0.0 };
        let u_p = if u_sum > 0.0 { clean(fs.usage_by_project.get(p)) / u_sum } else { 0.0 };
        let f_p = fair_share_factor(u_p, s_p);
        let users: Vec<&str> = pairs.iter().filter(|&&(q, _)| q == p).map(|&(_, u)| u).collect();
        let uu_sum: f64 = users.iter().map(|u| clean(fs.usage_by_user.get(*u))).sum();
        let s_u = 1.0 / users.len() as f64;
        for u in users {
            let u_u = if uu_sum > 0.0 { clean(fs.usage_by_user.get(u)) / uu_sum } else { 0.0 };
            out.insert((p, u), (f_p, fair_share_factor(u_u, s_u)));
        }
    }
    out
}

/// A job with its sort key (priority band, id) beside it, so that sorting and listing the
/// untried rest of a deep queue read one compact array instead of every job.
type Keyed<'a> = (std::cmp::Reverse<i32>, JobId, &'a PendingJob);

/// The queue's jobs in the order the pass considers them; DRF reorders as jobs start.
pub(crate) enum Order<'a> {
    Fixed(std::vec::IntoIter<Keyed<'a>>),
    Drf(Box<Drf<'a>>),
}

impl<'a> Order<'a> {
    /// `totals`: the queue's capacity (CPU thousandths, memory bytes, GPU thousandths).
    pub fn new(
        ordering: Ordering,
        mut jobs: Vec<&'a PendingJob>,
        running: &[&RunningJob],
        fs: &FairShare,
        totals: [u64; 3],
    ) -> Self {
        let band = |j: &PendingJob| std::cmp::Reverse(j.priority);
        let keyed =
            |jobs: Vec<&'a PendingJob>| -> Vec<Keyed<'a>> { jobs.into_iter().map(|j| (band(j), j.id, j)).collect() };
        match ordering {
            // Ids are unique, so an unstable sort gives one order.
            Ordering::Fifo => {
                let mut k = keyed(jobs);
                k.sort_unstable_by_key(|&(b, id, _)| (b, id));
                return Order::Fixed(k.into_iter());
            }
            Ordering::Lifo => {
                let mut k = keyed(jobs);
                k.sort_unstable_by_key(|&(b, id, _)| (b, std::cmp::Reverse(id)));
                return Order::Fixed(k.into_iter());
            }
            Ordering::FairShare => {
                let pairs: BTreeSet<(&str, &str)> = jobs
                    .iter()
                    .map(|j| (j.project.as_str(), j.user.as_str()))
                    .chain(running.iter().map(|r| (r.project.as_str(), r.user.as_str())))
                    .collect();
                let f = fair_share_factors(&pairs, fs);
                let mut keyed: Vec<((f64, f64), &PendingJob)> = jobs
                    .iter()
                    .map(|j| (f.get(&(j.project.as_str(), j.user.as_str())).copied().unwrap_or((0.0, 0.0)), *j))
                    .collect();
                keyed.sort_by(|(ka, a), (kb, b)| {
                    band(a).cmp(&band(b)).then(kb.0.total_cmp(&ka.0)).then(kb.1.total_cmp(&ka.1)).then(a.id.cmp(&b.id))
                });
                jobs = keyed.into_iter().map(|(_, j)| j).collect();
            }
            Ordering::Drf => return Order::Drf(Box::new(Drf::new(jobs, running, totals))),
        }
        Order::Fixed(keyed(jobs).into_iter())
    }

    pub fn next(&mut self) -> Option<&'a PendingJob> {
        match self {
            Order::Fixed(it) => it.next().map(|(_, _, j)| j),
            Order::Drf(d) => d.next(),
        }
    }

    /// The ids of the jobs not yet returned, in order (none is started: DRF's shares stay).
    pub fn rest_ids(&mut self, into: &mut Vec<JobId>) {
        match self {
            Order::Fixed(it) => into.extend(it.map(|(_, id, _)| id)),
            Order::Drf(d) => {
                while let Some(j) = d.next() {
                    into.push(j.id);
                }
            }
        }
    }

    /// The job last returned by `next` started: DRF charges it to its user.
    pub fn started(&mut self, job: &PendingJob) {
        if let Order::Drf(d) = self {
            d.charge(&job.user, &job.request, job.kernel_count() as u64);
        }
    }
}

/// DRF state: per band, per user, the user's pending jobs by id; and each user's holdings.
pub(crate) struct Drf<'a> {
    bands: VecDeque<BTreeMap<&'a str, VecDeque<&'a PendingJob>>>,
    used: BTreeMap<String, [u64; 3]>,
    totals: [u64; 3],
    /// Users of the current band ready to pick: (dominant share, head job id, user).
    ready: BTreeSet<(u64, JobId, &'a str)>,
    /// The user whose job `next` returned last, re-entered on the next call.
    last: Option<&'a str>,
}

impl<'a> Drf<'a> {
    fn new(mut jobs: Vec<&'a PendingJob>, running: &[&RunningJob], totals: [u64; 3]) -> Self {
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        let mut bands: VecDeque<BTreeMap<&str, VecDeque<&PendingJob>>> = VecDeque::new();
        let mut prio = None;
        for j in jobs {
            if prio != Some(j.priority) {
                bands.push_back(BTreeMap::new());
                prio = Some(j.priority);
            }
            bands.back_mut().expect("pushed").entry(j.user.as_str()).or_default().push_back(j);
        }
        let mut d = Drf { bands, used: BTreeMap::new(), totals, ready: BTreeSet::new(), last: None };
        for r in running {
            for b in &r.bindings {
                let req = ResourceRequest {
                    cpu_milli: b.cpu_milli,
                    mem_bytes: b.mem_bytes,
                    gpu_milli: b.gpus.iter().map(|g| g.milli).sum(),
                };
                d.charge(&r.user, &req, 1);
            }
        }
        d.fill();
        d
    }

    fn charge(&mut self, user: &str, req: &ResourceRequest, times: u64) {
        let u = self.used.entry(user.to_string()).or_default();
        u[0] += req.cpu_milli * times;
        u[1] += req.mem_bytes * times;
        u[2] += req.gpu_milli * times;
    }

    /// Dominant share in parts per billion.
    fn share(&self, user: &str) -> u64 {
        let Some(u) = self.used.get(user) else { return 0 };
        (0..3)
            .filter(|&k| self.totals[k] > 0)
            .map(|k| (u[k] as u128 * 1_000_000_000 / self.totals[k] as u128).min(u64::MAX as u128) as u64)
            .max()
            .unwrap_or(0)
    }

    /// Enters every user of the front band once it is the current band.
    fn fill(&mut self) {
        while self.ready.is_empty() {
            let Some(band) = self.bands.front() else { return };
            if band.is_empty() {
                self.bands.pop_front();
                continue;
            }
            let users: Vec<(&'a str, JobId)> = band.iter().map(|(u, q)| (*u, q[0].id)).collect();
            for (u, id) in users {
                self.ready.insert((self.share(u), id, u));
            }
        }
    }

    fn next(&mut self) -> Option<&'a PendingJob> {
        if let Some(u) = self.last.take() {
            let band = self.bands.front_mut()?;
            if let Some(head) = band.get(u).and_then(|q| q.front()) {
                let id = head.id;
                self.ready.insert((self.share(u), id, u));
            } else {
                band.remove(u);
            }
        }
        if self.ready.is_empty() {
            self.bands.pop_front();
            self.fill();
        }
        let (_, _, u) = self.ready.pop_first()?;
        let job = self.bands.front_mut()?.get_mut(u)?.pop_front()?;
        self.last = Some(u);
        Some(job)
    }
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
