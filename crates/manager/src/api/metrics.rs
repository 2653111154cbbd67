//! `GET /metrics` (Prometheus) and the middleware that counts every API request by method,
//! route template and status.
//!
//! `/metrics` without a token answers, as Prometheus scrapers expect, with the cluster's
//! series: counts per queue, state and node, never a job id, user name, token or a tenant's
//! object (see `crate::metrics`). The series that name endpoints need an admin's token or the
//! scrape token (`crate::metrics::view`), unless the admin made them public. A site that
//! wants the rest private too filters the path at its proxy or firewall, like the rest of the
//! port.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::manager::Manager;
use crate::metrics::CONTENT_TYPE;

/// The exposition the caller may see: levels counted under the state lock, encoded after it
/// is released.
pub async fn scrape(State(m): State<Arc<Manager>>, headers: HeaderMap) -> Response {
    let view = match crate::metrics::view(&m, crate::auth::bearer_of(&headers)).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let queues = m.queues.all();
    let snapshot = m.jobs.metrics_snapshot(&queues).await.with_leader(m.lease.may_act(), m.lease.epoch());
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], m.metrics.render(&snapshot, view)).into_response()
}

/// Counts a request under its route template (`/v1/jobs/{id}`), never its raw path, so the
/// series stay bounded; requests no route matched count as `unmatched`.
pub async fn track(State(m): State<Arc<Manager>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let method = req.method().clone();
    let res = next.run(req).await;
    let route = route.as_deref().unwrap_or("unmatched");
    m.metrics.request(method.as_str(), route, res.status().as_u16(), started.elapsed());
    res
}
