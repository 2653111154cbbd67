//! The jobs service's answers to one caller's request about jobs in memory: list them, show
//! one's live part, cancel, signal, requeue, and wait for a step's run. Each checks who may
//! ask and acts under one state lock, so `api/` only parses, calls and answers.
//!
//! A job no longer in memory (ended and let go, or never there) answers `Ok(None)`: the
//! handler then reads its stored row for the answer (`api::jobs::cancellable_row`), without
//! the lock, since an ended job no longer changes.

use berth_model::api::{Deadline, ErrorReason, JobView, SignalledKernel, TaskCancelled};
use berth_model::protocol::{KernelKey, ManagerMessage};
use berth_model::signal::SignalTarget;
use berth_model::{ArraySpec, JobId, JobState, StopCause};
use berth_store::JobFilter;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::identity::User;
use crate::jobs::Jobs;
use crate::state::Job;

impl Jobs {
    /// The jobs in memory (every unfinished one, and ended ones not yet let go) that `filter`
    /// and `user` let through, newest first, at most `limit`; `deadline` says when a running
    /// one will be stopped.
    pub async fn live_views(
        &self,
        user: &User,
        filter: &JobFilter,
        limit: usize,
        deadline: impl Fn(&Job) -> Option<Deadline>,
    ) -> Vec<JobView> {
        let st = self.lock().await;
        st.live_jobs_newest_first(filter.before)
            .filter(|j| user.can_see(j.owner.user_id, &j.spec))
            .filter(|j| filter.states.as_ref().is_none_or(|s| s.contains(&j.state)))
            .filter(|j| filter.ids.as_ref().is_none_or(|ids| ids.contains(&j.id)))
            .filter(|j| filter.array_id.is_none_or(|a| j.spec.array_task.is_some_and(|t| t.array_id == a)))
            .filter(|j| filter.until.is_none_or(|t| j.submitted_at < t))
            .filter(|j| filter.owner.as_ref().is_none_or(|u| *u == j.owner.name))
            .filter(|j| filter.queue.as_ref().is_none_or(|q| *q == j.queue))
            .filter(|j| {
                filter.name_contains.as_deref().is_none_or(|n| j.spec.name.as_deref().is_some_and(|x| x.contains(n)))
            })
            .take(limit)
            .map(|j| {
                let mut v = st.job_view(j);
                if v.deadline.is_some() || j.spec.is_session() {
                    v.deadline = deadline(j);
                }
                v
            })
            .collect()
    }

    /// Adds to `job` (a stored row's view) what only memory knows of it while unfinished:
    /// its expected run time; pending, its place, reason and an array's tasks still to make;
    /// holding resources, its use so far, its deadline and its setup.
    pub async fn add_live(&self, job: &mut JobView, deadline: impl Fn(&Job) -> Option<Deadline>) {
        let st = self.lock().await;
        let Some(j) = st.job(job.id) else { return };
        // Predicted, never stored.
        job.expected_run_secs = j.expected_run_secs();
        if j.state == JobState::Pending {
            // A job deep in the queue has its place in the last pass's untried rest.
            let live = st.job_view(j);
            job.position = live.position;
            job.pending_reason = live.pending_reason;
            job.expected_start = live.expected_start;
            // An array's tasks still to make (`[4-5%1]`), as its row in a listing shows them.
            job.array = live.array;
        } else if j.state.holds_resources() {
            job.usage = st.meters().job(j.id, j.attempt.number).or(job.usage);
            job.deadline = deadline(j);
            // A preparing job: how far its setup is (as its agent reported).
            job.setup = j.attempt.setup.clone().filter(|_| j.state == JobState::Preparing);
        }
    }

    /// The state of job `id` if its current attempt is `attempt`.
    pub async fn attempt_state(&self, id: JobId, attempt: u32) -> Option<JobState> {
        let st = self.lock().await;
        st.job(id).filter(|j| j.attempt.number == attempt).map(|j| j.state)
    }

    /// Cancels job `id` for `user`: its state after, or `None` when it is not in memory.
    pub async fn cancel_for(&self, user: &User, id: JobId) -> Result<Option<JobState>, ApiError> {
        let mut st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        may_cancel(user, job)?;
        Ok(Some(self.cancel(&mut st, id, &user.name).await?.state()))
    }

    /// Cancels tasks `wanted` of job array `id` for `user` (`arrays::cancel_tasks`), or
    /// `None` when the array is not in memory.
    pub async fn cancel_tasks_for(
        &self,
        user: &User,
        id: JobId,
        wanted: &ArraySpec,
    ) -> Result<Option<Vec<TaskCancelled>>, ApiError> {
        let mut st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        may_cancel(user, job)?;
        let Some(array) = &job.spec.array else {
            return Err(ApiError::unprocessable(format!("job {id} is not a job array")));
        };
        if let Some(e) = task_outside(id, wanted, array) {
            return Err(e);
        }
        let indices: Vec<u32> = wanted.indices().collect();
        Ok(Some(crate::arrays::cancel_tasks(self, &mut st, id, &indices, &user.name).await?))
    }

    /// Sends `signal` to job `id`'s running kernels (an array's: its running tasks, or those
    /// of `tasks`) for `user`: the kernels reached, or `None` when the job is not in memory.
    pub async fn signal_for(
        &self,
        user: &User,
        id: JobId,
        signal: u8,
        target: SignalTarget,
        tasks: Option<ArraySpec>,
    ) -> Result<Option<Vec<SignalledKernel>>, ApiError> {
        let st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        may_cancel(user, job)?;
        let jobs: Vec<&Job> = match (&job.spec.array, &job.spec.array_task) {
            (Some(_), None) => st
                .tasks_of(id)
                .filter(|j| {
                    tasks.as_ref().is_none_or(|w| w.contains(j.spec.array_task.as_ref().map_or(0, |t| t.index)))
                })
                .collect(),
            _ if tasks.is_some() => return Err(ApiError::unprocessable(format!("job {id} is not a job array"))),
            _ => vec![job],
        };
        let running: Vec<&Job> = jobs.iter().copied().filter(|j| j.state == JobState::Running).collect();
        if running.is_empty() {
            let state = if jobs.len() == 1 { jobs[0].state } else { job.state };
            return Err(match jobs.is_empty() && job.spec.array.is_some() {
                true => ApiError::conflict(format!("job array {id} has no running task to signal")),
                false if job.spec.array.is_some() => ApiError::conflict(format!(
                    "no task of job array {id} is running (the array is {state}): only running jobs can be signalled"
                )),
                false => not_running(id, state),
            });
        }
        let mut kernels = Vec::new();
        let mut unreachable = Vec::new();
        for j in running {
            let a = &j.attempt;
            for (index, binding) in a.bindings.iter().enumerate() {
                let index = index as u32;
                let ended = a.ends.get(index as usize).is_some_and(Option::is_some);
                let Some(target) = target.for_kernel(&j.spec, index).filter(|_| !ended) else { continue };
                let key = KernelKey { job_id: j.id, attempt: a.number, index };
                if st.send(&binding.node, ManagerMessage::SignalKernel { key, signal, target }) {
                    let task = j.spec.array_task.as_ref().map(|t| t.index);
                    kernels.push(SignalledKernel {
                        job: j.id,
                        task,
                        kernel: index,
                        node: binding.node.clone(),
                        target,
                    });
                } else {
                    unreachable.push(binding.node.clone());
                }
            }
        }
        if kernels.is_empty() && !unreachable.is_empty() {
            return Err(ApiError::unavailable(format!(
                "node {} is not connected, so job {id} cannot be signalled now; try again when its agent is back",
                unreachable.join(", ")
            )));
        }
        Ok(Some(kernels))
    }

    /// Stops running job `id` and puts it back in its queue as a new attempt, for `caller`
    /// (its owner, an admin, or the job's own step token for its own run); `None` when it is
    /// not in memory.
    pub async fn requeue_for(&self, caller: &Caller, id: JobId) -> Result<Option<()>, ApiError> {
        let mut st = self.lock().await;
        let Some(job) = st.job(id) else { return Ok(None) };
        let by = match caller {
            Caller::User(user) => {
                may_cancel(user, job)?;
                user.name.clone()
            }
            // A job's own step token requeues its own run, nothing else.
            Caller::Step { job: own, attempt } if *own == id && *attempt == job.attempt.number => {
                job.owner.name.clone()
            }
            Caller::Step { job: own, .. } if *own == id => {
                return Err(ApiError::unauthorized(format!(
                    "the step token of job {id} is no longer valid: that run of the job has ended"
                )));
            }
            Caller::Step { .. } => return Err(no_such_job(id)),
        };
        match job.state {
            JobState::Scheduled | JobState::Preparing | JobState::Running => {}
            JobState::Pending => {
                return Err(ApiError::conflict(format!("job {id} is pending: it is in its queue already"))
                    .because(ErrorReason::JobPending));
            }
            JobState::Terminating => {
                return Err(ApiError::conflict(format!("job {id} is stopping already: wait for it to end or requeue")));
            }
            s => {
                return Err(ApiError::conflict(format!("job {id} already finished ({s}): submit it again"))
                    .because(ErrorReason::JobEnded));
            }
        }
        let cause = StopCause::Requeued { by: by.clone() };
        self.stop_running(&mut st, id, cause, format!("requeue requested by {by}")).await?;
        self.wake();
        Ok(Some(()))
    }

    /// Cancels the replicas of serving endpoint `endpoint_id` (it was removed), on behalf of
    /// `by`.
    pub async fn cancel_replicas(&self, endpoint_id: i64, by: &str) {
        let mut st = self.lock().await;
        let replicas: Vec<JobId> = st.replicas_of(endpoint_id).map(|j| j.id).collect();
        for id in replicas {
            if let Err(e) = self.cancel(&mut st, id, by).await {
                tracing::debug!(job = id, "cannot stop a removed endpoint's replica: {e}");
            }
        }
    }

    /// Runs `remove` with the unfinished jobs that mount folder `folder_id`, under the state
    /// lock, so that no job mounting it is accepted meanwhile. Jobs resolve folders before
    /// they take the lock, so one racing submit may still name it; its kernels then fail to
    /// start with "folder ... is not on node".
    pub async fn while_mounted_by<T>(&self, folder_id: i64, remove: impl AsyncFnOnce(&[JobId]) -> T) -> T {
        let st = self.lock().await;
        let in_use: Vec<JobId> = st
            .live_jobs()
            .filter(|j| !j.state.is_terminal() && j.spec.folders.iter().any(|x| x.id == Some(folder_id)))
            .map(|j| j.id)
            .collect();
        let out = remove(&in_use).await;
        drop(st);
        out
    }
}

/// The first task of `wanted` outside `array` (job `id`), as the refusal to cancel it.
pub fn task_outside(id: JobId, wanted: &ArraySpec, array: &ArraySpec) -> Option<ApiError> {
    let i = wanted.indices().find(|i| !array.contains(*i))?;
    Some(ApiError::unprocessable(format!("task {id}_{i} is not in job array {id} ({array})")))
}

/// Whether `user` may cancel `job`, which is in memory: one they cannot see is missing (404),
/// one they see but do not own is refused (403) unless they are an admin.
pub fn may_cancel(user: &User, job: &Job) -> Result<(), ApiError> {
    if !user.can_see(job.owner.user_id, &job.spec) {
        return Err(no_such_job(job.id));
    }
    if !user.is_admin() && job.owner.user_id != user.id {
        return Err(not_yours(job.id, &job.owner.name));
    }
    Ok(())
}

/// The answer for a job that does not exist or that `user` may not see: the same, so ids
/// of other users' jobs reveal nothing.
pub fn no_such_job(id: JobId) -> ApiError {
    ApiError::not_found(format!("job {id} not found"))
}

/// A shared job of one's project: visible, but only its owner or an admin may cancel it.
pub fn not_yours(id: JobId, owner: &str) -> ApiError {
    ApiError::forbidden(format!("job {id} belongs to {owner}; only its owner or an admin can cancel it"))
}

/// 409 for a job that runs no process to signal, saying why (`scancel` turns the reason
/// `job_pending` into Slurm's `Job is pending execution`).
pub fn not_running(id: JobId, state: JobState) -> ApiError {
    match state {
        s if s.is_terminal() => {
            ApiError::conflict(format!("job {id} already finished ({s})")).because(ErrorReason::JobEnded)
        }
        JobState::Pending => {
            ApiError::conflict(format!("job {id} is pending: only a running job can be signalled; cancel it instead"))
                .because(ErrorReason::JobPending)
        }
        s => ApiError::conflict(format!(
            "job {id} is not running ({s}): only a running job can be signalled; try again once it runs"
        )),
    }
}
