//! `GET /v1/jobs/{id}/logs`: the manager asks the kernel's agent over its WebSocket
//! (`FetchLogs`, answered by `LogData` with the same `req_id`) and relays the bytes.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_model::JobId;
use berth_model::api::LogQuery;
use berth_model::protocol::{KernelKey, ManagerMessage};

use crate::auth::Auth;
use crate::error::{ApiError, Path, Query};
use crate::manager::Manager;

/// At most this much per call; clients follow `berth-next-offset`.
const MAX_BYTES: u64 = 1 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Raw log bytes of one kernel from `offset`.
#[utoipa::path(get, path = "/v1/jobs/{id}/logs", params(("id" = i64, Path, description = "job id"), LogQuery),
    tag = "jobs",
    responses((status = 200, description = "raw bytes; headers berth-next-offset, berth-job-done and berth-attempt",
        content_type = "application/octet-stream"),
        (status = 404, body = berth_model::api::ErrorBody), (status = 503, body = berth_model::api::ErrorBody),
        (status = 504, body = berth_model::api::ErrorBody)))]
pub async fn logs(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    crate::error::in_range("kernel", q.kernel.into(), 0, i32::MAX as u64)?;
    crate::error::in_range("offset", q.offset, 0, i64::MAX as u64)?;
    let row = crate::api::jobs::visible_job(&m, &user, id).await?;
    let done = row.state.is_terminal();
    let kernel =
        m.store.kernels(id).await?.into_iter().filter(|k| k.attempt == row.attempt).find(|k| k.index == q.kernel);
    let Some(kernel) = kernel else {
        if row.state == berth_model::JobState::Pending || (done && q.kernel == 0) {
            // Nothing ran (yet): no bytes.
            return Ok(answer(Vec::new(), 0, done, row.attempt));
        }
        return Err(ApiError::not_found(format!("job {id} has no kernel {}", q.kernel)));
    };
    let key = KernelKey { job_id: id, attempt: row.attempt, index: q.kernel };
    let req_id = m.hub.next_id();
    let rx = m.hub.expect_logs(req_id);
    let msg = ManagerMessage::FetchLogs { req_id, key, stream: q.stream, offset: q.offset, max_bytes: MAX_BYTES };
    let sent = m.nodes.send(&m.jobs, &kernel.node, msg).await;
    let forget = || m.hub.forget_logs(req_id);
    if !sent {
        forget();
        return Err(ApiError::unavailable(format!(
            "node {} is not connected, so the logs of job {id} cannot be read now; try again when its agent is back",
            kernel.node
        )));
    }
    match tokio::time::timeout(FETCH_TIMEOUT, rx).await {
        Ok(Ok(reply)) if reply.found => Ok(answer(reply.data, reply.next_offset, done, row.attempt)),
        Ok(Ok(_)) => {
            Err(ApiError::not_found(format!("node {} has no {} log for job {id}", kernel.node, q.stream.as_str())))
        }
        Ok(Err(_)) => Err(ApiError::unavailable(format!("node {} disconnected while sending logs", kernel.node))),
        Err(_) => {
            forget();
            Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!("node {} did not send the logs within {}s", kernel.node, FETCH_TIMEOUT.as_secs()),
            ))
        }
    }
}

/// The bytes with their headers; `attempt` tells a follower when a requeued job's log starts over.
fn answer(data: Vec<u8>, next_offset: u64, done: bool, attempt: u32) -> Response {
    let mut r = (StatusCode::OK, data).into_response();
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/octet-stream"));
    h.insert("berth-next-offset", HeaderValue::from(next_offset));
    h.insert("berth-job-done", HeaderValue::from_static(if done { "true" } else { "false" }));
    h.insert("berth-attempt", HeaderValue::from(attempt));
    r
}
