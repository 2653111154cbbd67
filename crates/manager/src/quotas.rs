//! Quotas in the manager: the table (`quota_table.rs`) loaded from the store and changed
//! through the API, the checks at submit (maximum priority, a request the quota could never
//! hold, the pending-jobs limit) and the scheduler's input (each limited user's and project's
//! current use).
//!
//! The pending-jobs limit is checked and the job inserted under the state lock, so concurrent
//! submits can never overshoot it; submits of users and projects without that limit keep the
//! lock-free path.

use std::sync::{Arc, RwLock};

use berth_store::Store;

use berth_model::api::JobView;
use berth_model::{JobSpec, JobState, QuotaKind, QuotaLimits, QuotaView};
use berth_sched::{QuotaUse, Quotas};

use crate::clock::Clock;
use crate::error::ApiError;
use crate::identity::User;
use crate::jobs::Jobs;
use crate::quota_table::{QuotaTable, project_of};
use crate::state::{Job, Owner, State};

/// The quota service: the table of limits per user and project (a snapshot, replaced on
/// change) and every check against it.
pub struct QuotaService {
    store: Arc<dyn Store>,
    table: RwLock<Arc<QuotaTable>>,
    /// The manager's clock (when a quota's row changed).
    clock: Clock,
}

impl QuotaService {
    pub fn new(store: Arc<dyn Store>, clock: Clock) -> QuotaService {
        QuotaService { store, table: RwLock::default(), clock }
    }

    /// The quotas now (cheap: a shared snapshot).
    pub fn table(&self) -> Arc<QuotaTable> {
        self.table.read().expect("quota lock").clone()
    }

    /// Loads the quotas from the store (at start).
    pub async fn load_quotas(&self) -> Result<(), berth_store::StoreError> {
        let mut t = QuotaTable::default();
        for (kind, name, l) in self.store.quotas().await? {
            match kind {
                QuotaKind::User => t.users.insert(name, l),
                QuotaKind::Project => t.projects.insert(name, l),
            };
        }
        *self.table.write().expect("quota lock") = Arc::new(t);
        Ok(())
    }

    /// Stores and applies a quota (`None` removes it); the next pass uses it (the caller
    /// wakes the scheduler).
    pub async fn set_quota(&self, kind: QuotaKind, name: &str, limits: Option<QuotaLimits>) -> Result<(), ApiError> {
        let limits = limits.filter(|l| !l.is_empty());
        self.store.set_quota(kind, name, limits.as_ref(), self.clock.now()).await.map_err(|e| match e {
            berth_store::StoreError::NotFound(_) => {
                ApiError::not_found(format!("no quota for {} `{name}`", kind.as_str()))
            }
            e => e.into(),
        })?;
        let mut t = (*self.table()).clone();
        let map = match kind {
            QuotaKind::User => &mut t.users,
            QuotaKind::Project => &mut t.projects,
        };
        match limits {
            Some(l) => map.insert(name.to_string(), l),
            None => map.remove(name),
        };
        *self.table.write().expect("quota lock") = Arc::new(t);
        Ok(())
    }

    /// The checks that need no state: the priority cap, and requests no quota could ever hold.
    pub fn check_quota_at_submit(&self, user: &User, spec: &JobSpec) -> Result<(), ApiError> {
        let table = self.table();
        for (kind, name, l) in table.applying(&user.name, project_of(&user.name, spec)) {
            let who = format!("{} {name}", kind.as_str());
            if let Some(max) = l.max_priority
                && spec.priority > max
            {
                // A qos's priority is the admin's, not a flag the user can lower.
                let fix = match &spec.qos {
                    Some(q) => format!("qos `{q}` gives it; use a qos whose priority is at most {max}, or none"),
                    None => format!("use --priority {max} or lower"),
                };
                return Err(ApiError::forbidden(format!(
                    "quota: priority {} is above the maximum {max} for {who}: {fix}",
                    spec.priority
                )));
            }
            if let Some(why) = berth_sched::never_fits(l, &spec.resources, spec.kernel_count()) {
                return Err(ApiError::unprocessable(format!(
                    "quota: the job could never start within the quota of {who} ({why}): ask for less, or ask an admin to raise it"
                )));
            }
        }
        Ok(())
    }

    /// Whether a job of `user` with `spec` falls under a pending-jobs limit (then it must be
    /// submitted through [`QuotaService::check_pending_quota`] under the state lock).
    pub fn pending_limited(&self, user: &str, spec: &JobSpec) -> bool {
        self.table().applying(user, project_of(user, spec)).any(|(_, _, l)| l.pending_jobs.is_some())
    }

    /// Submits `spec` for `owner`. Under a pending-jobs limit the count is checked and the job
    /// inserted under one state lock, so that concurrent submits cannot overshoot it; others
    /// take the lock-free path.
    pub async fn submit(
        &self,
        jobs: &Jobs,
        owner: Owner,
        spec: JobSpec,
        queue: String,
        key: Option<&str>,
        data_on: Vec<(String, u64)>,
    ) -> Result<JobView, ApiError> {
        let mut locked = None;
        if self.pending_limited(&owner.name, &spec) {
            let st = jobs.lock().await;
            self.check_pending_quota(&st, &owner.name, &spec)?;
            locked = Some(st);
        }
        Ok(jobs.submit(locked.as_deref_mut(), owner, spec, queue, key, data_on).await?)
    }

    /// Refuses `spec` if a submit of it by `user` would pass a pending-jobs limit now (a
    /// preview: nothing is held after the answer).
    pub async fn check_pending_now(&self, jobs: &Jobs, user: &str, spec: &JobSpec) -> Result<(), ApiError> {
        if self.pending_limited(user, spec) {
            self.check_pending_quota(&*jobs.lock().await, user, spec)?;
        }
        Ok(())
    }

    /// With the state lock held: refuses a submit that would pass a pending-jobs limit.
    fn check_pending_quota(&self, st: &State, user: &str, spec: &JobSpec) -> Result<(), ApiError> {
        let table = self.table();
        let project = project_of(user, spec);
        for (kind, name, l) in table.applying(user, project) {
            let Some(max) = l.pending_jobs else { continue };
            let waiting = st
                .pending_jobs()
                .filter(|j| match kind {
                    QuotaKind::User => j.owner.name == name,
                    QuotaKind::Project => j.project() == Some(name),
                })
                .count() as u32;
            if waiting >= max {
                return Err(ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "quota: {} {name} pending jobs {waiting}/{max}: wait for some to start or cancel some",
                        kind.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The scheduler's quota input: limits, and the use of jobs holding resources.
    pub fn pass_quotas(&self, st: &State) -> Quotas {
        let table = self.table();
        if !table.limits_running() {
            return Quotas::default();
        }
        let mut q = table.limits();
        for j in st.holding_jobs() {
            let add = QuotaUse::of(&j.spec.resources, j.spec.kernel_count());
            if table.users.contains_key(&j.owner.name) {
                q.used_by_user.entry(j.owner.name.clone()).or_default().add(&add);
            }
            if let Some(p) = j.project().filter(|p| table.projects.contains_key(*p)) {
                q.used_by_project.entry(p.to_string()).or_default().add(&add);
            }
        }
        q
    }

    /// Quotas with their current use (`GET /v1/quotas`); users see their own and their
    /// projects'.
    pub async fn quota_views(&self, jobs: &Jobs, user: &User) -> Vec<QuotaView> {
        let st = jobs.lock().await;
        let table = self.table();
        let mut out = Vec::new();
        for kind in [QuotaKind::User, QuotaKind::Project] {
            for (name, l) in table.map(kind) {
                let mine = match kind {
                    QuotaKind::User => *name == user.name,
                    QuotaKind::Project => user.member_of(name),
                };
                if !user.is_admin() && !mine {
                    continue;
                }
                let of = |j: &&Job| match kind {
                    QuotaKind::User => j.owner.name == *name,
                    QuotaKind::Project => j.project() == Some(name),
                };
                let mut used = QuotaUse::default();
                let mut pending = 0;
                for j in st.live_jobs().filter(of) {
                    if j.state.holds_resources() {
                        used.add(&QuotaUse::of(&j.spec.resources, j.spec.kernel_count()));
                    } else if j.state == JobState::Pending {
                        pending += 1;
                    }
                }
                out.push(QuotaView {
                    kind,
                    name: name.clone(),
                    limits: *l,
                    used_gpu_milli: used.gpu_milli,
                    used_cpu_milli: used.cpu_milli,
                    used_mem_bytes: used.mem_bytes,
                    running_jobs: used.running_jobs,
                    pending_jobs: pending,
                });
            }
        }
        out
    }
}
