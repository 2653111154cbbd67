//! The app listener's workers (issue 42, second pass): one thread per core, each with a
//! current-thread tokio runtime, its own app router and its own connection pool, and every
//! connection a worker is given served on that worker alone, as nginx's workers do.
//!
//! Why: on the manager's multi-threaded runtime a proxied request crossed threads at every
//! hand-off (the client connection's task, the answer back), each a futex wake-up and a
//! context switch; on one thread the same hand-offs are a queue push. A connection is
//! accepted on the manager's runtime (one listener, nothing else can bind its port) and
//! handed to the workers in turn: keep-alive clients pay that once per connection.
//!
//! A worker's runtime is never dropped: what its tasks opened for the rest of the manager
//! (a store connection a request opened, a forward to an agent) stays driven.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::manager::Manager;

/// Connections waiting for their worker, per worker.
const QUEUE: usize = 1024;

/// A worker's listener: the connections handed to it.
struct Handed {
    rx: mpsc::Receiver<std::net::TcpStream>,
    addr: std::net::SocketAddr,
}

impl axum::serve::Listener for Handed {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(tcp) = self.rx.recv().await else {
                // The acceptor stopped: the shutdown signal ends the server.
                return std::future::pending().await;
            };
            let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else { continue };
            // Small WebSocket frames and answers must not wait for delayed ACKs (Nagle).
            let _ = tcp.set_nodelay(true);
            let Ok(peer) = tcp.peer_addr() else { continue };
            return (tcp, peer);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// Serves the app proxy on `listener` with one worker per core until `stop` turns true; the
/// handle ends when every worker's server has (their open connections done or cut).
pub fn serve(
    m: Arc<Manager>,
    listener: tokio::net::TcpListener,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let addr = listener.local_addr()?;
    let mut workers = Vec::with_capacity(n);
    let mut done = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (finished, ended) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::Builder::new().name(format!("berth-apps-{i}")).spawn(move || {
            rt.block_on(async move {
                let served =
                    axum::serve(Handed { rx, addr }, super::router(m)).with_graceful_shutdown(stopped(stop)).await;
                if let Err(e) = served {
                    tracing::error!("app proxy worker failed: {e}");
                }
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
