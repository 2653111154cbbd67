//! The ceiling of berth's serving stack on a machine (bench/serve.sh, issue 42): a minimal
//! reverse proxy on the same crates as the router's direct path (axum's server, hyper-util's
//! pooled HTTP/1.1 client, tokio's multi-threaded runtime) with nothing of berth's in it (no
//! access check, statistics, metrics or retries): round robin over the upstreams' ports.
//!
//!   proxy_ceiling LISTEN_PORT UPSTREAM_PORT...

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

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, ups) = args.split_first().expect("usage: proxy_ceiling LISTEN_PORT UPSTREAM_PORT...");
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let p = Arc::new(Proxy {
        client: Client::builder(TokioExecutor::new()).build(http),
        upstreams: ups.iter().map(|u| format!("127.0.0.1:{u}")).collect(),
        turn: AtomicUsize::new(0),
    });
    let app = axum::Router::new().fallback(move |req: Request<Body>| forward(p.clone(), req));
    let l = tokio::net::TcpListener::bind(("127.0.0.1", listen.parse::<u16>().expect("a port"))).await.unwrap();
    let l = axum::serve::ListenerExt::tap_io(l, |t| {
        let _ = t.set_nodelay(true);
    });
    axum::serve(l, app).await.unwrap();
}
