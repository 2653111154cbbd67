//! `berth port-forward`: one TCP connection into a kernel per WebSocket.
//!
//! `GET /v1/jobs/{id}/port-forward?port=P[&kernel=N]` upgrades, asks the kernel's agent to
//! connect to port `P` on the kernel's loopback (`StreamOpen::Forward`), and splices; the
//! framing is `berth_model::stream`'s (the agent's `OPENED`, then data). Only the job's owner
//! and admins may forward; everyone else gets the 404 of a missing job.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use berth_model::JobId;
use berth_model::protocol::{ForwardTarget, StreamOpen};
use serde::Deserialize;

use super::kernel_stream::{may_enter, refuse, splice};
use crate::auth::Auth;
use crate::error::{ApiError, Path};
use crate::manager::Manager;
use crate::streams::open_stream;

/// Which port of which kernel.
#[derive(Debug, Deserialize)]
pub struct ForwardQuery {
    pub port: u16,
    #[serde(default)]
    pub kernel: u32,
}

/// `GET /v1/jobs/{id}/port-forward` (WebSocket).
pub async fn forward(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    query: Result<Query<ForwardQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = may_enter(&m, &user, id).await {
        return e.into_response();
    }
    let q = match query {
        Ok(Query(q)) if q.port > 0 => q,
        Ok(_) => return ApiError::bad_request("port 0: give the port to forward to, 1 to 65535").into_response(),
        Err(e) => {
            let why = e.body_text();
            return ApiError::bad_request(format!("give ?port=P (1 to 65535) and optionally &kernel=N: {why}"))
                .into_response();
        }
    };
    match ws {
        Ok(ws) => {
            ws.read_buffer_size(berth_model::stream::READ_BUFFER).on_upgrade(move |socket| serve(m, id, q, socket))
        }
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

async fn serve(m: Arc<Manager>, id: JobId, q: ForwardQuery, client: WebSocket) {
    let open = StreamOpen::Forward { target: ForwardTarget::Port(q.port) };
    match open_stream(&m, id, q.kernel, open).await {
        Ok(agent) => {
            let _attached = m.sessions.attach(id);
            splice(client, agent).await
        }
        Err(error) => refuse(client, error).await,
    }
}
