//! The cache node's HTTP server, on hyper 1 directly (HTTP/1.1 keep-alive, no router: the
//! few routes are matched by hand on the raw path, which also keeps `//` inside keys intact).
//!
//! Routes:
//! - `PUT|GET|HEAD|DELETE /v1/objects/{bucket}/{key}`: objects ([`objects`]); a node that does
//!   not own the key forwards to its owner ([`forward`]).
//! - `GET /v1/members`, `PUT /v1/members` (admin): the Maglev member list.
//! - `GET /v1/buckets`, `PUT|DELETE /v1/buckets/{name}` (admin): bucket settings; a deleted
//!   bucket takes its objects with it.
//! - `GET /v1/buckets/{name}/usage?prefix=P`: what this node holds of the bucket's keys
//!   starting with `P` (never forwarded).
//! - `GET /v1/stats` (JSON) and `GET /metrics` (Prometheus): per-bucket counters.

mod admin;
mod auth;
mod body;
mod date;
mod fast;
mod forward;
mod guard;
mod head;
mod objects;
mod pagecache;
mod range;
mod sendfile;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::maglev::{Maglev, Member};
use crate::metrics::NodeCounters;
use crate::store::Store;
use crate::token::Key;

pub use body::Body;

/// Header a node sets on a forwarded request, so the owner serves it itself (no loops even
/// when two nodes briefly disagree on the member list).
pub const FORWARDED: &str = "x-berth-forwarded";

/// Everything a node needs to serve.
#[derive(Debug)]
pub struct Node {
    pub store: Arc<Store>,
    pub key: Key,
    /// This node's name in the member list (the URL others reach it at).
    pub name: String,
    members: RwLock<Arc<Maglev>>,
    members_file: PathBuf,
    pub counters: NodeCounters,
    forwarder: forward::Forwarder,
    tokens: auth::TokenCache,
    /// Serve HTTPS with this config (`berth cache serve --tls-cert/--tls-key`).
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// A node's TLS: the server config it serves HTTPS with, and the client config it reaches
/// `https://` members with. Both built by the caller (the CLI loads them the way the manager
/// and agents do), so the cache crate has no certificate-loading code of its own.
#[derive(Debug, Clone, Default)]
pub struct NodeTls {
    pub server: Option<Arc<rustls::ServerConfig>>,
    pub client: Option<Arc<rustls::ClientConfig>>,
}

impl Node {
    /// A node named `name` (its URL) serving `store`, routing over `members` (just itself
    /// when empty; the list is kept in `<data dir>/members.json` across restarts when it is
    /// changed through the API).
    pub fn new(store: Arc<Store>, key: Key, name: String, members: Vec<Member>, tls: NodeTls) -> Node {
        let members_file = store.root().join("members.json");
        let members = if members.is_empty() {
            load_members(&members_file).unwrap_or_else(|| vec![Member::up(name.clone())])
        } else {
            members
        };
        Node {
            store,
            key,
            name,
            members: RwLock::new(Arc::new(Maglev::new(members))),
            members_file,
            counters: NodeCounters::default(),
            forwarder: forward::Forwarder::new(tls.client),
            tokens: auth::TokenCache::default(),
            tls: tls.server,
        }
    }

    pub fn maglev(&self) -> Arc<Maglev> {
        self.members.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the member list (and keeps it for restarts); returns whether it changed. The
    /// table build takes up to ~0.1 s at 1000 members: call from a blocking thread.
    pub fn set_members(&self, mut members: Vec<Member>) -> std::io::Result<bool> {
        // the table keeps its members sorted and unique: compare before paying for a build
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members.dedup_by(|a, b| a.name == b.name);
        if members == self.maglev().members() {
            return Ok(false);
        }
        let table = Maglev::new(members);
        let body = serde_json::to_vec_pretty(table.members()).expect("members serialize");
        crate::private::write_atomic(&self.members_file, &body)?;
        *self.members.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        Ok(true)
    }
}

fn load_members(path: &std::path::Path) -> Option<Vec<Member>> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Accepts connections on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, node: Arc<Node>) -> std::io::Result<()> {
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(s) => s,
            // out of file descriptors and the like: keep serving the connections we have
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let node = node.clone();
        tokio::spawn(async move {
            match node.tls.clone() {
                // whole-object GETs without hyper; everything else handed on to it
                None => fast::serve(node, stream).await,
                Some(tls) => {
                    // a client that never finishes its handshake must not hold a task forever
                    let accept = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
                    if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
                        serve_connection(node, bytes::BytesMut::new(), s, None).await;
                    }
                }
            }
        });
    }
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves HTTP/1.1 on `stream` with hyper, each request head checked first ([`guard`]);
/// `read` are bytes already read from it (by the fast path), and `first`, when given, the
/// answer to the first request (made by the fast path before it handed the connection over).
async fn serve_connection<S>(node: Arc<Node>, read: bytes::BytesMut, stream: S, first: Option<Response<Body>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // no route takes more than an object the node can hold, or the admin routes' JSON
    let max_body = node.store.capacity().max(admin::MAX_JSON as u64);
    let stream = guard::Guard::new(read, stream, max_body);
    let refusals = stream.refusals();
    let first = std::sync::Mutex::new(first);
    let svc = service_fn(move |req| {
        let node = node.clone();
        let made = refusals.take(&req).or_else(|| first.lock().unwrap_or_else(|p| p.into_inner()).take());
        async move {
            Ok::<_, std::convert::Infallible>(match made {
                Some(r) => r,
                None => route(&node, req).await,
            })
        }
    });
    let _ =
        hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), svc).await;
}

/// Serves on `threads` threads, each with its own single-threaded runtime and its own
/// `SO_REUSEPORT` listener on the same address, the kernel spreading connections over them
/// (nginx's worker model). One shared multi-threaded runtime spent most of a 4 KiB GET's time
/// waking threads up and switching between them (`perf`: ~75 % kernel time, docs/perf.md).
/// Returns the bound address (a port 0 in `addr` is chosen by the first worker).
pub fn spawn_workers(addr: SocketAddr, node: Arc<Node>, threads: usize) -> std::io::Result<SocketAddr> {
    let mut bound = addr;
    for i in 0..threads.max(1) {
        let (tx, rx) = std::sync::mpsc::channel();
        let node = node.clone();
        std::thread::Builder::new().name(format!("cache-worker-{i}")).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match reuseport_listener(bound) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(listener.local_addr());
                if let Err(e) = serve(listener, node).await {
                    tracing::error!(error = %e, "cache worker stopped");
                }
            });
        })?;
        bound = rx.recv().map_err(|_| std::io::Error::other("a cache worker thread died at start"))??;
    }
    Ok(bound)
}

fn reuseport_socket(addr: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let s = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    s.set_reuseport(true)?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    Ok(s)
}

fn reuseport_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    reuseport_socket(addr)?.listen(1024)
}

/// Binds (without listening) an `SO_REUSEPORT` socket on `addr`, choosing the port when it is
/// 0, so that the port is known and held before [`spawn_workers`] listens on it.
pub fn reserve(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpSocket, SocketAddr)> {
    let s = reuseport_socket(addr)?;
    let a = s.local_addr()?;
    Ok((s, a))
}

/// Binds `addr` (port 0 = any free port) and returns the listener and its real address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}

async fn route(node: &Arc<Node>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if let Some(rest) = path.strip_prefix("/v1/objects/") {
        return match objects::parse_target(rest) {
            Ok((bucket, key)) => objects::handle(node, req, bucket, key).await,
            Err(msg) => error(StatusCode::BAD_REQUEST, &msg),
        };
    }
    if req.method() == Method::GET
        && let Some(bucket) = path.strip_prefix("/v1/buckets/").and_then(|r| r.strip_suffix("/usage"))
    {
        return admin::usage(node, &req, bucket).await;
    }
    match (req.method(), path) {
        (&Method::GET, "/metrics") => admin::metrics(node),
        (&Method::GET, "/v1/stats") => admin::stats(node),
        (&Method::GET, "/v1/members") => admin::members(node),
        (&Method::PUT, "/v1/members") => admin::put_members(node, req).await,
        (&Method::GET, "/v1/buckets") => admin::buckets(node, &req),
        (&Method::PUT, p) if p.starts_with("/v1/buckets/") => admin::put_bucket(node, req).await,
        (&Method::DELETE, p) if p.starts_with("/v1/buckets/") => admin::delete_bucket(node, req).await,
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        _ => error(StatusCode::NOT_FOUND, &format!("no route {} {path}: see /v1/objects/BUCKET/KEY", req.method())),
    }
}

/// A plain-text response.
pub(crate) fn text(status: StatusCode, body: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::full(Bytes::copy_from_slice(body.as_bytes())))
        .expect("valid response")
}

/// An error response: JSON `{"error": msg}`, like the manager's API.
pub(crate) fn error(status: StatusCode, msg: &str) -> Response<Body> {
    let b = serde_json::to_vec(&serde_json::json!({ "error": msg })).expect("json");
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::full(Bytes::from(b)))
        .expect("valid response")
}

pub(crate) fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::full(Bytes::from(serde_json::to_vec(v).expect("json"))))
        .expect("valid response")
}
