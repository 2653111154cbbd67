//! What every stream into a kernel shares (`exec`, `port-forward`, the app proxy): asking the
//! kernel's agent to dial a stream back and waiting for it, splicing a client's socket to it,
//! and a forwarded connection as a byte stream the manager itself can speak HTTP over.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use berth_model::protocol::{ManagerMessage, StreamOpen};
use berth_model::stream::{self, CONTROL, ForwardOpened, MAX_CHUNK, OPENED, STDIN, STDIN_EOF, STDOUT, StreamEnd};
use berth_model::{JobId, JobState};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::manager::Manager;

/// How long the agent may take to dial a stream back.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `user` may run commands in or connect to job `id`'s kernels: its owner and admins
/// (whatever runs there runs as the owner). Everyone else learns nothing, not even that the
/// job exists: the 404 of a missing job.
pub async fn may_enter(m: &Manager, user: &crate::identity::User, id: JobId) -> Result<(), crate::error::ApiError> {
    let row = super::jobs::visible_job(m, user, id).await?;
    if row.user_id == user.id || user.is_admin() { Ok(()) } else { Err(super::jobs::no_such_job(id)) }
}

/// Asks the agent of kernel `kernel` of running job `id` for a stream serving `open`, and
/// waits for it. The error says why not, for the user.
pub async fn open_stream(m: &Manager, id: JobId, kernel: u32, open: StreamOpen) -> Result<WebSocket, String> {
    let what = match open {
        StreamOpen::Exec { .. } => "exec",
        StreamOpen::Attach => "attach",
        StreamOpen::Forward { .. } => "a forward",
    };
    wait_started(m, id, kernel).await?;
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

/// How long a stream waits for its kernel to start in a running job: a job runs once one of
/// its kernels does, and the others may still be set up (an environment built, an image
/// pulled); `srun` in a batch script's first kernel opens streams into all of them at once.
pub const START_WAIT: Duration = Duration::from_secs(15 * 60);

/// Waits while kernel `kernel` of running job `id` has not started yet.
async fn wait_started(m: &Manager, id: JobId, kernel: u32) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + START_WAIT;
    loop {
        let waiting = {
            let st = m.jobs.lock().await;
            st.jobs.get(&id).is_some_and(|j| j.state == JobState::Running && j.attempt.unstarted.contains(&kernel))
        };
        if !waiting {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "kernel {kernel} of job {id} has not started within {} min",
                START_WAIT.as_secs() / 60
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `error` as the stream's end and closes the client's socket.
pub async fn refuse(mut client: WebSocket, error: String) {
    let end = StreamEnd { exit_code: None, error: Some(error) };
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

/// A forwarded connection's agent socket as a byte stream: waits for the agent's `OPENED`
/// (or the end that says why it could not connect), then relays between the returned duplex
/// end and the socket until either closes.
pub async fn tunnel(mut agent: WebSocket) -> Result<(ForwardOpened, DuplexStream), String> {
    let opened = match tokio::time::timeout(OPEN_TIMEOUT, agent.next()).await {
        Ok(Some(Ok(Message::Binary(b)))) => match stream::split(&b) {
            Some((OPENED, body)) => serde_json::from_slice::<ForwardOpened>(body).map_err(|e| e.to_string())?,
            Some((CONTROL, body)) => {
                let end = serde_json::from_slice::<StreamEnd>(body).unwrap_or_default();
                return Err(end.error.unwrap_or_else(|| "the kernel closed the connection".into()));
            }
            _ => return Err("the agent sent no answer to the forward".into()),
        },
        _ => return Err("the agent sent no answer to the forward".into()),
    };
    let (ours, theirs) = tokio::io::duplex(MAX_CHUNK);
    tokio::spawn(relay(agent, theirs));
    Ok((opened, ours))
}

/// Bytes written to `local` go to the kernel; the kernel's bytes come out of `local`.
async fn relay(agent: WebSocket, local: DuplexStream) {
    let (mut tx, mut rx) = agent.split();
    let (mut read, mut write) = tokio::io::split(local);
    let up = async {
        let mut buf = vec![0u8; MAX_CHUNK];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Message::Binary(stream::frame(STDIN, &buf[..n]).into())).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Message::Binary(stream::frame(STDIN_EOF, &[]).into())).await;
        // The kernel may still answer after our half-close: wait for its side to end.
        std::future::pending::<()>().await;
    };
    let down = async {
        while let Some(Ok(Message::Binary(b))) = rx.next().await {
            match stream::split(&b) {
                Some((STDOUT, data)) if write.write_all(data).await.is_err() => break,
                Some((CONTROL, _)) => break,
                _ => {}
            }
        }
        let _ = write.shutdown().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
