//! The direct path to serving replicas: where a replica's port is reachable from the manager
//! (it listens on its node's own network, and a connection to it succeeds: see
//! `serving::direct`), the app proxy's connector opens plain TCP connections to `node:port`
//! instead of forwards through the agent, so a request crosses one pooled connection, as
//! through nginx, rather than a WebSocket to the agent and a connection from there.
//!
//! [`Routes`] holds the decision per replica (an [`AppKey`]: a job's attempt), shared by the
//! controller (which decides) and the router's proxy (which connects). The tunnel stays the
//! fallback: a replica without a route, or whose direct connection fails, is reached through
//! its agent; the failure sends the replica back to undecided, so its next passing probe
//! decides again. Both transports sit in one pool per replica, so a switch never mixes two
//! replicas' connections, even when one port number is used again by another replica.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use berth_model::endpoint::ReplicaRoute;
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::net::TcpStream;

use super::key::AppKey;

/// How long a direct connection may take before the tunnel is used instead: a reachable node
/// answers within a round trip; one behind NAT or a firewall that drops never does.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How each replica is reached, as decided: straight to an address, or (`None`) through its
/// tunnel, with the app's token (learnt from the forward the decision was made on, so that a
/// proxy which never forwarded to the replica need not open one to learn it). A replica not
/// in it is undecided, and goes through its tunnel meanwhile.
#[derive(Clone, Default)]
pub struct Routes(Arc<Mutex<HashMap<AppKey, Route>>>);

#[derive(Clone)]
struct Route {
    direct: Option<SocketAddr>,
    token: Option<String>,
}

impl Routes {
    fn lock(&self) -> MutexGuard<'_, HashMap<AppKey, Route>> {
        // Plain data: a panic elsewhere leaves nothing half-done.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The address replica `key` is reached at directly, if it is.
    pub fn direct(&self, key: &AppKey) -> Option<SocketAddr> {
        self.lock().get(key).and_then(|r| r.direct)
    }

    /// Replica `key`'s token, when its route is decided.
    pub fn token(&self, key: &AppKey) -> Option<Option<String>> {
        self.lock().get(key).map(|r| r.token.clone())
    }

    /// Whether replica `key`'s route is decided.
    pub fn decided(&self, key: &AppKey) -> bool {
        self.lock().contains_key(key)
    }

    /// Replica `key` is reached at `direct` from now on (`None`: through its tunnel).
    pub fn set(&self, key: &AppKey, direct: Option<SocketAddr>, token: Option<String>) {
        self.lock().insert(key.clone(), Route { direct, token });
    }

    /// Replica `key`'s direct connection failed: undecided again, through its tunnel until a
    /// probe decides anew.
    pub fn forget(&self, key: &AppKey) {
        self.lock().remove(key);
    }

    /// What the API shows of replica `key`'s route: `None` while undecided.
    pub fn shown(&self, key: &AppKey) -> Option<ReplicaRoute> {
        self.lock().get(key).map(|r| if r.direct.is_some() { ReplicaRoute::Direct } else { ReplicaRoute::Tunnel })
    }

    /// Keeps only the routes of the replicas that `live` says still exist.
    pub fn retain(&self, live: impl Fn(&AppKey) -> bool) {
        self.lock().retain(|k, _| live(k));
    }
}

/// A connection to an app: forwarded through its agent, or straight to its port.
pub enum AppIo {
    Tunnel(TokioIo<DuplexStream>),
    Direct(TokioIo<TcpStream>),
}

/// A direct connection to an app's port failed (the caller goes through the agent instead).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {addr}: {source}")]
    Io { addr: SocketAddr, source: std::io::Error },
    #[error("cannot connect to {addr}: no answer within {} ms", CONNECT_TIMEOUT.as_millis())]
    TimedOut { addr: SocketAddr },
}

/// A direct connection to `addr`, Nagle off (small answers must not wait for delayed ACKs).
pub async fn connect(addr: SocketAddr) -> Result<AppIo, ConnectError> {
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(t)) => t,
        Ok(Err(source)) => return Err(ConnectError::Io { addr, source }),
        Err(_) => return Err(ConnectError::TimedOut { addr }),
    };
    let _ = tcp.set_nodelay(true);
    Ok(AppIo::Direct(TokioIo::new(tcp)))
}

impl hyper::rt::Read for AppIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AppIo::Tunnel(io) => Pin::new(io).poll_read(cx, buf),
            AppIo::Direct(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for AppIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AppIo::Tunnel(io) => Pin::new(io).poll_write(cx, buf),
            AppIo::Direct(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AppIo::Tunnel(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            AppIo::Direct(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            AppIo::Tunnel(io) => io.is_write_vectored(),
            AppIo::Direct(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AppIo::Tunnel(io) => Pin::new(io).poll_flush(cx),
            AppIo::Direct(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AppIo::Tunnel(io) => Pin::new(io).poll_shutdown(cx),
            AppIo::Direct(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}
