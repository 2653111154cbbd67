//! The quota table: every user's and project's limits (a snapshot the manager replaces when
//! an admin changes one), which of them apply to a job, and the borrowed mark a restart
//! recomputes from them. The checks at submit and the scheduler's input are in `quotas.rs`.

use std::collections::BTreeMap;

use berth_model::{JobSpec, QuotaKind, QuotaLimits};
use berth_sched::{QuotaUse, Quotas};

use crate::state::State;

/// Every quota, by kind and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaTable {
    pub users: BTreeMap<String, QuotaLimits>,
    pub projects: BTreeMap<String, QuotaLimits>,
}

impl QuotaTable {
    pub fn map(&self, kind: QuotaKind) -> &BTreeMap<String, QuotaLimits> {
        match kind {
            QuotaKind::User => &self.users,
            QuotaKind::Project => &self.projects,
        }
    }

    /// The limits that apply to a job of `user` accounted to `project`: (kind, name, limits).
    pub fn applying<'a>(
        &'a self,
        user: &'a str,
        project: &'a str,
    ) -> impl Iterator<Item = (QuotaKind, &'a str, &'a QuotaLimits)> {
        let u = self.users.get(user).map(|l| (QuotaKind::User, user, l));
        let p = self.projects.get(project).map(|l| (QuotaKind::Project, project, l));
        u.into_iter().chain(p)
    }

    pub fn limits_running(&self) -> bool {
        self.users.values().chain(self.projects.values()).any(QuotaLimits::limits_running)
    }

    /// The limits as the scheduler takes them, without any use counted yet.
    pub fn limits(&self) -> Quotas {
        Quotas { users: self.users.clone(), projects: self.projects.clone(), ..Default::default() }
    }

    /// Marks the jobs holding resources beyond their quota as borrowed after a restart (the
    /// mark lives in memory): counted in start order, the ones started last past a limit.
    pub fn restore_borrowed(&self, st: &mut State) {
        if !self.limits_running() {
            return;
        }
        let limits = self.limits();
        let held: Vec<berth_sched::HeldJob> = st
            .holding_jobs()
            .map(|j| berth_sched::HeldJob {
                id: j.id,
                user: j.owner.name.clone(),
                project: j.account().into_owned(),
                usage: QuotaUse::of(&j.spec.resources, j.spec.kernel_count()),
                started_at: j.attempt.started_at.map_or(i64::MAX, |t| t.as_millisecond()),
            })
            .collect();
        for id in berth_sched::borrowed_by_start_order(&limits, &held) {
            if let Some(j) = st.job_mut(id) {
                j.attempt.borrowed = true;
                st.sync_sets(id);
            }
        }
    }
}

/// The project a job of `user` with `spec` is accounted to.
pub fn project_of<'a>(user: &'a str, spec: &'a JobSpec) -> &'a str {
    spec.project.as_deref().unwrap_or(user)
}
