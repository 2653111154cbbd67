//! The app listener's workers (issue 42, second pass): one thread per core, each with a
//! current-thread tokio runtime, hyper's server and its own app proxy (and so its own pool of
//! connections to the apps), and every connection a worker is given served on that worker
//! alone, as nginx's workers do.
//!
//! Why: on the manager's multi-threaded runtime a proxied request crossed threads at every
//! hand-off (the client connection's task, the answer back), each a futex wake-up and a
//! context switch; on one thread the same hand-offs are a queue push. A connection is
//! accepted on the manager's runtime (one listener, nothing else can bind its port) and
//! handed to the workers in turn: keep-alive clients pay that once per connection.
//!
//! A worker's runtime is never dropped: what its tasks opened for the rest of the manager
//! (a store connection a request opened, a forward to an agent) stays driven.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::manager::Manager;

/// Connections waiting for their worker, per worker.
const QUEUE: usize = 1024;

/// Serves the connections handed to one worker until `stop` turns true, then lets the open
/// ones finish (an idle keep-alive connection is closed, a request in flight is answered).
///
/// hyper's own server, not axum's: the listener has one handler, and axum's router added per
/// request a boxed future, a cloned boxed service and a path lookup (issue 42, fourth pass).
/// What axum's server did that matters is done here the same way: HTTP/1.1 and HTTP/2 on
/// one port, upgrades (WebSockets), HTTP/2's extended CONNECT (WebSockets over HTTP/2).
async fn serve_worker(
    mut rx: mpsc::Receiver<std::net::TcpStream>,
    apps: Arc<super::Apps>,
    stop: watch::Receiver<bool>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().enable_connect_protocol();
    // Each connection holds a receiver: dropped when it ends, so `closed` says all have.
    let (open_tx, open_rx) = watch::channel(());
    let stopped = stopped(stop.clone());
    tokio::pin!(stopped);
    loop {
        let tcp = tokio::select! {
            () = &mut stopped => break,
            r = rx.recv() => match r {
                Some(tcp) => tcp,
                // The acceptor stopped: so did the manager's shutdown signal, or will.
                None => { (&mut stopped).await; break }
            },
        };
        let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else { continue };
        // Small WebSocket frames and answers must not wait for delayed ACKs (Nagle).
        let _ = tcp.set_nodelay(true);
        let apps = apps.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let apps = apps.clone();
            async move { Ok::<_, Infallible>(super::answer(&apps, req.map(Body::new)).await) }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned();
        let (mut stop, open) = (stop.clone(), open_rx.clone());
        tokio::spawn(async move {
            let _open = open;
            tokio::pin!(conn);
            let mut draining = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::trace!("app proxy connection ended: {e}");
                        }
                        break;
                    }
                    _ = stop.wait_for(|s| *s), if !draining => {
                        draining = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(open_rx);
    open_tx.closed().await;
}

/// Serves the app proxy on `listener` with one worker per core until `stop` turns true; the
/// handle ends when every worker's server has (their open connections done or cut).
pub fn serve(
    m: Arc<Manager>,
    listener: tokio::net::TcpListener,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut workers = Vec::with_capacity(n);
    let mut done = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (finished, ended) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::Builder::new().name(format!("berth-apps-{i}")).spawn(move || {
            rt.block_on(async move {
                serve_worker(rx, super::Apps::new(m), stop).await;
                let _ = finished.send(());
                std::future::pending::<()>().await
            })
        })?;
        workers.push(tx);
        done.push(ended);
    }
    let turn = AtomicUsize::new(0);
    Ok(tokio::spawn(async move {
        let stopped = stopped(stop);
        tokio::pin!(stopped);
        loop {
            let tcp = tokio::select! {
                () = &mut stopped => break,
                r = listener.accept() => match r {
                    Ok((tcp, _)) => tcp,
                    // Out of file descriptors and the like: the next accept may do.
                    Err(e) => {
                        tracing::warn!("app proxy cannot accept a connection: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Ok(tcp) = tcp.into_std() else { continue };
            let w = &workers[turn.fetch_add(1, Ordering::Relaxed) % workers.len()];
            // A full queue: that worker is far behind; the connection waits its turn.
            let _ = w.send(tcp).await;
        }
        drop(workers);
        for d in done {
            let _ = d.await;
        }
    }))
}

/// Ends when `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
