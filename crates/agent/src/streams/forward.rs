//! Port forwards into kernels (`berth port-forward`, the manager's app proxy): one TCP
//! connection per stream, opened from the kernel's own network namespace to its loopback, so
//! a container on a private network is reached as a process kernel on the host's is.
//!
//! An app's port (and a token-authenticated app's secret) is read from the kernel's
//! environment, where the agent put it at start (`runtime::env`), so a forward works the same
//! after the agent restarted. A kernel on the node's own network also says where its port
//! listens there (`listening`), for the manager's direct path to serving replicas.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use berth_model::app::{TOKEN_VAR, port_var};
use berth_model::protocol::ForwardTarget;
use berth_model::stream::{self, ForwardOpened, OPENED, StreamEnd};
use futures_util::SinkExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use super::{GONE, Target, failed, pump, relay};
use crate::dial::Ws;

/// Why a forwarded connection could not be opened; its text is the stream's error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ForwardError {
    #[error("the kernel's process {pid} is gone ({source})")]
    ProcessGone { pid: u32, source: std::io::Error },
    #[error(transparent)]
    Engine(#[from] crate::runtime::docker::EngineError),
    #[error("cannot inspect container {name}: {why}")]
    InspectContainer { name: String, why: String },
    #[error("container {name} is not running")]
    ContainerNotRunning { name: String },
    #[error("a session is attached to, not forwarded to")]
    Session,
    #[error("cannot read our network namespace: {0}")]
    OwnNamespace(std::io::Error),
    #[error("cannot open {path}: {source}")]
    OpenNamespace { path: String, source: std::io::Error },
    #[error("cannot enter the kernel's network namespace: {0}")]
    EnterNamespace(nix::Error),
    #[error("the connecting thread died")]
    ThreadDied,
    #[error("{0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("nothing listens on port {port} in the kernel (connection refused)")]
    Refused { port: u16 },
    #[error("cannot connect to port {port} in the kernel: {source}")]
    Connect { port: u16, source: std::io::Error },
    #[error("cannot connect to port {port} in the kernel")]
    NoAddress { port: u16 },
}

/// How long a connection to the port may take (it is on the node's loopback).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one forwarded connection: connects, says so, relays until either side closes.
pub(super) async fn serve(ws: &mut Ws, target: Target, to: ForwardTarget) -> StreamEnd {
    let (pid, env) = match kernel_of(target).await {
        Ok(k) => k,
        Err(e) => return failed(e),
    };
    let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let (port, token) = match &to {
        ForwardTarget::Port(p) => (*p, None),
        ForwardTarget::App(name) => match var(&port_var(name)).and_then(|p| p.parse::<u16>().ok()) {
            Some(p) => (p, var(TOKEN_VAR)),
            None => return failed(format!("the kernel has no port for app `{name}` (it started without it)")),
        },
    };
    let (tcp, own_network) = match connect(pid, port).await {
        Ok(t) => t,
        Err(e) => return failed(e),
    };
    // A kernel on a network of its own is reached only from inside it: through this tunnel.
    let listen = if own_network { None } else { super::listening::listening(port) };
    let opened = serde_json::to_vec(&ForwardOpened { port, token, listen }).unwrap_or_default();
    if ws.send(Message::binary(stream::frame(OPENED, &opened))).await.is_err() {
        return failed(GONE);
    }
    let (read, write) = tcp.into_split();
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(pump(read, stream::STDOUT, tx));
    if relay(ws, rx, Some(write), None).await { StreamEnd::default() } else { failed(GONE) }
}

/// The kernel's main process and its environment.
async fn kernel_of(target: Target) -> Result<(u32, Vec<(String, String)>), ForwardError> {
    match target {
        Target::Process { pid } => {
            let env = crate::runtime::exec::environ(pid).map_err(|source| ForwardError::ProcessGone { pid, source })?;
            let env =
                env.into_iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()));
            Ok((pid, env.collect()))
        }
        Target::Container { name, docker } => {
            let api = docker.api().await?;
            let c = api
                .inspect_container(&name, None::<bollard::query_parameters::InspectContainerOptions>)
                .await
                .map_err(|e| ForwardError::InspectContainer { name: name.clone(), why: e.to_string() })?;
            let pid = c
                .state
                .and_then(|s| s.pid)
                .filter(|p| *p > 0)
                .ok_or_else(|| ForwardError::ContainerNotRunning { name: name.clone() })?;
            let env = c.config.and_then(|c| c.env).unwrap_or_default();
            let env = env.into_iter().filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())));
            Ok((pid as u32, env.collect()))
        }
        Target::Session(_) => Err(ForwardError::Session),
    }
}

/// Connects to `port` on the loopback of process `pid`'s network namespace (IPv4, then IPv6);
/// says whether that namespace is one of its own (not the agent's, the node's).
async fn connect(pid: u32, port: u16) -> Result<(TcpStream, bool), ForwardError> {
    let ns = format!("/proc/{pid}/ns/net");
    let theirs = std::fs::metadata(&ns).map_err(|source| ForwardError::ProcessGone { pid, source })?;
    let ours = std::fs::metadata("/proc/self/ns/net").map_err(ForwardError::OwnNamespace)?;
    let addrs = [SocketAddr::from((Ipv4Addr::LOCALHOST, port)), SocketAddr::from((Ipv6Addr::LOCALHOST, port))];
    let own = (theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino());
    let std_stream = if !own {
        tokio::task::spawn_blocking(move || connect_any(&addrs)).await?
    } else {
        // `setns` changes the calling thread: a thread of its own, which ends right after.
        let (tx, rx) = oneshot::channel();
        std::thread::spawn(move || {
            let joined = std::fs::File::open(&ns)
                .map_err(|source| ForwardError::OpenNamespace { path: ns.clone(), source })
                .and_then(|f| {
                    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(ForwardError::EnterNamespace)
                });
            let _ = tx.send(joined.and_then(|()| connect_any(&addrs)));
        });
        rx.await.map_err(|_| ForwardError::ThreadDied)?
    }?;
    std_stream.set_nonblocking(true)?;
    let _ = std_stream.set_nodelay(true);
    Ok((TcpStream::from_std(std_stream)?, own))
}

fn connect_any(addrs: &[SocketAddr]) -> Result<std::net::TcpStream, ForwardError> {
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    let port = addrs.first().map(|a| a.port()).unwrap_or(0);
    Err(match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => ForwardError::Refused { port },
        Some(source) => ForwardError::Connect { port, source },
        None => ForwardError::NoAddress { port },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connects_in_a_processes_namespace_and_says_when_nothing_listens() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(!connect(std::process::id(), port).await.unwrap().1, "our own namespace");
        drop(l);
        let e = connect(std::process::id(), port).await.unwrap_err();
        assert!(matches!(e, ForwardError::Refused { .. }) && e.to_string().contains("nothing listens on port"), "{e}");
        let e = connect(u32::MAX - 1, port).await.unwrap_err();
        assert!(matches!(e, ForwardError::ProcessGone { .. }) && e.to_string().contains("is gone"), "{e}");
    }
}
