//! `/serve/<name>/...` on the app listener: who may call an endpoint, and which replica
//! answers.
//!
//! Access: anyone for a public endpoint; otherwise a bearer token, either one of the
//! endpoint's own (`berth serve token create`) or the API token of its owner or an admin.
//! A request without a token gets 401 whether the endpoint exists or not; one with any token
//! that may not call it (another user's, a revoked one, garbage) the same 404 as an endpoint
//! that does not exist, so a private endpoint cannot be told from a missing one.
//!
//! Balancing: the ready replica with the fewest requests in flight (a response counts until
//! its body is sent, so long streams weigh as they should), ties taken in turn. A request
//! that could not reach its replica (no connection), or an idempotent request without a body
//! whose connection failed before an answer, is sent to another ready replica, up to three
//! tries; the replica leaves the rotation until a probe passes. An autoscaled endpoint at
//! zero replicas gets one started, and the request waits up to the cold-start timeout.
//!
//! The replica sees the path without `/serve/<name>` (`X-Forwarded-Prefix` says it), never
//! berth's token or cookies. The app proxy reaches it straight at its port where `direct`
//! found that reachable, else through its agent; who may call is decided here, before either.

use std::cell::Cell;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use berth_model::JobId;
use berth_model::endpoint::ReplicaState;
use hyper::body::Incoming;
use sha2::Digest;
use tokio::sync::Notify;

use super::Endpoint;
use super::stats::Traffic;
use crate::apps::proxy::{AppKey, Forwarded, Proxy, plain};
use crate::manager::Manager;

/// Tries per request (the first and two retries on other replicas).
const TRIES: usize = 3;

/// Where the endpoints' paths start.
const SERVE: &str = "/serve/";

/// Which replica answered (a job ID), on every answer.
const X_BERTH_REPLICA: HeaderName = HeaderName::from_static("x-berth-replica");

thread_local! {
    /// Whose turn a tie is, per thread: each app worker takes ties in turn on its own (one
    /// counter for all of them was a cache line both cores wrote every request: issue 42).
    static TURN: Cell<usize> = const { Cell::new(0) };
}

/// `/serve/<name>` and the rest of the path (`None`: no `/` after the name).
fn parse_path(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix(SERVE)?;
    let (name, rest) = match rest.split_once('/') {
        Some((n, r)) => (n, Some(r)),
        None => (rest, None),
    };
    berth_model::app::valid_app_name(name).ok()?;
    Some((name, rest))
}

/// A request in flight on a replica: counted until its response body is done.
struct InFlight(Arc<AtomicU64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted while it streams.
struct Counted {
    inner: Incoming,
    _inflight: InFlight,
}

impl HttpBody for Counted {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

enum Pick {
    /// The replica, its `X-Berth-Replica` header, and its count of requests in flight taken.
    Replica(AppKey, HeaderValue, InFlight),
    /// None ready: wait for one until the deadline.
    Wait(Arc<Notify>, Instant),
    Unavailable(String),
}

/// The ready replica of endpoint `id` with the fewest requests in flight, not one of `tried`.
fn pick(m: &Manager, id: i64, tried: &[JobId], started: Instant) -> Pick {
    match m.serving.lock().get_mut(&id) {
        Some(ep) => pick_in(m, ep, tried, started),
        None => Pick::Unavailable("the endpoint was removed".into()),
    }
}

/// [`pick`] in endpoint `ep`, under the serving lock.
fn pick_in(m: &Manager, ep: &mut Endpoint, tried: &[JobId], started: Instant) -> Pick {
    // One reading of each count: they change under us (responses end without this lock).
    let mut least: Option<(u64, usize)> = None;
    let ready = || ep.replicas.values().filter(|r| r.state == ReplicaState::Ready && !tried.contains(&r.job));
    for r in ready() {
        let n = r.inflight.load(Ordering::Relaxed);
        least = match least {
            Some((l, ties)) if l < n => Some((l, ties)),
            Some((l, ties)) if l == n => Some((l, ties + 1)),
            _ => Some((n, 1)),
        };
    }
    if let Some((n, ties)) = least {
        // Ties taken in turn; a count that moved since the reading above is only skipped.
        let turn = TURN.with(|t| {
            let n = t.get();
            t.set(n.wrapping_add(1));
            n
        }) % ties;
        let r = ready().filter(|r| r.inflight.load(Ordering::Relaxed) == n).nth(turn).or_else(|| ready().next());
        if let Some(r) = r {
            r.inflight.fetch_add(1, Ordering::Relaxed);
            return Pick::Replica(r.key(), r.header.clone(), InFlight(r.inflight.clone()));
        }
    }
    if !tried.is_empty() {
        return Pick::Unavailable("no other replica is ready".into());
    }
    let Some(a) = ep.row.spec.autoscale.clone() else {
        let why = ep.replicas.values().find_map(|r| r.reason.clone()).unwrap_or_else(|| "none is running".into());
        return Pick::Unavailable(format!("no replica is ready ({} wanted): {why}", ep.row.desired));
    };
    if ep.row.desired == 0 {
        tracing::info!(endpoint = ep.row.name, "a request to an endpoint at zero: starting a replica");
        ep.row.desired = 1;
        ep.dirty = true;
        ep.scaler.wake(m.serving.now());
        m.serving.kick.notify_one();
    }
    Pick::Wait(ep.ready.clone(), started + Duration::from_secs(u64::from(a.cold_start_secs)))
}

/// Whether the request can be sent again: idempotent, no body, no upgrade.
fn replayable(req: &Request<Body>) -> bool {
    let idempotent = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let h = req.headers();
    let no_body = h.get(header::CONTENT_LENGTH).is_none_or(|v| v == "0") && !h.contains_key(header::TRANSFER_ENCODING);
    idempotent && no_body && !h.contains_key(header::UPGRADE)
}

/// An admitted request: its endpoint, where its traffic is recorded, its
/// `X-Forwarded-Prefix`, and the first pick.
struct Admitted {
    id: i64,
    traffic: Arc<Traffic>,
    prefix: Option<HeaderValue>,
    pick: Pick,
}

pub async fn handle(m: &Arc<Manager>, proxy: &Proxy, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    // The URI's parts are shared bytes: this copy costs a count, and lets the request move on
    // while its path is read.
    let uri = req.uri().clone();
    let Some((name, rest)) = parse_path(uri.path()) else {
        return plain(StatusCode::NOT_FOUND, "not found: endpoints are at /serve/NAME/ (berth serve ls)".into());
    };
    // `/serve/NAME`: what `X-Forwarded-Prefix` says.
    let prefix = &uri.path()[..SERVE.len() + name.len()];
    if rest.is_none() {
        let q = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        let mut r = plain(StatusCode::PERMANENT_REDIRECT, String::new());
        if let Ok(v) = HeaderValue::from_str(&format!("{prefix}/{q}")) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    // The path the replica sees: the rest after the prefix, its query kept.
    let path = &uri.path_and_query().map_or("/", |p| p.as_str())[prefix.len()..];
    let Admitted { id, traffic, prefix: prefix_header, pick } = match admit(m, name, req.headers(), started).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let resp = route(m, proxy, id, pick, (prefix, prefix_header), path, req, started).await;
    let took = started.elapsed();
    traffic.record(&m.metrics, name, m.serving.now(), took, resp.status().as_u16());
    resp
}

/// Sends the request to endpoint `id`'s replicas, `first` the admission's pick: again on
/// another replica when it cannot have reached its own (see the module doc). `prefix` is
/// `/serve/NAME` and its header.
#[allow(clippy::too_many_arguments)]
async fn route(
    m: &Arc<Manager>,
    proxy: &Proxy,
    id: i64,
    first_pick: Pick,
    (prefix, prefix_header): (&str, Option<HeaderValue>),
    path: &str,
    req: Request<Body>,
    started: Instant,
) -> Response<Body> {
    let name = &prefix[SERVE.len()..];
    let replay = replayable(&req);
    let (mut parts, body) = req.into_parts();
    parts.uri = match Uri::try_from(path) {
        Ok(u) => u,
        Err(e) => return plain(StatusCode::BAD_REQUEST, format!("invalid request path: {e}")),
    };
    let host = parts.headers.get(header::HOST).cloned();
    let forwarded =
        || Forwarded { proto: if m.tls { "https" } else { "http" }, host: host.clone(), prefix: prefix_header.clone() };
    // A retry is a copy of the head with no body; the first try takes the request as it came
    // (its upgrade handle included).
    let again = replay.then(|| (parts.method.clone(), parts.uri.clone(), parts.headers.clone()));
    let mut first = Some(Request::from_parts(parts, body));
    let mut tried: Vec<JobId> = Vec::new();
    let mut last = String::new();
    // The admission's pick goes first (made under the same lock as the access check).
    let mut picked = Some(first_pick);
    while tried.len() < TRIES {
        let (key, replica, inflight) = match picked.take().unwrap_or_else(|| pick(m, id, &tried, started)) {
            Pick::Replica(k, h, g) => (k, h, g),
            Pick::Unavailable(why) if tried.is_empty() => return unavailable(name, &why),
            Pick::Unavailable(_) => break,
            Pick::Wait(ready, deadline) => {
                let notified = ready.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Pick::Replica(k, h, g) = pick(m, id, &tried, started) {
                    (k, h, g)
                } else if tokio::time::timeout_at(deadline.into(), notified).await.is_ok() {
                    continue;
                } else {
                    return timeout(name, deadline.saturating_duration_since(started));
                }
            }
        };
        let req = match (first.take(), &again) {
            (Some(r), _) => r,
            (None, Some((method, uri, headers))) => {
                let mut r = Request::new(Body::empty());
                *r.method_mut() = method.clone();
                *r.uri_mut() = uri.clone();
                *r.headers_mut() = headers.clone();
                r
            }
            (None, None) => break,
        };
        let job = key.job;
        match proxy.send(key, req, forwarded(), started).await {
            Ok(resp) => {
                let (mut p, b) = resp.into_parts();
                p.headers.insert(X_BERTH_REPLICA, replica);
                return Response::from_parts(p, Body::new(Counted { inner: b, _inflight: inflight }));
            }
            Err(e) => {
                super::controller::unreachable(m, job, &e.to_string());
                last = format!("replica job {job}: {e}");
                tried.push(job);
                if !replay {
                    break;
                }
            }
        }
    }
    plain(StatusCode::BAD_GATEWAY, format!("endpoint `{name}` did not answer: {last}"))
}

fn unavailable(name: &str, why: &str) -> Response<Body> {
    let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, format!("endpoint `{name}` has no ready replica: {why}"));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn timeout(name: &str, waited: Duration) -> Response<Body> {
    plain(
        StatusCode::GATEWAY_TIMEOUT,
        format!("endpoint `{name}` got no ready replica within {}s (its cold-start timeout)", waited.as_secs()),
    )
}

/// Who may call endpoint `name` (see the module doc), and with one take of the serving lock
/// for a caller the endpoint itself admits (public, or one of its tokens): the arrival noted
/// and the first replica picked. A caller with an API token is checked outside the lock (its
/// owner or an admin), then picks.
///
/// Every refusal with a token is the one 404 an unknown endpoint gets, whatever the token
/// was (garbage, revoked, another user's): a private endpoint must not be found by trying
/// names. The token is checked even when no endpoint has the name, so both take the same path.
async fn admit(
    m: &Manager,
    name: &str,
    headers: &axum::http::HeaderMap,
    started: Instant,
) -> Result<Admitted, Response<Body>> {
    let token = crate::auth::bearer_of(headers);
    // `token::hash_token`'s hex, without its String (one per request).
    let mut hex = [0u8; 64];
    let hash = token.and_then(|t| {
        hex::encode_to_slice(sha2::Sha256::digest(t.as_bytes()), &mut hex).ok()?;
        std::str::from_utf8(&hex).ok()
    });
    let found = {
        let mut eps = m.serving.lock();
        match eps.values_mut().find(|e| e.row.name == name) {
            Some(ep) if ep.row.spec.public || hash.is_some_and(|h| ep.tokens.contains_key(h)) => {
                ep.traffic.arrived(m.serving.now());
                let pick = pick_in(m, ep, &[], started);
                return Ok(Admitted { id: ep.row.id, traffic: ep.traffic.clone(), prefix: ep.prefix.clone(), pick });
            }
            Some(ep) => Some((ep.row.id, ep.row.owner_id, ep.traffic.clone(), ep.prefix.clone())),
            None => None,
        }
    };
    let Some(token) = token else {
        let mut r = plain(
            StatusCode::UNAUTHORIZED,
            format!(
                "endpoint `{name}` needs a token: send `Authorization: Bearer TOKEN` (berth serve token create {name})"
            ),
        );
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Err(r);
    };
    let user = m.tenancy.authenticate(token).await.ok();
    match (found, user) {
        (Some((id, owner, traffic, prefix)), Some(u)) if u.id == owner || u.is_admin() => {
            traffic.arrived(m.serving.now());
            Ok(Admitted { id, traffic, prefix, pick: pick(m, id, &[], started) })
        }
        _ => Err(not_found(name)),
    }
}

/// The answer to an endpoint that does not exist, or that the caller may not call: the name
/// is the caller's own, so echoing it confirms nothing.
fn not_found(name: &str) -> Response<Body> {
    plain(StatusCode::NOT_FOUND, format!("no endpoint `{name}` that this token may call: see berth serve ls"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_paths() {
        assert_eq!(parse_path("/serve/llm/v1/chat"), Some(("llm", Some("v1/chat"))));
        assert_eq!(parse_path("/serve/llm/"), Some(("llm", Some(""))));
        assert_eq!(parse_path("/serve/llm"), Some(("llm", None)));
        assert_eq!(parse_path("/serve/LLM/"), None);
        assert_eq!(parse_path("/apps/1/x/"), None);
    }

    #[test]
    fn endpoint_tokens_are_looked_up_by_the_hash_the_store_keeps() {
        let mut hex = [0u8; 64];
        hex::encode_to_slice(sha2::Sha256::digest(b"s3cret"), &mut hex).unwrap();
        assert_eq!(std::str::from_utf8(&hex).unwrap(), crate::token::hash_token("s3cret"));
    }

    #[test]
    fn only_bodiless_idempotent_requests_are_sent_again() {
        let get = Request::get("/").body(Body::empty()).unwrap();
        assert!(replayable(&get));
        let post = Request::post("/").header("content-length", "3").body(Body::from("abc")).unwrap();
        assert!(!replayable(&post));
        let ws = Request::get("/").header("upgrade", "websocket").body(Body::empty()).unwrap();
        assert!(!replayable(&ws));
    }
}
