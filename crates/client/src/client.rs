//! The [`Client`] itself: how it is built from [`Credentials`] (over TCP with berth's TLS
//! trust, or over the manager's unix socket), the bearer token on every request, the leader
//! followed among several managers (`leader.rs`), and transport failures and error answers
//! turned into [`Error`]s. The routes are in the resource modules (`jobs.rs`, `nodes.rs`, …).

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_model::api::{ErrorBody, Health, LeaderView};
use berth_tls::client::TlsFailure;
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::Error;
use crate::credentials::{self, Credentials};
use crate::leader::{Managers, READ_TIMEOUT, SendError};

/// A client of one berth cluster's manager (or of several that stand by for each other).
/// Cheap to clone: clones share the connection pool and what they know of the leader.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// What requests are sent to over a unix socket (a fixed URL); `None`: the leader.
    base: Option<String>,
    /// The managers as configured: one URL, or several (comma-separated) that stand by for
    /// each other, of which requests go to the leader (`leader.rs`).
    managers: Managers,
    /// Where the manager is, for messages: its URL, or `unix socket PATH`.
    shown: String,
    token: Option<String>,
    /// The manager's unix socket, when requests go there (`ws.rs` dials it too).
    socket: Option<PathBuf>,
    /// Certificates trusted besides the public roots (`ws.rs`).
    ca_file: Option<PathBuf>,
}

impl Client {
    /// A client for the manager the environment and the credentials file name, in the
    /// context `BERTH_CONTEXT` names (else the file's current one): see [`credentials::load`].
    pub fn from_env() -> Result<Self, Error> {
        Self::new(credentials::load()?)
    }

    /// A client for the manager of `creds`. Fails only on a malformed URL or CA file: nothing
    /// is sent until the first call.
    pub fn new(creds: Credentials) -> Result<Self, Error> {
        let managers = Managers::parse(&creds.url)?;
        let mut http = reqwest::Client::builder()
            // A standby's redirect is followed by hand (`leader.rs`): reqwest would drop the
            // token on the way to another port.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("berth-cli/", env!("CARGO_PKG_VERSION")))
            // A dead host should fail fast; an answer may still take long (big logs), so only
            // the connect step has a short limit.
            .connect_timeout(Duration::from_secs(5));
        if managers.urls().len() > 1 {
            // A frozen manager accepts connections and never answers: with others to ask,
            // give up on it (reads and keyed writes then go elsewhere, see `leader.rs`).
            http = http.read_timeout(READ_TIMEOUT);
        }
        if managers.any_https() || creds.ca_file.is_some() {
            // The agent's trust rules (public roots, the system's store, the CA file's
            // certificates), so the CLI and the agents accept the same managers.
            http = http.use_preconfigured_tls(berth_tls::client::client_config(creds.ca_file.as_deref())?);
        }
        let (base, shown) = match &creds.socket {
            Some(s) => {
                // Plain HTTP on the socket whatever the TCP side serves: the kernel, not TLS,
                // guards a local connection.
                http = http.unix_socket(s.as_path());
                (Some(credentials::SOCKET_URL.to_string()), format!("unix socket {}", s.display()))
            }
            None => (None, managers.shown()),
        };
        let http = http.build().map_err(|e| Error::internal("cannot set up the HTTP client", e))?;
        Ok(Self { http, base, managers, shown, token: creds.token, socket: creds.socket, ca_file: creds.ca_file })
    }

    /// The manager's URL, as others (nodes, other users) reach it: the leader, as far as this
    /// client knows.
    pub fn base_url(&self) -> String {
        self.managers.current()
    }

    /// Every configured manager's URL.
    pub fn manager_urls(&self) -> &[String] {
        self.managers.urls()
    }

    /// The manager's unix socket, when this client talks to it there (on the manager's own
    /// machine, where the kernel tells the manager who calls).
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// Where the manager is, for messages: its URL(s), or `unix socket PATH`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub(crate) fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let base = self.base.clone().unwrap_or_else(|| self.managers.current());
        let req = self.http.request(method, format!("{base}{path}"));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends a request and turns transport failures and error answers into [`Error`]s.
    pub(crate) async fn send(&self, req: RequestBuilder) -> Result<Response, Error> {
        // On a runtime thread, where a program may block SIGPIPE (the CLI does): the
        // connection, its TLS handshake and the task hyper spawns for it never write from the
        // caller's thread, which may keep the default SIGPIPE for `berth ps | head`.
        let resp = match &self.base {
            Some(_) => {
                let sent = tokio::spawn(req.send()).await.map_err(|e| Error::internal("the request task failed", e))?;
                sent.map_err(|e| self.transport_error(e))?
            }
            None => self.managers.send(&self.http, req).await.map_err(|e| match e {
                SendError::Transport(e) => self.transport_error(e),
                SendError::Other(e) => e,
            })?,
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(error_answer(resp).await)
    }

    pub(crate) fn transport_error(&self, e: reqwest::Error) -> Error {
        tracing::debug!(error = ?e, "request failed");
        let at = self.shown.clone();
        // TLS failures happen while connecting: tell them apart from a manager that is down.
        match berth_tls::client::classify(&e) {
            Some(TlsFailure::Untrusted(why)) => Error::Untrusted { at, why },
            Some(TlsFailure::WrongName(why)) => Error::WrongName { at, why },
            Some(TlsFailure::NotTls) => Error::NotTls { at },
            None if e.is_connect() => Error::Unreachable { at, hint: "is `berth up` running?", source: None },
            None if e.is_timeout() => Error::Timeout { at },
            None => Error::Request { at, source: e },
        }
    }

    /// Sends `req` and decodes its JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T, Error> {
        let resp = self.send(req).await?;
        let path = resp.url().path().to_string();
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode { path, source })
    }

    /// `GET /v1/health`: whether a manager is up.
    pub async fn health(&self) -> Result<Health, Error> {
        self.json(self.request(Method::GET, "/v1/health")).await
    }

    /// With several managers, points this client at the leader (a WebSocket cannot follow a
    /// standby's redirect); with one, does nothing.
    pub(crate) async fn find_leader(&self) -> Result<(), Error> {
        if self.base.is_some() || self.managers.urls().len() < 2 {
            return Ok(());
        }
        let v: LeaderView = self.json(self.request(Method::GET, "/v1/leader")).await?;
        match v.leader {
            Some(l) => self.managers.set_current(&l),
            None => return Err(Error::NoLeader),
        }
        Ok(())
    }

    /// `GET /v1/leader` of the manager at `url` itself, redirects not followed (`berth managers`).
    pub async fn leader_at(&self, url: &str) -> Result<LeaderView, Error> {
        let req = self.http.get(format!("{url}/v1/leader"));
        let resp = tokio::spawn(req.send()).await.map_err(|e| Error::internal("the request task failed", e))?;
        let resp = resp.map_err(|e| Error::Protocol(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(error_answer(resp).await);
        }
        resp.json().await.map_err(|e| Error::Protocol(format!("unexpected answer: {e}")))
    }
}

/// Checks that `list` is one manager URL or several, comma-separated, each `http://` or
/// `https://` (what [`Client::new`] accepts).
pub fn check_urls(list: &str) -> Result<(), Error> {
    Managers::parse(list).map(|_| ())
}

/// Percent-encodes everything but unreserved characters, so a name cannot change the path.
pub(crate) fn encode_path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The error of an answer: the manager's own `ErrorBody` (else the body, else the status's
/// name) with its status.
async fn error_answer(resp: Response) -> Error {
    let status = resp.status();
    let body = resp.bytes().await.unwrap_or_default();
    Error::from_body(status, error_body(status, &body))
}

/// The API's `ErrorBody` in `body`, else the body itself (cut) as its text, else the status's
/// name.
pub(crate) fn error_body(status: reqwest::StatusCode, body: &[u8]) -> ErrorBody {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => b,
        Err(_) => {
            let raw = String::from_utf8_lossy(body);
            let raw = raw.trim();
            ErrorBody::new(if raw.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_lowercase()
            } else {
                raw.chars().take(500).collect()
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A one-route-per-call HTTP server: answers every request with `respond(request head)`
    /// and closes the connection. Enough to check what the client sends and how it reads.
    pub(crate) async fn fake(respond: fn(&str) -> String) -> Client {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (mut c, _) = l.accept().await.unwrap();
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = c.read(&mut b).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&b[..n]);
                }
                let answer = respond(&String::from_utf8_lossy(&buf));
                c.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        Client::new(Credentials { url, token: Some("sekret".into()), ca_file: None, socket: None, data_dir: None })
            .unwrap()
    }

    pub(crate) fn answer(status: &str, headers: &str, body: &str) -> String {
        format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n{body}", body.len())
    }

    #[tokio::test]
    async fn error_bodies_become_messages() {
        let c = fake(|req| {
            if req.starts_with("POST /v1/jobs/9/cancel") {
                answer("409 Conflict", "", r#"{"error":"job 9 already finished"}"#)
            } else if req.starts_with("GET /v1/jobs/1 ") {
                answer("500 Internal Server Error", "", r#"{"error":"store unavailable"}"#)
            } else {
                answer("404 Not Found", "", "")
            }
        })
        .await;
        assert_eq!(c.cancel(9).await.unwrap_err().to_string(), "job 9 already finished");
        assert_eq!(c.job(1).await.unwrap_err().to_string(), "the berth manager failed (500): store unavailable");
        let e = c.nodes().await.unwrap_err();
        assert_eq!((e.to_string(), e.refused_status()), ("not found".into(), Some(reqwest::StatusCode::NOT_FOUND)));
    }

    #[tokio::test]
    async fn a_manager_that_is_down_is_named_with_its_address() {
        // A port nothing listens on: bound, then closed.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        drop(l);
        let c =
            Client::new(Credentials { url: url.clone(), token: Some("t".into()), ..Credentials::default() }).unwrap();
        let e = c.nodes().await.unwrap_err();
        assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("cannot reach the berth manager at {url}: is `berth up` running?"));
    }

    #[test]
    fn bad_urls_are_refused_early() {
        let c = |u: &str| Client::new(Credentials { url: u.into(), token: Some("t".into()), ..Credentials::default() });
        assert!(c("http://127.0.0.1:7070/").is_ok());
        assert!(matches!(c("127.0.0.1:7070"), Err(Error::InvalidUrl { .. })));
        assert!(c("ftp://x").is_err());
    }
}
