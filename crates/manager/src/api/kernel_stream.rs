//! The HTTP side of streams into kernels (`exec`, `attach`, `port-forward`): who may enter a
//! job's kernels, refusing a client's socket with the reason, and splicing a client's socket
//! to the agent's. Opening the agent's side is the streams service's (`crate::streams`).

use axum::extract::ws::{Message, WebSocket};
use berth_model::JobId;
use berth_model::stream::{self, StreamEnd};
use futures_util::{SinkExt, StreamExt};

use crate::manager::Manager;

/// Whether `user` may run commands in or connect to job `id`'s kernels: its owner and admins
/// (whatever runs there runs as the owner). Everyone else learns nothing, not even that the
/// job exists: the 404 of a missing job.
pub async fn may_enter(m: &Manager, user: &crate::identity::User, id: JobId) -> Result<(), crate::error::ApiError> {
    let row = super::jobs::visible_job(m, user, id).await?;
    if row.user_id == user.id || user.is_admin() { Ok(()) } else { Err(super::jobs::no_such_job(id)) }
}

/// Sends `error` as the stream's end and closes the client's socket.
pub async fn refuse(mut client: WebSocket, error: impl std::fmt::Display) {
    let end = StreamEnd { exit_code: None, error: Some(error.to_string()) };
    let _ = client.send(Message::Binary(stream::end_frame(&end).into())).await;
    let _ = client.close().await;
}

/// Copies messages both ways until one side closes, then closes the other.
pub async fn splice(client: WebSocket, agent: WebSocket) {
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
