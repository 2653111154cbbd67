//! `POST /v1/jobs/{id}/signal`: a signal sent now to a running job's processes (Slurm's
//! `scancel --signal`), without cancelling it. The manager picks the kernels (an array's id:
//! its running tasks) and sends each agent a `SignalKernel`; the agents deliver it
//! (`berth_agent::runtime::signal_now`) and log what they reached. Who may signal a job is
//! who may cancel it.

use std::sync::Arc;

use axum::extract::State;
use berth_model::api::{ErrorReason, SignalRequest, SignalResult, SignalledKernel};
use berth_model::protocol::{KernelKey, ManagerMessage};
use berth_model::signal::{parse_signal, signal_name};
use berth_model::{JobId, JobState};

use super::jobs::{cancellable_row, may_cancel, task_list};
use crate::auth::Auth;
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;
use crate::state::Job;

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
    let st = m.jobs.lock().await;
    let Some(job) = st.job(id) else {
        drop(st);
        let row = cancellable_row(&m, &user, id).await?;
        return Err(not_running(id, row.state));
    };
    may_cancel(&user, job)?;
    let jobs: Vec<&Job> = match (&job.spec.array, &job.spec.array_task) {
        (Some(_), None) => st
            .tasks_of(id)
            .filter(|j| tasks.as_ref().is_none_or(|w| w.contains(j.spec.array_task.as_ref().map_or(0, |t| t.index))))
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
            let Some(target) = body.target.for_kernel(&j.spec, index).filter(|_| !ended) else { continue };
            let key = KernelKey { job_id: j.id, attempt: a.number, index };
            if st.send(&binding.node, ManagerMessage::SignalKernel { key, signal, target }) {
                let task = j.spec.array_task.as_ref().map(|t| t.index);
                kernels.push(SignalledKernel { job: j.id, task, kernel: index, node: binding.node.clone(), target });
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
    Ok(axum::Json(SignalResult { id, signal: signal_name(signal), target: body.target, kernels }))
}

/// 409 for a job that runs no process to signal, saying why (`scancel` turns the reason
/// `job_pending` into Slurm's `Job is pending execution`).
fn not_running(id: JobId, state: JobState) -> ApiError {
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
