//! Test only: the orderings as naive sorts of a queue's job list, the oracle the property
//! tests compare each ordering's cursor over the pending set with (`orderings/`). Priority
//! bands always come first (higher priority first); within a band (the exact rules are in each
//! ordering's module):
//!
//! - `fifo`: job id ascending; `lifo`: job id descending;
//! - `drf`: the oldest job of the user with the smallest dominant share, recomputed after
//!   every start (`orderings/drf.rs`);
//! - `fair-share`: by the (project, user) factors descending, then job id;
//! - `las`: by level of attained service, then job id; `qssf`: by expected service, then id.
//!
//! Under a wait bound, the jobs pending since the cutoff or before come first, oldest first
//! (by submit time, then id), whatever their band; then the rest in the ordering's order.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use berth_model::{JobId, ResourceRequest};

use crate::fairness::{binding_use, charge, dominant_share, fair_share_factors};
use crate::{FairShare, Millis, Ordering, PendingJob, RunningJob};

/// A job's (project, user), and their fair-share factors `(F_project, F_user)`.
type Pair<'s> = (&'s str, &'s str);
type Factors = (f64, f64);

/// A job with its sort key (priority band, id) beside it.
type Keyed<'a> = (std::cmp::Reverse<i32>, JobId, &'a PendingJob);

/// The queue's jobs in the ordering's order; DRF reorders as jobs start.
enum Order<'a> {
    Fixed(std::vec::IntoIter<Keyed<'a>>),
    Drf(Box<Drf<'a>>),
}

impl<'a> Order<'a> {
    fn new(
        ordering: Ordering,
        las_thresholds: &[u64],
        jobs: Vec<&'a PendingJob>,
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

    fn next(&mut self) -> Option<&'a PendingJob> {
        match self {
            Order::Fixed(it) => it.next().map(|(_, _, j)| j),
            Order::Drf(d) => d.next(),
        }
    }

    fn started(&mut self, job: &PendingJob) {
        if let Order::Drf(d) = self {
            d.charge(&job.user, &job.request, job.kernel_count() as u64);
        }
    }
}

/// The queue's jobs in the order a pass walks them, under the wait bound `cutoff` if any;
/// `start`: whether the job just returned starts (DRF charges it, unless it came from the wait
/// bound's front).
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk(
    ordering: Ordering,
    las_thresholds: &[u64],
    jobs: &[&PendingJob],
    running: &[&RunningJob],
    fs: &FairShare,
    totals: [u64; 3],
    cutoff: Option<Millis>,
    start: impl Fn(JobId) -> bool,
) -> Vec<JobId> {
    let mut out = Vec::new();
    let mut front: Vec<&PendingJob> = match cutoff {
        Some(c) => jobs.iter().copied().filter(|j| j.submitted_at <= c).collect(),
        None => Vec::new(),
    };
    front.sort_unstable_by_key(|j| (j.submitted_at, j.id));
    out.extend(front.iter().map(|j| j.id));
    let mut order = Order::new(ordering, las_thresholds, jobs.to_vec(), running, fs, totals);
    while let Some(j) = order.next() {
        if cutoff.is_some_and(|c| j.submitted_at <= c) {
            continue;
        }
        out.push(j.id);
        if start(j.id) {
            order.started(j);
        }
    }
    out
}

/// DRF state: per band, per user, the user's pending jobs by id; and each user's holdings.
/// Users are numbered once per pass (first seen first), so that the per-job work compares
/// numbers, not names.
struct Drf<'a> {
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
