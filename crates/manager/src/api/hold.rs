//! `POST /v1/jobs/{id}/hold` and `/release` (`berth hold`/`release`, Slurm's `scontrol
//! hold/uhold/release`): a pending job kept out of the scheduler until released
//! (`user_holds.rs`). Its owner or an admin may ask; only an admin releases an admin's hold.

use std::sync::Arc;

use axum::extract::State;
use berth_model::JobId;
use berth_model::api::{ErrorReason, HoldRequest, HoldResult};

use super::jobs::cancellable_row;
use crate::auth::Auth;
use crate::error::{ApiError, Json, Path};
use crate::identity::User;
use crate::manager::Manager;

/// Hold a pending job (a job array: with its pending tasks) until it is released.
#[utoipa::path(post, path = "/v1/jobs/{id}/hold", params(("id" = i64, Path, description = "job id")),
    request_body = HoldRequest, tag = "jobs",
    responses((status = 200, body = HoldResult), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, description = "not the job's owner, or an admin hold asked by a user", body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, description = "the job is not pending (reason `job_not_pending` or `job_ended`)", body = berth_model::api::ErrorBody),
        (status = 422, body = berth_model::api::ErrorBody)))]
pub async fn hold(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    Json(req): Json<HoldRequest>,
) -> Result<axum::Json<HoldResult>, ApiError> {
    match m.jobs.hold_for(&user, id, req.hold).await? {
        Some((hold, jobs)) => Ok(axum::Json(HoldResult { id, hold: Some(hold), jobs })),
        None => Err(gone(&m, &user, id).await),
    }
}

/// Release a held job (a job array: with its held tasks); a job not held is left as it is.
#[utoipa::path(post, path = "/v1/jobs/{id}/release", params(("id" = i64, Path, description = "job id")), tag = "jobs",
    responses((status = 200, body = HoldResult), (status = 403, description = "not the job's owner, or an admin's hold", body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, description = "the job is not pending (reason `job_not_pending` or `job_ended`)", body = berth_model::api::ErrorBody)))]
pub async fn release(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
) -> Result<axum::Json<HoldResult>, ApiError> {
    match m.jobs.release_for(&user, id).await? {
        Some(jobs) => Ok(axum::Json(HoldResult { id, hold: None, jobs })),
        None => Err(gone(&m, &user, id).await),
    }
}

/// The answer for a job not in memory: ended (or not `user`'s), or being submitted.
async fn gone(m: &Manager, user: &User, id: JobId) -> ApiError {
    match cancellable_row(m, user, id).await {
        Err(e) => e,
        Ok(row) if row.state.is_terminal() => {
            ApiError::conflict(format!("job {id} already finished ({})", row.state)).because(ErrorReason::JobEnded)
        }
        Ok(_) => ApiError::conflict(format!("job {id} is being submitted; try again")),
    }
}
