//! `berth attach` (and `berth run -i/-t`): a client connected to an interactive kernel's own
//! input and output. Processes: the session the agent holds (`runtime::session`); containers:
//! Docker's attach, since Docker holds a container's terminal itself. The client going away
//! detaches and the kernel runs on; the kernel's output ending ends the stream (the client
//! reads the job's exit code from the manager, which has it once the kernel's end is in).

use berth_model::stream::StreamEnd;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::{FromClient, failed, from_client, relay, resizer};
use crate::dial::Ws;
use crate::runtime::session::{Input, Session};

/// The end of a stream whose kernel's output ended (its exit code is the manager's to say).
fn ended() -> StreamEnd {
    StreamEnd::default()
}

pub(super) async fn session(ws: &mut Ws, session: &Session) -> StreamEnd {
    let attached = session.attach();
    for frame in attached.backlog {
        if ws.send(Message::binary(frame)).await.is_err() {
            return ended();
        }
    }
    let Some(mut live) = attached.live else { return ended() };
    loop {
        tokio::select! {
            frame = live.recv() => match frame {
                Ok(f) => {
                    if ws.send(Message::binary(f)).await.is_err() {
                        return ended();
                    }
                }
                // A slow client loses what it could not take (the log has it).
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return ended(),
            },
            msg = ws.next() => match from_client(&msg) {
                FromClient::Data(data) => session.send(Input::Data(data.to_vec())),
                FromClient::Eof => session.send(Input::Eof),
                FromClient::Resize(size) => session.send(Input::Resize(size)),
                // Detached: the kernel runs on.
                FromClient::Gone => return ended(),
                FromClient::Other => {}
            },
        }
    }
}

/// Docker's attach to a container started with a terminal or open stdin (`berth run -i/-t
/// --image`).
pub(super) async fn container(ws: &mut Ws, docker: &crate::runtime::Docker, name: &str) -> StreamEnd {
    let api = match docker.api().await {
        Ok(a) => a,
        Err(e) => return failed(e),
    };
    let opts = bollard::query_parameters::AttachContainerOptionsBuilder::new()
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .stream(true)
        .build();
    let attached = match api.attach_container(name, Some(opts)).await {
        Ok(a) => a,
        Err(e) => return failed(format!("cannot attach to container {name}: {e}")),
    };
    let (mut output, input) = (attached.output, attached.input);
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = output.next().await {
            let Some(frame) = super::exec::docker_frame(chunk) else { continue };
            if tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let name2 = name.to_string();
    let resize = resizer(move |s| {
        let (api, name) = (api.clone(), name2.clone());
        async move {
            let opts = bollard::query_parameters::ResizeContainerTTYOptionsBuilder::new()
                .h(s.rows.into())
                .w(s.cols.into())
                .build();
            let _ = api.resize_container_tty(&name, opts).await;
        }
    });
    relay(ws, rx, Some(input), Some(resize)).await;
    ended()
}
