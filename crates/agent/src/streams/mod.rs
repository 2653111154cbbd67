//! Streams into kernels (`berth exec`, `berth attach`): when the manager sends `OpenStream`,
//! the agent dials the stream back (`/v1/agents/streams/{id}`, join token and the stream's
//! secret) and serves it in `berth_model::stream` frames: a command run inside the kernel
//! ([`exec`]: `runtime::exec` for processes, `docker exec` for containers; the client going
//! away kills it), the kernel's own input and output ([`attach`]; the client going away
//! detaches), or a TCP connection to a port inside it ([`forward`]).

mod attach;
mod exec;
mod forward;
mod listening;

use std::sync::Arc;

use berth_model::protocol::{KernelKey, STREAM_SECRET_HEADER, StreamOpen};
use berth_model::stream::{self, MAX_CHUNK, RESIZE, STDIN, STDIN_EOF, StreamEnd, WindowSize};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::AgentConfig;
use crate::dial::Ws;
use crate::runtime::session::Session;

/// What a stream runs in.
pub(crate) enum Target {
    Process {
        pid: u32,
    },
    Container {
        name: String,
        docker: crate::runtime::Docker,
    },
    /// An interactive kernel's session (attach only).
    Session(Arc<Session>),
}

/// Why no stream can go into a kernel (`berth exec`, `attach`, a port forward).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("kernel {}.{} is not running on node {node}", key.job_id, key.index)]
    NotRunning { key: KernelKey, node: String },
    #[error("kernel {}.{} has no process yet", key.job_id, key.index)]
    NoProcess { key: KernelKey },
    #[error(
        "kernel {}.{} has no terminal or input to attach to (its job was not submitted with `berth run -i/-t`, \
         or the agent holding them restarted)",
        key.job_id,
        key.index
    )]
    NoSession { key: KernelKey },
}

/// Dials stream `id` back and serves it (spawned by the connection; never fails it).
pub(crate) async fn serve(
    config: AgentConfig,
    id: u64,
    secret: String,
    target: Result<Target, TargetError>,
    open: StreamOpen,
) {
    let url = match crate::dial::ws_url(&config.manager_url, &format!("/v1/agents/streams/{id}")) {
        Ok(u) => u,
        Err(e) => return tracing::warn!("cannot open stream {id}: {e}"),
    };
    let mut ws = match crate::dial::dial_url(&config, &url, &[(STREAM_SECRET_HEADER, secret.as_str())]).await {
        Ok(ws) => ws,
        Err(e) => return tracing::warn!("cannot open stream {id}: {e}"),
    };
    let end = match (target, open) {
        (Err(e), _) => failed(e.to_string()),
        (Ok(Target::Process { pid }), StreamOpen::Exec { command, stdin, tty, env, gpus }) => {
            exec::process(&mut ws, pid, exec::Exec { command, stdin, tty, env, gpus }).await
        }
        (Ok(Target::Container { name, docker }), StreamOpen::Exec { command, stdin, tty, env, gpus }) => {
            exec::container(&mut ws, &docker, &name, exec::Exec { command, stdin, tty, env, gpus }).await
        }
        (Ok(Target::Session(s)), StreamOpen::Attach) => attach::session(&mut ws, &s).await,
        (Ok(Target::Container { name, docker }), StreamOpen::Attach) => {
            attach::container(&mut ws, &docker, &name).await
        }
        (Ok(target), StreamOpen::Forward { target: to }) => forward::serve(&mut ws, target, to).await,
        (Ok(_), open) => failed(format!("cannot serve {open:?} on this kernel")),
    };
    let _ = ws.send(Message::binary(stream::end_frame(&end))).await;
    let _ = ws.close(None).await;
}

fn failed(error: impl std::fmt::Display) -> StreamEnd {
    StreamEnd { exit_code: None, error: Some(error.to_string()) }
}

/// The client went away before the command ended (the command is stopped).
const GONE: &str = "the client went away";

/// Reads a command's output into frames of `channel`; a terminal's end (EIO) is an end.
async fn pump(mut from: impl AsyncRead + Unpin, channel: u8, to: mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; MAX_CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.send(stream::frame(channel, &buf[..n])).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// A channel for window sizes, each applied by `apply` in order on a task of its own (an
/// ioctl on a terminal, or a call to Docker).
fn resizer<F, Fut>(mut apply: F) -> mpsc::UnboundedSender<WindowSize>
where
    F: FnMut(WindowSize) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<WindowSize>();
    tokio::spawn(async move {
        while let Some(size) = rx.recv().await {
            apply(size).await;
        }
    });
    tx
}

/// What a client's message asks of the command.
enum FromClient<'a> {
    Data(&'a [u8]),
    Eof,
    Resize(WindowSize),
    /// The client went away (a close or a broken socket).
    Gone,
    Other,
}

fn from_client(msg: &Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) -> FromClient<'_> {
    match msg {
        Some(Ok(Message::Binary(b))) => match stream::split(b) {
            Some((STDIN, data)) => FromClient::Data(data),
            Some((STDIN_EOF, _)) => FromClient::Eof,
            Some((RESIZE, data)) => match serde_json::from_slice(data) {
                Ok(size) => FromClient::Resize(size),
                Err(_) => FromClient::Other,
            },
            _ => FromClient::Other,
        },
        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => FromClient::Gone,
        Some(Ok(_)) => FromClient::Other,
    }
}

/// Sends the output frames to the client, the client's input to the command and its window
/// sizes to `resize`, until the output ends (true) or the client goes away (false).
async fn relay(
    ws: &mut Ws,
    mut output: mpsc::Receiver<Vec<u8>>,
    mut input: Option<impl AsyncWrite + Unpin>,
    resize: Option<mpsc::UnboundedSender<WindowSize>>,
) -> bool {
    loop {
        tokio::select! {
            frame = output.recv() => match frame {
                Some(f) => {
                    if ws.send(Message::binary(f)).await.is_err() {
                        return false;
                    }
                }
                None => return true,
            },
            msg = ws.next() => match from_client(&msg) {
                FromClient::Data(data) => {
                    if let Some(w) = input.as_mut()
                        && w.write_all(data).await.is_err()
                    {
                        input = None;
                    }
                }
                FromClient::Eof => {
                    if let Some(mut w) = input.take() {
                        let _ = w.shutdown().await;
                    }
                }
                FromClient::Resize(size) => {
                    if let Some(r) = &resize {
                        let _ = r.send(size);
                    }
                }
                FromClient::Gone => return false,
                FromClient::Other => {}
            },
        }
    }
}
