//! `POST /v1/jobs/{id}/requeue` (`berth requeue`, Slurm's `scontrol requeue`): a running job
//! is stopped and put back in its queue as a new attempt, keeping its id, as a lost node's
//! `--requeue` job is. Its owner or an admin may ask, and so may the job itself with its step
//! token (a checkpointing script's `scontrol requeue $SLURM_JOB_ID`), for its own run only.

use std::sync::Arc;

use axum::extract::State;
use berth_model::api::{ErrorReason, RequeueResult};
use berth_model::{JobId, JobState};

use super::jobs::{cancellable_row, no_such_job};
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
    if m.jobs.requeue_for(&caller, id).await?.is_some() {
        return Ok(axum::Json(RequeueResult { id, state: JobState::Terminating }));
    }
    Err(match &caller {
        Caller::User(user) => {
            let row = cancellable_row(&m, user, id).await?;
            ApiError::conflict(format!("job {id} already finished ({}): submit it again", row.state))
                .because(ErrorReason::JobEnded)
        }
        Caller::Step { .. } => no_such_job(id),
    })
}
