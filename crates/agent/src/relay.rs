//! What streams into kernels share (`streams` for exec, `forward` for port forwards): what a
//! stream runs in, relaying between its WebSocket and a command or a connection (output read
//! into frames, the client's input written in), and how a stream ends.

use berth_model::stream::{self, MAX_CHUNK, STDIN, STDIN_EOF, StreamEnd};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::dial::Ws;

/// What a stream runs in.
pub(crate) enum Target {
    Process { pid: u32 },
    Container { name: String, docker: crate::runtime::Docker },
}

/// A stream that ends without an exit code, for `error`.
pub(crate) fn failed(error: impl Into<String>) -> StreamEnd {
    StreamEnd { exit_code: None, error: Some(error.into()) }
}

/// The client went away before the command ended (the command is stopped).
pub(crate) const GONE: &str = "the client went away";

/// Reads a command's output into frames of `channel`.
pub(crate) async fn pump(mut from: impl AsyncRead + Unpin, channel: u8, to: mpsc::Sender<Vec<u8>>) {
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

/// Sends the output frames to the client and the client's input to the command, until the
/// output ends (true) or the client goes away (false).
pub(crate) async fn relay(
    ws: &mut Ws,
    mut output: mpsc::Receiver<Vec<u8>>,
    mut input: Option<impl AsyncWrite + Unpin>,
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
            msg = ws.next() => match msg {
                Some(Ok(Message::Binary(b))) => match stream::split(&b) {
                    Some((STDIN, data)) => {
                        if let Some(w) = input.as_mut()
                            && w.write_all(data).await.is_err()
                        {
                            input = None;
                        }
                    }
                    Some((STDIN_EOF, _)) => {
                        if let Some(mut w) = input.take() {
                            let _ = w.shutdown().await;
                        }
                    }
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return false,
                Some(Ok(_)) => {}
            },
        }
    }
}
