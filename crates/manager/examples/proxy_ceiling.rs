//! The ceiling of berth's serving stack on a machine (bench/serve.sh, issue 42): a minimal
//! reverse proxy on the same crates as the router's direct path (axum's server, hyper's
//! HTTP/1.1 client, tokio) with nothing of berth's in it (no access check, statistics, metrics
//! or retries): round robin over the upstreams' ports.
//!
//!   proxy_ceiling [--mode MODE] LISTEN_PORT UPSTREAM_PORT...
//!
//! MODE says how the stack is put together, so each of the changes the router could make is
//! measured on its own:
//! - `mt` (the default before issue 42's second pass): tokio's multi-threaded runtime, one
//!   hyper-util pooled client whose connections run in tasks of their own;
//! - `ct`: a current-thread runtime per core, each with its own `SO_REUSEPORT` listener and
//!   its own pool (nginx's worker model: a request never leaves the thread that accepted it);
//! - `pool`: as `ct`, with a pool of hyper's `client::conn::http1` connections per thread
//!   instead of hyper-util's pooled client;
//! - `lean`: as `pool`, with hyper's HTTP/1.1 server (`server::conn::http1`) instead of axum's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

struct Proxy {
    client: Client<HttpConnector, Body>,
    upstreams: Vec<String>,
    turn: AtomicUsize,
}

async fn forward(p: Arc<Proxy>, mut req: Request<Body>) -> Response<Body> {
    let up = &p.upstreams[p.turn.fetch_add(1, Ordering::Relaxed) % p.upstreams.len()];
    let path = req.uri().path_and_query().map(|x| x.as_str()).unwrap_or("/");
    match format!("http://{up}{path}").parse::<Uri>() {
        Ok(u) => *req.uri_mut() = u,
        Err(_) => return Response::builder().status(StatusCode::BAD_REQUEST).body(Body::empty()).unwrap(),
    }
    match p.client.request(req).await {
        Ok(r) => r.map(Body::new),
        Err(_) => Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap(),
    }
}

fn proxy(ups: &[String]) -> Arc<Proxy> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Arc::new(Proxy {
        client: Client::builder(TokioExecutor::new()).build(http),
        upstreams: ups.iter().map(|u| format!("127.0.0.1:{u}")).collect(),
        turn: AtomicUsize::new(0),
    })
}

async fn serve(l: tokio::net::TcpListener, p: Arc<Proxy>) {
    let app = axum::Router::new().fallback(move |req: Request<Body>| forward(p.clone(), req));
    let l = axum::serve::ListenerExt::tap_io(l, |t| {
        let _ = t.set_nodelay(true);
    });
    axum::serve(l, app).await.unwrap();
}

/// Idle HTTP/1.1 connections to the upstreams, per thread: a request takes a ready one or
/// opens one; the connection's task runs on the same thread.
struct Pool {
    upstreams: Vec<std::net::SocketAddr>,
    idle: std::sync::Mutex<Vec<Vec<hyper::client::conn::http1::SendRequest<Body>>>>,
    turn: AtomicUsize,
}

impl Pool {
    async fn forward(&self, mut req: Request<Body>) -> Response<Body> {
        let i = self.turn.fetch_add(1, Ordering::Relaxed) % self.upstreams.len();
        let found = {
            let mut idle = self.idle.lock().unwrap();
            let list = &mut idle[i];
            list.retain(|s| !s.is_closed());
            list.iter().position(|s| s.is_ready()).map(|at| list.swap_remove(at))
        };
        let mut send = match found {
            Some(s) => s,
            None => {
                let tcp = match tokio::net::TcpStream::connect(self.upstreams[i]).await {
                    Ok(t) => t,
                    Err(_) => return Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap(),
                };
                let _ = tcp.set_nodelay(true);
                let (send, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
                tokio::spawn(conn);
                send
            }
        };
        let path = req.uri().path_and_query().map(|x| x.as_str().to_string()).unwrap_or_else(|| "/".into());
        *req.uri_mut() = path.parse().unwrap();
        let r = send.send_request(req).await;
        self.idle.lock().unwrap()[i].push(send);
        match r {
            Ok(r) => r.map(Body::new),
            Err(_) => Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap(),
        }
    }
}

fn pool(ups: &[String]) -> Arc<Pool> {
    Arc::new(Pool {
        upstreams: ups.iter().map(|u| ([127, 0, 0, 1], u.parse::<u16>().expect("a port")).into()).collect(),
        idle: std::sync::Mutex::new(ups.iter().map(|_| Vec::new()).collect()),
        turn: AtomicUsize::new(0),
    })
}

async fn serve_pool(l: tokio::net::TcpListener, p: Arc<Pool>, lean: bool) {
    if !lean {
        let app = axum::Router::new().fallback(move |req: Request<Body>| {
            let p = p.clone();
            async move { p.forward(req).await }
        });
        let l = axum::serve::ListenerExt::tap_io(l, |t| {
            let _ = t.set_nodelay(true);
        });
        return axum::serve(l, app).await.unwrap();
    }
    loop {
        let Ok((tcp, _)) = l.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        let p = p.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let p = p.clone();
                async move { Ok::<_, std::convert::Infallible>(p.forward(req.map(Body::new)).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .with_upgrades()
                .await;
        });
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match args.first().map(String::as_str) {
        Some("--mode") if args.len() > 1 => {
            let m = args[1].clone();
            args.drain(..2);
            m
        }
        _ => "mt".to_string(),
    };
    let (listen, ups) = args.split_first().expect("usage: proxy_ceiling [--mode mt|ct] LISTEN_PORT UPSTREAM_PORT...");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], listen.parse::<u16>().expect("a port")).into();
    match mode.as_str() {
        "mt" => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let l = tokio::net::TcpListener::bind(addr).await.unwrap();
                serve(l, proxy(ups)).await
            });
        }
        "ct" | "pool" | "lean" => {
            let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            let threads: Vec<_> = (0..n)
                .map(|_| {
                    let (ups, mode) = (ups.to_vec(), mode.clone());
                    std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                        rt.block_on(async {
                            let s = tokio::net::TcpSocket::new_v4().unwrap();
                            s.set_reuseaddr(true).unwrap();
                            s.set_reuseport(true).unwrap();
                            s.bind(addr).unwrap();
                            let l = s.listen(1024).unwrap();
                            match mode.as_str() {
                                "ct" => serve(l, proxy(&ups)).await,
                                m => serve_pool(l, pool(&ups), m == "lean").await,
                            }
                        })
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
        m => panic!("unknown mode {m}: mt, ct, pool or lean"),
    }
}
