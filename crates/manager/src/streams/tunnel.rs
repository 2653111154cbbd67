//! A forwarded connection's agent socket as a byte stream the manager itself can speak HTTP
//! over (the app proxy): the agent's `OPENED` (or the end that says why it could not
//! connect), then bytes both ways in `berth_model::stream` frames.

use axum::extract::ws::{Message, WebSocket};
use berth_model::stream::{self, CONTROL, ForwardOpened, MAX_CHUNK, OPENED, STDIN, STDIN_EOF, STDOUT, StreamEnd};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::OPEN_TIMEOUT;

/// Why a forward gave no connection.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The agent's `OPENED` did not parse.
    #[error("{0}")]
    Opened(serde_json::Error),
    /// The agent could not connect: its reason, if it gave one.
    #[error("{}", .0.as_deref().unwrap_or("the kernel closed the connection"))]
    Refused(Option<String>),
    #[error("the agent sent no answer to the forward")]
    NoAnswer,
}

/// Waits for the agent's `OPENED` (or the end that says why it could not connect), then
/// relays between the returned duplex end and the socket until either closes.
pub async fn tunnel(mut agent: WebSocket) -> Result<(ForwardOpened, DuplexStream), TunnelError> {
    let opened = match tokio::time::timeout(OPEN_TIMEOUT, agent.next()).await {
        Ok(Some(Ok(Message::Binary(b)))) => match stream::split(&b) {
            Some((OPENED, body)) => serde_json::from_slice::<ForwardOpened>(body).map_err(TunnelError::Opened)?,
            Some((CONTROL, body)) => {
                let end = serde_json::from_slice::<StreamEnd>(body).unwrap_or_default();
                return Err(TunnelError::Refused(end.error));
            }
            _ => return Err(TunnelError::NoAnswer),
        },
        _ => return Err(TunnelError::NoAnswer),
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
