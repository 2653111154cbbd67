//! Quotas in a pass: a job starts only if its user's and its project's running totals stay
//! within their limits (GPUs, CPUs, memory, running jobs). A job over quota waits with a
//! `quota` reason and never holds its queue back (like a Kueue workload that is not admitted):
//! jobs behind it, of other users or projects, may start.
//!
//! The caller gives each user's and project's current use (jobs holding resources); the pass
//! adds what it starts, across queues, so no pass can overshoot.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{QuotaLimits, ResourceRequest, format_bytes, format_gpu_milli};

use berth_model::JobId;

use crate::{Millis, PendingJob};

/// What a user or a project holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaUse {
    pub gpu_milli: u64,
    pub cpu_milli: u64,
    pub mem_bytes: u64,
    pub running_jobs: u32,
}

impl QuotaUse {
    /// The use of one job: its request times its kernels.
    pub fn of(request: &ResourceRequest, kernels: u32) -> QuotaUse {
        let k = kernels.max(1) as u64;
        QuotaUse {
            gpu_milli: request.gpu_milli * k,
            cpu_milli: request.cpu_milli * k,
            mem_bytes: request.mem_bytes * k,
            running_jobs: 1,
        }
    }

    pub fn add(&mut self, o: &QuotaUse) {
        self.gpu_milli += o.gpu_milli;
        self.cpu_milli += o.cpu_milli;
        self.mem_bytes += o.mem_bytes;
        self.running_jobs += o.running_jobs;
    }
}

/// Limits and current use per user and per project. Names without limits are not limited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quotas {
    pub users: BTreeMap<String, QuotaLimits>,
    pub projects: BTreeMap<String, QuotaLimits>,
    pub used_by_user: BTreeMap<String, QuotaUse>,
    pub used_by_project: BTreeMap<String, QuotaUse>,
}

/// No quotas at all.
pub static NO_QUOTAS: Quotas = Quotas {
    users: BTreeMap::new(),
    projects: BTreeMap::new(),
    used_by_user: BTreeMap::new(),
    used_by_project: BTreeMap::new(),
};

impl Quotas {
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.projects.is_empty()
    }
}

/// Whose quota a job would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum QuotaHolder {
    User,
    Project,
}

/// A job would take its user or project past a limit even with borrowing, e.g.
/// `quota: project vision gpu 2/2 in use` (the text is the job's pending reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quota: {holder} {name} {why}")]
pub struct OverQuota {
    pub holder: QuotaHolder,
    pub name: String,
    /// Which limit and how far, e.g. `gpu 2/2 in use`.
    pub why: String,
}

/// The pass's running tally, starting from the input's use.
pub(crate) struct Book<'a> {
    quotas: &'a Quotas,
    users: BTreeMap<String, QuotaUse>,
    projects: BTreeMap<String, QuotaUse>,
}

impl<'a> Book<'a> {
    pub fn new(quotas: &'a Quotas) -> Self {
        Book { quotas, users: quotas.used_by_user.clone(), projects: quotas.used_by_project.clone() }
    }

    /// `Ok(false)` when `job` fits its quotas, `Ok(true)` when it fits only by borrowing,
    /// `Err(why)` when it would take its user or project past a limit.
    pub fn admits(&self, job: &PendingJob) -> Result<bool, OverQuota> {
        self.admits_use(&job.user, &job.project, &QuotaUse::of(&job.request, job.kernel_count()))
    }

    fn admits_use(&self, user: &str, project: &str, add: &QuotaUse) -> Result<bool, OverQuota> {
        if self.quotas.is_empty() {
            return Ok(false);
        }
        let checks = [
            (QuotaHolder::User, user, &self.quotas.users, &self.users),
            (QuotaHolder::Project, project, &self.quotas.projects, &self.projects),
        ];
        let mut borrowing = false;
        for (kind, name, limits, used) in checks {
            let Some(l) = limits.get(name) else { continue };
            let u = used.get(name).copied().unwrap_or_default();
            if let Some(why) = exceeds(l, &u, add) {
                if exceeds(&with_borrowing(l), &u, add).is_some() {
                    return Err(OverQuota { holder: kind, name: name.to_string(), why });
                }
                borrowing = true;
            }
        }
        Ok(borrowing)
    }

    /// Counts a job the pass starts.
    pub fn started(&mut self, job: &PendingJob) {
        self.started_use(&job.user, &job.project, &QuotaUse::of(&job.request, job.kernel_count()));
    }

    fn started_use(&mut self, user: &str, project: &str, add: &QuotaUse) {
        if self.quotas.is_empty() {
            return;
        }
        self.users.entry(user.to_string()).or_default().add(add);
        self.projects.entry(project.to_string()).or_default().add(add);
    }
}

/// A job holding resources, for [`borrowed_by_start_order`].
#[derive(Debug, Clone)]
pub struct HeldJob {
    pub id: JobId,
    pub user: String,
    pub project: String,
    pub usage: QuotaUse,
    pub started_at: Millis,
}

/// Which of the jobs holding resources are beyond their user's or project's quota: they are
/// counted in start order (ties by id) from nothing, and a job that takes a limit past its
/// quota (by borrowing, or beyond even that after a quota was lowered) is borrowed. The manager
/// keeps the borrowed mark in memory; after a restart it recomputes it with this, so that
/// borrowed work is still the first to be preempted for jobs within their quota.
pub fn borrowed_by_start_order(limits: &Quotas, held: &[HeldJob]) -> BTreeSet<JobId> {
    let quotas = Quotas { users: limits.users.clone(), projects: limits.projects.clone(), ..Quotas::default() };
    let mut book = Book::new(&quotas);
    let mut order: Vec<&HeldJob> = held.iter().collect();
    order.sort_by_key(|h| (h.started_at, h.id));
    let mut borrowed = BTreeSet::new();
    for h in order {
        if book.admits_use(&h.user, &h.project, &h.usage) != Ok(false) {
            borrowed.insert(h.id);
        }
        book.started_use(&h.user, &h.project, &h.usage);
    }
    borrowed
}

/// Which limit `used + add` would break, as `gpu 8/8 in use` (what is in use now and the limit).
fn exceeds(l: &QuotaLimits, used: &QuotaUse, add: &QuotaUse) -> Option<String> {
    if let Some(max) = l.gpu_milli
        && add.gpu_milli > 0
        && used.gpu_milli + add.gpu_milli > max
    {
        return Some(format!("gpu {}/{} in use", format_gpu_milli(used.gpu_milli), format_gpu_milli(max)));
    }
    if let Some(max) = l.cpu_milli
        && used.cpu_milli + add.cpu_milli > max
    {
        let cores = |m: u64| format_gpu_milli(m); // same thousandths formatting: 1.5, 8
        return Some(format!("cpu {}/{} in use", cores(used.cpu_milli), cores(max)));
    }
    if let Some(max) = l.mem_bytes
        && used.mem_bytes + add.mem_bytes > max
    {
        return Some(format!("memory {}/{} in use", format_bytes(used.mem_bytes), format_bytes(max)));
    }
    if let Some(max) = l.running_jobs
        && used.running_jobs + 1 > max
    {
        return Some(format!("running jobs {}/{max}", used.running_jobs));
    }
    None
}

/// The limits a borrowing job must stay within: GPU and CPU limits raised by their borrowing.
fn with_borrowing(l: &QuotaLimits) -> QuotaLimits {
    QuotaLimits {
        gpu_milli: l.gpu_milli.map(|g| g + l.borrow_gpu_milli.unwrap_or(0)),
        cpu_milli: l.cpu_milli.map(|c| c + l.borrow_cpu_milli.unwrap_or(0)),
        ..*l
    }
}

/// Why a job could never start within `l`, whatever else runs (for a refusal at submit).
pub fn never_fits(l: &QuotaLimits, request: &ResourceRequest, kernels: u32) -> Option<String> {
    let need = QuotaUse::of(request, kernels);
    exceeds(&with_borrowing(l), &QuotaUse::default(), &need)
        .map(|why| why.replace(" in use", "").replace("0/", "needs more than "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::NumaPolicy;

    fn job(id: i64, cpu_milli: u64, mem_bytes: u64, gpu_milli: u64) -> PendingJob {
        let request = ResourceRequest { cpu_milli, mem_bytes, gpu_milli };
        PendingJob { numa: NumaPolicy::None, ..crate::test_support::pending(id, request) }
    }

    fn gpus(n: u64) -> QuotaLimits {
        QuotaLimits { gpu_milli: Some(n * 1000), ..Default::default() }
    }

    #[test]
    fn a_project_at_its_gpu_limit_admits_no_gpu_job_but_a_cpu_job() {
        let mut q = Quotas::default();
        q.projects.insert("vision".into(), gpus(2));
        q.used_by_project.insert("vision".into(), QuotaUse { gpu_milli: 1500, ..Default::default() });
        let mut book = Book::new(&q);
        let mut half = job(1, 1000, 1 << 30, 500);
        half.project = "vision".into();
        assert_eq!(book.admits(&half), Ok(false));
        book.started(&half);
        let mut more = half.clone();
        more.id = 2;
        assert_eq!(book.admits(&more).unwrap_err().to_string(), "quota: project vision gpu 2/2 in use");
        let mut cpu = job(3, 1000, 1 << 30, 0);
        cpu.project = "vision".into();
        assert_eq!(book.admits(&cpu), Ok(false), "a GPU limit does not hold back CPU-only jobs");
    }

    #[test]
    fn user_limits_count_kernels_and_jobs() {
        let mut q = Quotas::default();
        q.users.insert("u1".into(), QuotaLimits { cpu_milli: Some(4000), running_jobs: Some(2), ..Default::default() });
        let mut book = Book::new(&q);
        let mut wide = job(1, 3000, 1 << 30, 0);
        wide.user = "u1".into();
        wide.nodes = 2;
        assert_eq!(book.admits(&wide).unwrap_err().to_string(), "quota: user u1 cpu 0/4 in use", "3 CPUs × 2 kernels");
        let mut one = job(2, 1000, 1 << 30, 0);
        one.user = "u1".into();
        book.started(&one);
        book.started(&one);
        assert_eq!(book.admits(&one).unwrap_err().to_string(), "quota: user u1 running jobs 2/2");
    }

    #[test]
    fn borrowing_admits_beyond_the_quota_up_to_its_limit() {
        let mut q = Quotas::default();
        let l = QuotaLimits { gpu_milli: Some(1000), borrow_gpu_milli: Some(1000), ..Default::default() };
        q.projects.insert("vision".into(), l);
        let mut book = Book::new(&q);
        let mut one = job(1, 1000, 1 << 30, 1000);
        one.project = "vision".into();
        assert_eq!(book.admits(&one), Ok(false), "within the quota");
        book.started(&one);
        assert_eq!(book.admits(&one), Ok(true), "beyond the quota, within borrowing");
        book.started(&one);
        assert_eq!(book.admits(&one).unwrap_err().to_string(), "quota: project vision gpu 2/1 in use");
        let two = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 2000 };
        assert_eq!(never_fits(&l, &two, 1), None, "borrowing counts for what could ever fit");
    }

    #[test]
    fn never_fits_names_the_limit() {
        let r = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 4000 };
        assert_eq!(never_fits(&gpus(2), &r, 1).as_deref(), Some("gpu needs more than 2"));
        assert_eq!(never_fits(&gpus(8), &r, 2), None);
        assert!(never_fits(&gpus(7), &r, 2).is_some());
    }

    #[test]
    fn after_a_restart_the_jobs_started_last_past_the_quota_are_the_borrowed_ones() {
        let mut q = Quotas::default();
        let l = QuotaLimits { gpu_milli: Some(2000), borrow_gpu_milli: Some(2000), ..Default::default() };
        q.projects.insert("vision".into(), l);
        // Use in the input is ignored: the replay counts from nothing.
        q.used_by_project.insert("vision".into(), QuotaUse { gpu_milli: 9000, ..Default::default() });
        let held = |id, project: &str, started_at| HeldJob {
            id,
            user: "u".into(),
            project: project.into(),
            usage: QuotaUse { gpu_milli: 1000, running_jobs: 1, ..Default::default() },
            started_at,
        };
        let jobs = [
            held(4, "vision", 30),
            held(1, "vision", 10),
            held(3, "vision", 20),
            held(2, "vision", 20),
            held(9, "nlp", 0),
        ];
        assert_eq!(
            borrowed_by_start_order(&q, &jobs),
            BTreeSet::from([3, 4]),
            "1 and 2 fit the 2 GPUs, 3 and 4 borrow"
        );
        // Lowered below what runs: the jobs beyond even the borrowing count as borrowed too.
        q.projects.insert("vision".into(), QuotaLimits { gpu_milli: Some(1000), ..Default::default() });
        assert_eq!(borrowed_by_start_order(&q, &jobs), BTreeSet::from([2, 3, 4]));
        assert!(borrowed_by_start_order(&Quotas::default(), &jobs).is_empty(), "no quotas, nothing borrowed");
    }
}
