//! The manager's unix socket: the same REST API as on TCP, for the users of the manager's own
//! host, whose identity the kernel vouches for (`SO_PEERCRED`), as munge does for Slurm.
//!
//! A request over the socket may still carry a token (it then acts as the token's user), but
//! whoever sends it, the job it submits records the *Unix* user who sent it
//! ([`Submitter`]), and agents run the job's kernels as that user by default. Without a token
//! the caller is the berth user named like its Unix account, created on first use (Slurm lets
//! any local account submit); the manager's own Unix user and root are the admin
//! (`Tenancy::authenticate_local` in `tenancy.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::request::Parts;
use axum::serve::IncomingStream;
use berth_model::UnixId;
use tokio::net::UnixListener;

/// The longest path a unix socket address holds (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Where and for whom the manager's unix socket listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSocket {
    pub path: PathBuf,
    /// Whether every local user may connect (mode 0666: a root manager, whose agents can run
    /// jobs as their submitters) or only the manager's own user (0600).
    pub everyone: bool,
}

/// The peer of a socket connection, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPeer {
    pub uid: u32,
    pub gid: u32,
}

impl Connected<IncomingStream<'_, UnixListener>> for LocalPeer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        // A peer whose credentials cannot be read is nobody: it gets no admin rights and
        // the Unix account check refuses it.
        match stream.io().peer_cred() {
            Ok(c) => LocalPeer { uid: c.uid(), gid: c.gid() },
            Err(_) => LocalPeer { uid: u32::MAX, gid: u32::MAX },
        }
    }
}

/// The berth admin's name, given to the socket's router so that the manager's own Unix user
/// acts as it without a token.
#[derive(Debug, Clone)]
pub struct LocalAdmin(pub Arc<str>);

/// Binds the socket: a stale file of a manager that died is replaced, a live one is an error
/// (two managers on one data dir).
pub fn bind(socket: &LocalSocket) -> anyhow::Result<UnixListener> {
    let path = &socket.path;
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        anyhow::bail!(
            "the socket path {} is longer than a unix socket address allows ({MAX_SOCKET_PATH} bytes): use a shorter data dir",
            path.display()
        );
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!("another berth manager is serving {}: stop it first, or use another data dir", path.display());
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove the stale socket {}", path.display())),
    }
    let listener = UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
    let mode = if socket.everyone { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(listener)
}

/// The peer of a request that came over the socket; `None` over TCP.
pub fn peer(parts: &Parts) -> Option<LocalPeer> {
    parts.extensions.get::<ConnectInfo<LocalPeer>>().map(|c| c.0)
}

/// The Unix user behind a request, when the kernel vouched for it.
pub fn submitter(parts: &Parts) -> Option<UnixId> {
    peer(parts).filter(|p| p.uid != u32::MAX).map(|p| UnixId { uid: p.uid, gid: p.gid })
}

/// Extractor: the Unix user who sent the request over the manager's socket, if it did.
pub struct Submitter(pub Option<UnixId>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Submitter {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Submitter(submitter(parts)))
    }
}

/// The socket of a manager with data dir `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("berth.sock")
}
