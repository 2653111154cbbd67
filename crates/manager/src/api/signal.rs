//! `POST /v1/jobs/{id}/signal`: a signal sent now to a running job's processes (Slurm's
//! `scancel --signal`), without cancelling it. The manager picks the kernels (an array's id:
//! its running tasks) and sends each agent a `SignalKernel`; the agents deliver it
//! (`berth_agent::runtime::signal_now`) and log what they reached. Who may signal a job is
//! who may cancel it.

use std::sync::Arc;

use axum::extract::State;
use berth_model::JobId;
use berth_model::api::{ErrorReason, SignalRequest, SignalResult};
use berth_model::signal::{parse_signal, signal_name};

use super::jobs::{cancellable_row, task_list};
use crate::auth::Auth;
use crate::error::{ApiError, Json, Path};
use crate::job_requests::not_running;
use crate::manager::Manager;

/// Send a signal to a running job's steps, batch shell or both (Slurm's `scancel --signal`).
#[utoipa::path(post, path = "/v1/jobs/{id}/signal", params(("id" = i64, Path, description = "job id")),
    request_body = SignalRequest, tag = "jobs",
    responses((status = 200, body = SignalResult), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody),
        (status = 503, body = berth_model::api::ErrorBody)))]
pub async fn signal(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    Json(body): Json<SignalRequest>,
) -> Result<axum::Json<SignalResult>, ApiError> {
    let signal = parse_signal(&body.signal)
        .map_err(|e| ApiError::unprocessable(format!("signal: {}", e.0)).because(ErrorReason::BadSignal))?;
    let tasks = body.tasks.as_deref().map(task_list).transpose()?;
    let Some(kernels) = m.jobs.signal_for(&user, id, signal, body.target, tasks).await? else {
        let row = cancellable_row(&m, &user, id).await?;
        return Err(not_running(id, row.state));
    };
    Ok(axum::Json(SignalResult { id, signal: signal_name(signal), target: body.target, kernels }))
}
