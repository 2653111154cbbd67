//! `berth exec`: a command inside a running kernel, its input and output streamed.
//!
//! `GET /v1/jobs/{id}/exec` upgrades to a WebSocket (the framing is `berth_model::stream`):
//! the client sends an `ExecRequest`, the manager asks the kernel's agent for a stream
//! (`OpenStream`), waits for the agent to dial `GET /v1/agents/streams/{stream}`, and splices
//! the two sockets until either side closes. Only the job's owner and admins may exec (the
//! command runs as the kernel's user); everyone else gets the 404 of a missing job.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use berth_model::JobId;
use berth_model::protocol::{STREAM_SECRET_HEADER, StreamOpen};
use berth_model::stream::ExecRequest;
use futures_util::StreamExt;

use super::kernel_stream::{OPEN_TIMEOUT, may_enter, open_stream, refuse, splice};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::manager::Manager;

/// `GET /v1/jobs/{id}/exec` (WebSocket).
pub async fn exec(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = may_enter(&m, &user, id).await {
        return e.into_response();
    }
    match ws {
        Ok(ws) => ws.on_upgrade(move |socket| serve(m, id, socket)),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
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

async fn serve(m: Arc<Manager>, id: JobId, mut client: WebSocket) {
    let req = match tokio::time::timeout(OPEN_TIMEOUT, client.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<ExecRequest>(t.as_str()).map_err(|e| e.to_string()),
        Ok(_) => Err("expected the exec request (JSON) as the first message".to_string()),
        Err(_) => Err(format!("no exec request within {}s", OPEN_TIMEOUT.as_secs())),
    };
    let agent = match req {
        Ok(req) if req.command.first().is_none_or(|c| c.is_empty()) => {
            Err("give a command to run: berth exec ID -- CMD [ARGS...]".to_string())
        }
        Ok(req) => {
            let open = StreamOpen::Exec { command: req.command, stdin: req.stdin };
            open_stream(&m, id, req.kernel, open).await
        }
        Err(e) => Err(format!("bad exec request: {e}")),
    };
    match agent {
        Ok(agent) => {
            let _attached = m.sessions.attach(id);
            splice(client, agent).await
        }
        Err(error) => refuse(client, error).await,
    }
}
