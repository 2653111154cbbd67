//! `berth exec`: a command inside a running kernel, its input and output streamed; `berth
//! attach`: a running kernel's own input and output (jobs of `berth run -i/-t`).
//!
//! `GET /v1/jobs/{id}/exec` upgrades to a WebSocket (the framing is `berth_model::stream`):
//! the client sends an `ExecRequest`, the manager asks the kernel's agent for a stream
//! (`OpenStream`), waits for the agent to dial `GET /v1/agents/streams/{stream}`, and splices
//! the two sockets until either side closes. Only the job's owner and admins may exec (the
//! command runs as the kernel's user); everyone else gets the 404 of a missing job.
//!
//! `GET /v1/jobs/{id}/attach` is the same with an `AttachRequest` and an `Attach` stream:
//! closing it detaches, and the job runs on. The same access (the job's input is the owner's).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use berth_model::protocol::{ManagerMessage, STREAM_SECRET_HEADER, StreamOpen};
use berth_model::stream::{AttachRequest, ExecRequest, StreamEnd, end_frame};
use berth_model::{JobId, JobState};
use futures_util::{SinkExt, StreamExt};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::manager::Manager;

/// How long the client may take to say what to run, and the agent to dial back.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

type Upgrade = Result<WebSocketUpgrade, WebSocketUpgradeRejection>;

/// `GET /v1/jobs/{id}/exec` (WebSocket).
pub async fn exec(State(m): State<Arc<Manager>>, Auth(user): Auth, Path(id): Path<JobId>, ws: Upgrade) -> Response {
    upgrade(m, &user, id, ws, exec_open).await
}

/// The stream an exec request opens, or why it cannot.
fn exec_open(req: ExecRequest) -> Result<(u32, StreamOpen), String> {
    if req.command.is_empty() || req.command[0].is_empty() {
        return Err("give a command to run: berth exec ID -- CMD [ARGS...]".into());
    }
    Ok((req.kernel, StreamOpen::Exec { command: req.command, stdin: req.stdin, tty: req.tty }))
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
    to_open: fn(R) -> Result<(u32, StreamOpen), String>,
) -> Response {
    // Someone who may not open a stream learns nothing, not even that the job exists.
    if let Err(r) = may_open(&m, user, id).await {
        return r;
    }
    match ws {
        Ok(ws) => ws.on_upgrade(move |socket| serve(m, id, socket, to_open)),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

/// Whether `user` may open streams into job `id` (its owner and admins); anyone else gets
/// the answer of a missing job.
async fn may_open(m: &Manager, user: &crate::identity::User, id: JobId) -> Result<(), Response> {
    match super::jobs::visible_job(m, user, id).await {
        Ok(row) if row.user_id == user.id || user.is_admin() => Ok(()),
        Ok(_) => Err(super::jobs::no_such_job(id).into_response()),
        Err(e) => Err(e.into_response()),
    }
}

/// `GET /v1/agents/streams/{stream}` (WebSocket): an agent dialling back a stream it was asked
/// for, with the join token and the stream's secret.
pub async fn agent_stream(
    State(m): State<Arc<Manager>>,
    headers: HeaderMap,
    Path(stream): Path<u64>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if !crate::auth::bearer_of(&headers).is_some_and(|t| m.tenancy.join_token_valid(t)) {
        return ApiError::unauthorized("invalid or missing join token").into_response();
    }
    let secret = headers.get(STREAM_SECRET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let Some(waiting) = m.streams.arrived(stream, secret) else {
        return ApiError::not_found(format!("no stream {stream} is waiting")).into_response();
    };
    match ws {
        Ok(ws) => ws.on_upgrade(move |socket| async move {
            let _ = waiting.send(socket);
        }),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

/// Reads the client's request (the first message, JSON), asks the kernel's agent for the
/// stream it names and splices the two; a request that cannot be served gets a
/// [`StreamEnd`] with the error.
async fn serve<R: serde::de::DeserializeOwned>(
    m: Arc<Manager>,
    id: JobId,
    mut client: WebSocket,
    to_open: fn(R) -> Result<(u32, StreamOpen), String>,
) {
    let req = match tokio::time::timeout(OPEN_TIMEOUT, client.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<R>(t.as_str()).map_err(|e| e.to_string()),
        Ok(_) => Err("expected the request (JSON) as the first message".to_string()),
        Err(_) => Err(format!("no request within {}s", OPEN_TIMEOUT.as_secs())),
    };
    let agent = match req.map_err(|e| format!("bad request: {e}")).and_then(to_open) {
        Ok((kernel, open_req)) => open(&m, id, kernel, open_req).await,
        Err(e) => Err(e),
    };
    match agent {
        Ok(agent) => splice(client, agent).await,
        Err(error) => {
            let end = StreamEnd { exit_code: None, error: Some(error) };
            let _ = client.send(Message::Binary(end_frame(&end).into())).await;
            let _ = client.close().await;
        }
    }
}

/// Asks the kernel's agent for a stream and waits for it.
async fn open(m: &Manager, id: JobId, kernel: u32, open: StreamOpen) -> Result<WebSocket, String> {
    let what = match open {
        StreamOpen::Exec { .. } => "exec",
        StreamOpen::Attach => "attach",
    };
    let mut awaited = m.streams.expect();
    let node = {
        let st = m.jobs.lock().await;
        let Some(job) = st.jobs.get(&id) else {
            return Err(format!("job {id} is not running"));
        };
        if job.state != JobState::Running {
            return Err(format!("job {id} is {}: {what} needs a running job", job.state));
        }
        let kernels = job.attempt.bindings.len() as u32;
        if kernel >= kernels {
            let last = kernels.saturating_sub(1);
            return Err(format!("job {id} has no kernel {kernel}: use --kernel 0 to {last}"));
        }
        if job.attempt.ends.get(kernel as usize).is_some_and(|e| e.is_some()) {
            return Err(format!("kernel {kernel} of job {id} has ended"));
        }
        let node = job.attempt.bindings[kernel as usize].node.clone();
        let msg = ManagerMessage::OpenStream {
            stream: awaited.id,
            secret: awaited.secret.clone(),
            key: job.key(kernel),
            open,
        };
        if !st.send(&node, msg) {
            return Err(format!("node {node} is not connected"));
        }
        node
    };
    match tokio::time::timeout(OPEN_TIMEOUT, &mut awaited.socket).await {
        Ok(Ok(socket)) => Ok(socket),
        _ => Err(format!("the agent on {node} did not open the stream within {}s", OPEN_TIMEOUT.as_secs())),
    }
}

/// Copies messages both ways until one side closes, then closes the other.
async fn splice(client: WebSocket, agent: WebSocket) {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut agent_tx, mut agent_rx) = agent.split();
    let up = async {
        while let Some(Ok(msg)) = client_rx.next().await {
            if matches!(msg, Message::Close(_)) || agent_tx.send(msg).await.is_err() {
                break;
            }
        }
        let _ = agent_tx.close().await;
    };
    let down = async {
        while let Some(Ok(msg)) = agent_rx.next().await {
            if matches!(msg, Message::Close(_)) || client_tx.send(msg).await.is_err() {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    // The kernel's side ending (the command exited) ends the stream; a client that goes away
    // closes the agent's side, which stops the command.
    tokio::select! {
        _ = down => {}
        _ = up => {}
    }
}
