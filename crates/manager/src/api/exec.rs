//! `berth exec`: a command inside a running kernel, its input and output streamed; `berth
//! attach`: a running kernel's own input and output (jobs of `berth run -i/-t`).
//!
//! `GET /v1/jobs/{id}/exec` upgrades to a WebSocket (the framing is `berth_model::stream`):
//! the client sends an `ExecRequest`, the manager asks the kernel's agent for a stream
//! (`OpenStream`), waits for the agent to dial `GET /v1/agents/streams/{stream}`, and splices
//! the two sockets until either side closes (`crate::streams`, `kernel_stream`). Only the job's owner and admins
//! may exec (the command runs as the kernel's user); everyone else gets the 404 of a missing
//! job.
//!
//! `GET /v1/jobs/{id}/attach` is the same with an `AttachRequest` and an `Attach` stream:
//! closing it detaches, and the job runs on. The same access (the job's input is the owner's).
//! Either stream is a client attached to the job while it lasts (`sessions.rs`).

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use berth_model::protocol::{STREAM_SECRET_HEADER, StreamOpen};
use berth_model::stream::{AttachRequest, ExecRequest};
use berth_model::{JobId, JobState};
use futures_util::StreamExt;

use super::kernel_stream::{may_enter, refuse, splice};
use crate::auth::{Auth, Caller};
use crate::error::{ApiError, Path};
use crate::manager::Manager;
use crate::streams::{OPEN_TIMEOUT, START_WAIT, StreamError, open_stream};

type Upgrade = Result<WebSocketUpgrade, WebSocketUpgradeRejection>;

/// Why a client's stream is not served; the text is the stream's end.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("bad request: {0}")]
    Json(serde_json::Error),
    #[error("bad request: expected the request (JSON) as the first message")]
    NotJson,
    #[error("bad request: no request within {}s", OPEN_TIMEOUT.as_secs())]
    Timeout,
    /// The request's own check (`ExecRequest::validate`).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Stream(#[from] StreamError),
}

/// What a client's request asks for: a kernel and the stream to open into it.
type ToOpen<R> = fn(R) -> Result<(u32, StreamOpen), RequestError>;

/// `GET /v1/jobs/{id}/exec` (WebSocket): a user's, or `srun`'s inside the job with the job's
/// step token, which opens streams into that job's running attempt only.
pub async fn exec(State(m): State<Arc<Manager>>, caller: Caller, Path(id): Path<JobId>, ws: Upgrade) -> Response {
    match caller {
        Caller::User(user) => upgrade(m, &user, id, ws, exec_open).await,
        Caller::Step { job, attempt } => {
            if let Err(e) = step_may_enter(&m, job, attempt, id).await {
                return e.into_response();
            }
            upgrade_checked(m, id, ws, exec_open)
        }
    }
}

/// Whether a step token of `job`'s attempt `attempt` may open a stream into job `id`: only
/// its own job (another's answers as missing), and only while that attempt holds its nodes.
///
/// A step token is used from inside the job, so the job's script already runs on its node;
/// the manager may not have heard so yet (the job still SCHEDULED or PREPARING here), so
/// this waits for RUNNING instead of refusing `srun` for a race the script cannot see.
async fn step_may_enter(m: &Manager, job: JobId, attempt: u32, id: JobId) -> Result<(), ApiError> {
    if job != id {
        return Err(super::jobs::no_such_job(id));
    }
    let deadline = tokio::time::Instant::now() + START_WAIT;
    loop {
        match m.jobs.attempt_state(id, attempt).await {
            Some(JobState::Scheduled | JobState::Preparing) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Some(s) if s.holds_resources() => return Ok(()),
            _ => {
                return Err(ApiError::unauthorized(format!(
                    "the step token of job {id} is no longer valid: that run of the job has ended"
                )));
            }
        }
    }
}

/// The stream an exec request opens, or why it cannot.
fn exec_open(req: ExecRequest) -> Result<(u32, StreamOpen), RequestError> {
    req.validate().map_err(RequestError::Invalid)?;
    Ok((
        req.kernel,
        StreamOpen::Exec { command: req.command, stdin: req.stdin, tty: req.tty, env: req.env, gpus: req.gpus },
    ))
}

/// `GET /v1/jobs/{id}/attach` (WebSocket).
pub async fn attach(State(m): State<Arc<Manager>>, Auth(user): Auth, Path(id): Path<JobId>, ws: Upgrade) -> Response {
    upgrade(m, &user, id, ws, |req: AttachRequest| Ok((req.kernel, StreamOpen::Attach))).await
}

/// Checks that `user` may open streams into job `id`, then upgrades and [`serve`]s.
async fn upgrade<R: serde::de::DeserializeOwned + Send + 'static>(
    m: Arc<Manager>,
    user: &crate::identity::User,
    id: JobId,
    ws: Upgrade,
    to_open: ToOpen<R>,
) -> Response {
    if let Err(e) = may_enter(&m, user, id).await {
        return e.into_response();
    }
    upgrade_checked(m, id, ws, to_open)
}

/// Upgrades and [`serve`]s, the caller's access checked.
fn upgrade_checked<R: serde::de::DeserializeOwned + Send + 'static>(
    m: Arc<Manager>,
    id: JobId,
    ws: Upgrade,
    to_open: ToOpen<R>,
) -> Response {
    match ws {
        Ok(ws) => ws
            .read_buffer_size(berth_model::stream::READ_BUFFER)
            .on_upgrade(move |socket| serve(m, id, socket, to_open)),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

/// `GET /v1/agents/streams/{stream}` (WebSocket): an agent dialling back a stream it was asked
/// for, with the join token and the stream's secret.
pub async fn agent_stream(
    State(m): State<Arc<Manager>>,
    headers: HeaderMap,
    Path(stream): Path<u64>,
    ws: Upgrade,
) -> Response {
    if !crate::auth::bearer_of(&headers).is_some_and(|t| m.tenancy.join_token_valid(t)) {
        return ApiError::unauthorized("invalid or missing join token").into_response();
    }
    let secret = headers.get(STREAM_SECRET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let Some(waiting) = m.streams.arrived(stream, secret) else {
        return ApiError::not_found(format!("no stream {stream} is waiting")).into_response();
    };
    match ws {
        Ok(ws) => ws.read_buffer_size(berth_model::stream::READ_BUFFER).on_upgrade(move |socket| async move {
            let _ = waiting.send(socket);
        }),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

/// Reads the client's request (the first message, JSON), asks the kernel's agent for the
/// stream it names and splices the two; a request that cannot be served gets a
/// `StreamEnd` with the error.
async fn serve<R: serde::de::DeserializeOwned>(m: Arc<Manager>, id: JobId, mut client: WebSocket, to_open: ToOpen<R>) {
    let req = match tokio::time::timeout(OPEN_TIMEOUT, client.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<R>(t.as_str()).map_err(RequestError::Json),
        Ok(_) => Err(RequestError::NotJson),
        Err(_) => Err(RequestError::Timeout),
    };
    let agent = match req.and_then(to_open) {
        Ok((kernel, open)) => open_stream(&m, id, kernel, open).await.map_err(RequestError::from),
        Err(e) => Err(e),
    };
    match agent {
        Ok(agent) => {
            let _attached = m.sessions.attach(id);
            splice(client, agent).await
        }
        Err(error) => refuse(client, error).await,
    }
}
