//! HTTP to a job's app over forwarded connections: HTTP/1.1 connections that open a forward
//! into the job's main kernel (`StreamOpen::Forward`, through the node's agent), or for a
//! serving replica that is reachable, a TCP connection straight to its port (`direct.rs`),
//! pooled per app and kept alive like any HTTP client's (`pool.rs`), and WebSocket upgrades
//! (Jupyter's kernels) are carried through as raw bytes.
//!
//! What reaches the app: the request as the browser sent it (its path keeps the
//! `/apps/<job>/<app>/` prefix, which the app was told as its base URL, unless the app strips
//! it, `--app NAME=PORT,strip`, done in `apps/`; and its `Host`, which Jupyter compares with
//! `Origin`), without berth's cookies or token, with the app's own token when it has one
//! (`Authorization: token ...`), and `X-Forwarded-*`. What comes back: the answer, without
//! any cookie named like berth's (an app must not plant a dashboard session).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header};
use berth_model::protocol::{ForwardTarget, StreamOpen};
use berth_model::stream::ForwardOpened;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::direct::{AppIo, Routes};
pub use super::key::AppKey;
use super::pool::Pool;
use crate::manager::Manager;
use crate::streams::{StreamError, TunnelError, open_stream, tunnel};

/// What the apps' forwards said when they opened (their tokens; `None`: the app takes none).
type Opened = Arc<Mutex<HashMap<AppKey, ForwardOpened>>>;

/// Opens connections to apps: direct where the replica's route says so, else (and when a
/// direct connection fails) a forward.
#[derive(Clone)]
pub struct Connector {
    m: Arc<Manager>,
    opened: Opened,
    routes: Routes,
}

impl Connector {
    /// A new connection to app `key`: straight to its port where its route says so, else
    /// through its agent.
    async fn connect(&self, key: &AppKey) -> Result<AppIo, OpenError> {
        if let Some(addr) = self.routes.direct(key) {
            match super::direct::connect(addr).await {
                Ok(io) => return Ok(io),
                // Nothing is sent yet: the request goes through the tunnel instead, and the
                // replica's next passing probe decides its route again.
                Err(e) => {
                    tracing::info!(job = key.job, "direct connection failed, through the agent instead: {e}");
                    self.routes.forget(key);
                }
            }
        }
        self.open(key).await
    }

    /// A new forwarded connection to the app, what it said noted.
    async fn open(&self, key: &AppKey) -> Result<AppIo, OpenError> {
        let open = StreamOpen::Forward { target: ForwardTarget::App(key.app.to_string()) };
        let ws = open_stream(&self.m, key.job, 0, open).await?;
        let (opened, io) = tunnel(ws).await?;
        self.opened.lock().expect("app forwards lock").insert(key.clone(), opened);
        Ok(AppIo::Tunnel(TokioIo::new(io)))
    }

    /// The app's token: known from a connection made before (or the replica's route), else
    /// learnt from a new one (which the pool does not get: the first request pays one extra
    /// forward).
    async fn token(&self, key: &AppKey) -> Result<Option<String>, OpenError> {
        // A serving replica's route holds the same token as its forwards (one per attempt):
        // looked up first, it spares a replica's request the other lock.
        if let Some(t) = self.routes.token(key) {
            return Ok(t);
        }
        if let Some(o) = self.opened.lock().expect("app forwards lock").get(key) {
            return Ok(o.token.clone());
        }
        self.open(key).await?;
        Ok(self.opened.lock().expect("app forwards lock").get(key).and_then(|o| o.token.clone()))
    }
}

/// The app proxy's HTTP client: a pool of HTTP/1.1 connections per app (`pool.rs`).
pub struct Proxy {
    pool: Pool,
    connector: Connector,
}

/// Cookies whose names start with this are berth's (the dashboard's and the apps' sessions).
pub const BERTH_COOKIE_PREFIX: &str = "berth";

impl Proxy {
    /// A proxy whose serving replicas are reached by `routes` (shared by the router and the
    /// controller, which decides them).
    pub fn new(m: Arc<Manager>, routes: Routes) -> Proxy {
        Proxy { pool: Pool::default(), connector: Connector { m, opened: Opened::default(), routes } }
    }

    /// What the last forward to app `key` said when it opened.
    pub fn opened(&self, key: &AppKey) -> Option<ForwardOpened> {
        self.connector.opened.lock().expect("app forwards lock").get(key).cloned()
    }

    /// How serving replicas are reached.
    pub fn routes(&self) -> &Routes {
        &self.connector.routes
    }

    /// Forwards `req` to app `key`; `forwarded` is what `X-Forwarded-*` tell the app.
    pub async fn forward(&self, key: AppKey, req: Request<Body>, forwarded: Forwarded) -> Response<Body> {
        match self.send(key.clone(), req, forwarded, Instant::now()).await {
            Ok(r) => r.map(Body::new),
            Err(e) => unavailable(&key, &e.to_string()),
        }
    }

    /// [`Proxy::forward`], with the failure said apart: whether the request can have reached
    /// the app (a serving endpoint retries the ones that cannot on another replica). `now`:
    /// when the request arrived, the pool's clock (one reading fewer per request).
    pub async fn send(
        &self,
        key: AppKey,
        mut req: Request<Body>,
        forwarded: Forwarded,
        now: Instant,
    ) -> Result<Response<Incoming>, SendError> {
        let token = self.connector.token(&key).await.map_err(|e| SendError::Connect(e.to_string()))?;
        // The forward is HTTP/1.1 whatever the client spoke (HTTP/2 ends here).
        *req.version_mut() = axum::http::Version::HTTP_11;
        clean_request_headers(req.headers_mut(), token.as_deref(), &forwarded);
        let client_upgrade = is_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
        let mut resp = self.round_trip(&key, req, now).await?;
        clean_response_headers(resp.headers_mut());
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let app_upgrade = hyper::upgrade::on(&mut resp);
            let m = self.connector.m.clone();
            tokio::spawn(async move {
                // An open WebSocket (a notebook's kernel) is a client attached to the session.
                let _attached = m.sessions.attach(key.job);
                if let (Ok(client), Ok(app)) = (client_upgrade.await, app_upgrade.await) {
                    let (mut client, mut app) = (TokioIo::new(client), TokioIo::new(app));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
                }
            });
        }
        Ok(resp)
    }

    /// Sends `req` to app `key` on a pooled connection, or a new one: its path in origin
    /// form, a `Host` header where the client sent none (HTTP/2 has `:authority` instead).
    /// A pooled connection that closed before the request could go on it (the app closed it
    /// while idle) is not the app's failure: the request goes on another, or a new one.
    async fn round_trip(
        &self,
        key: &AppKey,
        mut req: Request<Body>,
        now: Instant,
    ) -> Result<Response<Incoming>, SendError> {
        let pq = req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        *req.uri_mut() = Uri::from(pq);
        if !req.headers().contains_key(header::HOST)
            && let Ok(h) = HeaderValue::from_str(&key.authority())
        {
            req.headers_mut().insert(header::HOST, h);
        }
        loop {
            let (mut send, pooled) = match self.pool.take(key, now) {
                Some(s) => (s, true),
                None => (self.handshake(key).await.map_err(|e| SendError::Connect(e.to_string()))?, false),
            };
            match send.try_send_request(req).await {
                Ok(resp) => {
                    // An upgraded connection is the upgrade's now.
                    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
                        self.pool.put(key, send, now);
                    }
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    Some(r) if pooled => req = r,
                    Some(_) => return Err(SendError::Connect(why(&e.into_error()))),
                    // A dead connection or a restarted app: the next request gets a new one.
                    None => return Err(SendError::Failed(why(&e.into_error()))),
                },
            }
        }
    }

    /// A new connection to app `key`, its HTTP/1.1 driven by a task of its own.
    async fn handshake(&self, key: &AppKey) -> Result<hyper::client::conn::http1::SendRequest<Body>, OpenError> {
        let io = self.connector.connect(key).await?;
        let (send, conn) = hyper::client::conn::http1::handshake(io).await.map_err(OpenError::Handshake)?;
        let job = key.job;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(job, "connection to an app ended: {}", why(&e));
            }
        });
        Ok(send)
    }

    /// A health probe: `GET path` answered 2xx or 3xx, or (no path) a connection opens.
    pub async fn probe(
        &self,
        key: &AppKey,
        path: Option<&str>,
        timeout: std::time::Duration,
    ) -> Result<(), ProbeError> {
        let work = async {
            let Some(path) = path else {
                return self.connector.open(key).await.map(drop).map_err(ProbeError::from);
            };
            let req = Request::get(path).header(header::USER_AGENT, "berth-probe").body(Body::empty())?;
            let resp = self.round_trip(key, req, Instant::now()).await?;
            let status = resp.status();
            // Read the body so the connection goes back to the pool.
            let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
            if status.is_success() || status.is_redirection() {
                Ok(())
            } else {
                Err(ProbeError::Status { path: path.to_string(), status })
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::TimedOut(timeout)),
        }
    }
}

/// What went wrong, as the innermost cause says it (hyper's own words are generic).
fn why(e: &hyper::Error) -> String {
    std::error::Error::source(e).map(|s| s.to_string()).unwrap_or_else(|| e.to_string())
}

/// Why no connection to an app was made.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No forward into the job's kernel (the job is not running, its node is gone...).
    #[error("{0}")]
    Stream(#[from] StreamError),
    /// The agent could not connect to the app.
    #[error("{0}")]
    Tunnel(#[from] TunnelError),
    /// The connection opened, but HTTP/1.1 could not start on it.
    #[error("{}", why(.0))]
    Handshake(hyper::Error),
}

/// Why a health probe failed; the text is the replica's reason (`berth serve show`).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Open(#[from] OpenError),
    /// The probe's path is not one a request can carry.
    #[error("{0}")]
    Request(#[from] axum::http::Error),
    #[error("{0}")]
    Send(#[from] SendError),
    #[error("GET {path} answered {status}")]
    Status { path: String, status: StatusCode },
    #[error("no answer within {} ms", .0.as_millis())]
    TimedOut(std::time::Duration),
}

/// Why a request did not get an answer from the app.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No connection could be made: the request never left.
    #[error("{0}")]
    Connect(String),
    /// The connection failed after the request was (perhaps) sent.
    #[error("{0}")]
    Failed(String),
}

/// What the app is told about the original request.
pub struct Forwarded {
    pub proto: &'static str,
    pub host: Option<HeaderValue>,
    /// The path the app is mounted at (`None`: not one a header can hold, so not said).
    pub prefix: Option<HeaderValue>,
}

const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
}

/// Takes berth's cookies and token out, puts the app's token and `X-Forwarded-*` in.
fn clean_request_headers(h: &mut HeaderMap, token: Option<&str>, f: &Forwarded) {
    if h.contains_key(header::COOKIE) {
        clean_cookies(h);
    }
    h.remove(header::AUTHORIZATION);
    if let Some(t) = token
        && let Ok(v) = HeaderValue::from_str(&format!("token {t}"))
    {
        h.insert(header::AUTHORIZATION, v);
    }
    h.insert(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
    if let Some(host) = &f.host {
        h.insert(X_FORWARDED_HOST, host.clone());
    }
    if let Some(prefix) = &f.prefix {
        h.insert(X_FORWARDED_PREFIX, prefix.clone());
    }
}

/// Takes berth's cookies out of the `Cookie` headers.
fn clean_cookies(h: &mut HeaderMap) {
    let kept: Vec<String> = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.starts_with(BERTH_COOKIE_PREFIX))
        .map(str::to_string)
        .collect();
    h.remove(header::COOKIE);
    if !kept.is_empty()
        && let Ok(v) = HeaderValue::from_str(&kept.join("; "))
    {
        h.insert(header::COOKIE, v);
    }
}

/// Drops the cookies an app sets under berth's names.
fn clean_response_headers(h: &mut HeaderMap) {
    let berths = |v: &HeaderValue| v.to_str().is_ok_and(|s| s.trim_start().starts_with(BERTH_COOKIE_PREFIX));
    if !h.get_all(header::SET_COOKIE).iter().any(berths) {
        return;
    }
    let kept: Vec<HeaderValue> = h.get_all(header::SET_COOKIE).iter().filter(|v| !berths(v)).cloned().collect();
    h.remove(header::SET_COOKIE);
    for v in kept {
        h.append(header::SET_COOKIE, v);
    }
}

pub fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(Body::from(text + "\n"));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn unavailable(key: &AppKey, why: &str) -> Response<Body> {
    plain(StatusCode::BAD_GATEWAY, format!("app `{}` of job {} does not answer: {why}", key.app, key.job))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn berths_cookies_and_token_never_reach_the_app() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "berth_session=s; _xsrf=x; berth-app-7-web=t".parse().unwrap());
        h.append(header::COOKIE, "theme=dark".parse().unwrap());
        h.insert(header::AUTHORIZATION, "Bearer api-token".parse().unwrap());
        let f = Forwarded { proto: "http", host: None, prefix: Some(HeaderValue::from_static("/apps/7/web/")) };
        clean_request_headers(&mut h, Some("app-secret"), &f);
        assert_eq!(h.get(header::COOKIE).unwrap(), "_xsrf=x; theme=dark");
        assert_eq!(h.get(header::AUTHORIZATION).unwrap(), "token app-secret");
        assert_eq!(h.get("x-forwarded-prefix").unwrap(), "/apps/7/web/");
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer api-token".parse().unwrap());
        clean_request_headers(&mut h, None, &f);
        assert!(h.get(header::AUTHORIZATION).is_none());

        let mut r = HeaderMap::new();
        r.append(header::SET_COOKIE, "berth_session=evil; Path=/".parse().unwrap());
        r.append(header::SET_COOKIE, "_xsrf=1; Path=/apps/7/web/".parse().unwrap());
        clean_response_headers(&mut r);
        assert_eq!(r.get_all(header::SET_COOKIE).iter().collect::<Vec<_>>(), ["_xsrf=1; Path=/apps/7/web/"]);
        // An app's own cookies alone go through untouched, in order.
        let mut r = HeaderMap::new();
        r.append(header::SET_COOKIE, "a=1".parse().unwrap());
        r.append(header::SET_COOKIE, "b=2".parse().unwrap());
        clean_response_headers(&mut r);
        assert_eq!(r.get_all(header::SET_COOKIE).iter().collect::<Vec<_>>(), ["a=1", "b=2"]);
        // A request without cookies gets none.
        let mut h = HeaderMap::new();
        clean_request_headers(&mut h, None, &f);
        assert!(h.get(header::COOKIE).is_none());
    }
}
