//! The access log: one line per API or app-proxy request (target `berth::access`, at info):
//! method, path, status and time taken. The query is left out: one-time login codes travel
//! in it. Filter it like any log (`RUST_LOG=info,berth::access=off`); with
//! `--log-format json` its fields are the line's keys. Serving endpoints' requests are at
//! debug (`RUST_LOG=info,berth::access=debug` shows them): they come by the thousand a
//! second, and their counts and latencies are in the metrics; the app listener does not even
//! copy their method and path unless that level is on ([`serving_lines`]).

use std::time::Instant;

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

/// The middleware (`axum::middleware::from_fn(access_log::log)`).
pub async fn log(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let start = Instant::now();
    let resp = next.run(req).await;
    line(&method, &path, resp.status().as_u16(), start);
    resp
}

/// The line of a request to `path` answered `status`, started at `start`.
pub fn line(method: &Method, path: &str, status: u16, start: Instant) {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if path.starts_with("/serve/") {
        tracing::debug!(target: "berth::access", %method, path, status, ms, "request");
    } else {
        tracing::info!(target: "berth::access", %method, path, status, ms, "request");
    }
}

/// Whether serving endpoints' lines are wanted (`berth::access` at debug): when not, the app
/// listener copies nothing of a `/serve/` request for them (issue 42: tens of thousands a
/// second on one endpoint).
pub fn serving_lines() -> bool {
    tracing::enabled!(target: "berth::access", tracing::Level::DEBUG)
}
