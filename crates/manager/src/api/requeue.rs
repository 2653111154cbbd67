//! `POST /v1/jobs/{id}/requeue` (`berth requeue`, Slurm's `scontrol requeue`): a running job
//! is stopped and put back in its queue as a new attempt, keeping its id, as a lost node's
//! `--requeue` job is. Its owner or an admin may ask, and so may the job itself with its step
//! token (a checkpointing script's `scontrol requeue $SLURM_JOB_ID`), for its own run only.

use std::sync::Arc;

use axum::extract::State;
use berth_model::api::{ErrorReason, RequeueResult};
use berth_model::{JobId, JobState, StopCause};

use super::jobs::{cancellable_row, may_cancel, no_such_job};
use crate::auth::Caller;
use crate::error::{ApiError, Path};
use crate::manager::Manager;

/// Requeue a running job: stop it, then PENDING again as a new attempt.
#[utoipa::path(post, path = "/v1/jobs/{id}/requeue", params(("id" = i64, Path, description = "job id")), tag = "jobs",
    responses((status = 200, body = RequeueResult), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn requeue(
    State(m): State<Arc<Manager>>,
    caller: Caller,
    Path(id): Path<JobId>,
) -> Result<axum::Json<RequeueResult>, ApiError> {
    let mut st = m.jobs.lock().await;
    let Some(job) = st.job(id) else {
        drop(st);
        return Err(match &caller {
            Caller::User(user) => {
                let row = cancellable_row(&m, user, id).await?;
                ApiError::conflict(format!("job {id} already finished ({}): submit it again", row.state))
                    .because(ErrorReason::JobEnded)
            }
            Caller::Step { .. } => no_such_job(id),
        });
    };
    let by = match &caller {
        Caller::User(user) => {
            may_cancel(user, job)?;
            user.name.clone()
        }
        // A job's own step token requeues its own run, nothing else.
        Caller::Step { job: own, attempt } if *own == id && *attempt == job.attempt.number => job.owner.name.clone(),
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
    m.jobs.stop_running(&mut st, id, cause, format!("requeue requested by {by}")).await?;
    m.jobs.wake();
    Ok(axum::Json(RequeueResult { id, state: JobState::Terminating }))
}
