//! `berth attach` (and `berth run -i/-t`): a client connected to a running kernel's own input
//! and output.
//!
//! `GET /v1/jobs/{id}/attach` upgrades to a WebSocket framed as `berth_model::stream`: the
//! client sends an `AttachRequest`, the manager asks the kernel's agent for an `Attach` stream
//! and splices the two, as for `exec` (`exec::serve`). Closing it detaches; the job runs on.
//! Only the job's owner and admins may attach (its input is the owner's); everyone else gets
//! the 404 of a missing job.

use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use berth_model::JobId;
use berth_model::protocol::StreamOpen;
use berth_model::stream::AttachRequest;

use crate::auth::Auth;
use crate::error::ApiError;
use crate::manager::Manager;

/// `GET /v1/jobs/{id}/attach` (WebSocket).
pub async fn attach(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(r) = super::exec::may_open(&m, &user, id).await {
        return r;
    }
    match ws {
        Ok(ws) => ws.on_upgrade(move |socket| super::exec::serve(m, id, socket, attach_open)),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

fn attach_open(req: AttachRequest) -> Result<(u32, StreamOpen), String> {
    Ok((req.kernel, StreamOpen::Attach))
}
