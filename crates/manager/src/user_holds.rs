//! Holds by people (Slurm's `scontrol hold/uhold/release`, `sbatch --hold`; `berth hold`,
//! `berth release`): a pending job kept out of the scheduler until released, as the jobs
//! service's intent-level methods.
//!
//! A hold is stored with the job (`Change::Hold`, so it survives a restart) and kept in
//! `Waiting::hold`; the job joins the state's held jobs, which the scheduler never sees, and
//! each pass gives it the reason `JobHeldUser`/`JobHeldAdmin` (`holds.rs`). Its owner holds
//! with a user hold; an admin holds with an admin hold by default (or a user hold, Slurm's
//! `uhold`), which only an admin releases. Holding a job array holds the array (it makes no
//! tasks) and its pending tasks; releasing it releases them.

use berth_model::api::ErrorReason;
use berth_model::{Hold, JobId, JobState};
use berth_store::Change;

use crate::error::ApiError;
use crate::identity::User;
use crate::job_requests::no_such_job;
use crate::jobs::Jobs;
use crate::state::{Job, State};

impl Jobs {
    /// Holds pending job `id` (and, for a job array, its pending tasks) for `user`: with
    /// `hold`, or by default a user's hold for users and an admin's for admins. The jobs whose
    /// hold changed, or `None` when the job is not in memory.
    pub async fn hold_for(
        &self,
        user: &User,
        id: JobId,
        hold: Option<Hold>,
    ) -> Result<Option<(Hold, Vec<JobId>)>, ApiError> {
        let hold = hold.unwrap_or(if user.is_admin() { Hold::Admin } else { Hold::User });
        if hold == Hold::Admin && !user.is_admin() {
            return Err(ApiError::forbidden(format!(
                "only an admin can put an admin hold on job {id}: hold it with a user hold (`scontrol uhold {id}`)"
            )));
        }
        let mut st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        may_hold(user, job, "hold")?;
        pending(job)?;
        let targets = with_pending_tasks(&st, id);
        // An admin's hold is never weakened by a user (an admin may make it a user hold: `uhold`).
        let changed: Vec<JobId> = targets
            .into_iter()
            .filter(|t| {
                st.job(*t).is_some_and(|j| {
                    j.waiting.hold != Some(hold) && (j.waiting.hold != Some(Hold::Admin) || user.is_admin())
                })
            })
            .collect();
        self.set_holds(&mut st, &changed, Some(hold)).await?;
        Ok(Some((hold, changed)))
    }

    /// Releases held job `id` (and, for a job array, its held tasks) for `user`: the jobs
    /// released, or `None` when the job is not in memory. A job not held is left as it is.
    pub async fn release_for(&self, user: &User, id: JobId) -> Result<Option<Vec<JobId>>, ApiError> {
        let mut st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        may_hold(user, job, "release")?;
        pending(job)?;
        if job.waiting.hold == Some(Hold::Admin) && !user.is_admin() {
            return Err(ApiError::forbidden(format!("job {id} was held by an admin: only an admin can release it")));
        }
        let changed: Vec<JobId> = with_pending_tasks(&st, id)
            .into_iter()
            .filter(|t| {
                st.job(*t).is_some_and(|j| match j.waiting.hold {
                    Some(Hold::Admin) => user.is_admin(),
                    Some(Hold::User) => true,
                    None => false,
                })
            })
            .collect();
        self.set_holds(&mut st, &changed, None).await?;
        Ok(Some(changed))
    }

    /// Stores `hold` for `ids` (pending, in memory), then sets it in memory: held ones leave
    /// the scheduler's set at once; released ones join it at the next pass (`holds.rs`), which
    /// this wakes.
    async fn set_holds(&self, st: &mut State, ids: &[JobId], hold: Option<Hold>) -> Result<(), ApiError> {
        if ids.is_empty() {
            return Ok(());
        }
        let changes = ids.iter().map(|&job_id| Change::Hold { job_id, hold }).collect();
        self.write(st, changes).await?;
        for &id in ids {
            if let Some(j) = st.job_mut(id) {
                j.waiting.hold = hold;
                if hold.is_some() {
                    j.waiting.position = None;
                }
            }
            if hold.is_some() {
                st.hold_back(id);
            }
        }
        self.wake();
        Ok(())
    }
}

/// Who may hold or release `job`: its owner or an admin; one the user cannot see is missing.
fn may_hold(user: &User, job: &Job, what: &str) -> Result<(), ApiError> {
    if !user.can_see(job.owner.user_id, &job.spec) {
        return Err(no_such_job(job.id));
    }
    if !user.is_admin() && job.owner.user_id != user.id {
        return Err(ApiError::forbidden(format!(
            "job {} belongs to {}; only its owner or an admin can {what} it",
            job.id, job.owner.name
        )));
    }
    Ok(())
}

/// Only a pending job is held or released (Slurm: "Job is no longer pending execution").
fn pending(job: &Job) -> Result<(), ApiError> {
    match job.state {
        JobState::Pending => Ok(()),
        s if s.is_terminal() => {
            Err(ApiError::conflict(format!("job {} already finished ({s})", job.id)).because(ErrorReason::JobEnded))
        }
        s => Err(ApiError::conflict(format!(
            "job {} is no longer pending ({s}): only a pending job can be held or released",
            job.id
        ))
        .because(ErrorReason::JobNotPending)),
    }
}

/// `id` and, when it is a job array, its tasks in memory that are pending.
fn with_pending_tasks(st: &State, id: JobId) -> Vec<JobId> {
    let mut ids = vec![id];
    if st.job(id).is_some_and(|j| j.spec.array.is_some() && j.spec.array_task.is_none()) {
        ids.extend(st.tasks_of(id).filter(|t| t.state == JobState::Pending).map(|t| t.id));
    }
    ids
}
