//! A small REST client for the manager's `/v1` API: one method per route, the bearer token on
//! every call, and error answers (`ErrorBody`) turned into messages a user can act on.

use std::time::Duration;

use anyhow::{Context, anyhow};
use berth_model::JobId;
use berth_model::api::{
    CancelResult, CancelTasks, CreateUserRequest, DrainRequest, ErrorBody, Health, JobDetail, JobListQuery, JobView,
    JoinTokenCreated, NodeView, QueueUpdate, QueueView, SignalRequest, SignalResult, SubmitRequest, TaskCancelled,
    UserCreated, WhoAmI,
};
use berth_model::protocol::LogStream;
use berth_tls::client::TlsFailure;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;

use crate::credentials::Credentials;

/// Header naming the log offset to ask for next.
const NEXT_OFFSET: &str = "berth-next-offset";
/// Header saying that the job has ended, so a log will not grow any more.
const JOB_DONE: &str = "berth-job-done";
/// Header naming the attempt whose log it is.
const ATTEMPT: &str = "berth-attempt";

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// What requests are sent to over a unix socket (a fixed URL); `None`: the leader.
    base: Option<String>,
    /// The managers as configured: one URL, or several (comma-separated) that stand by for
    /// each other, of which requests go to the leader (`managers.rs`).
    managers: crate::managers::Managers,
    /// Where the manager is, for messages: its URL, or `unix socket PATH`.
    shown: String,
    token: Option<String>,
    /// The manager's unix socket, when requests go there (`client_ws.rs` dials it too).
    pub(crate) socket: Option<std::path::PathBuf>,
    /// Certificates trusted besides the public roots (`client_ws.rs`).
    pub(crate) ca_file: Option<std::path::PathBuf>,
}

/// One piece of a log: the bytes from the asked offset on, where to continue, and whether the
/// job has ended.
pub struct LogChunk {
    pub bytes: Vec<u8>,
    pub next_offset: u64,
    pub done: bool,
    /// The job's attempt this log is of (absent from older managers): when it changes, the
    /// job was requeued and its log starts over.
    pub attempt: Option<u32>,
}

impl Client {
    /// A client for the manager that [`crate::credentials::load`] finds.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::new(crate::credentials::load()?)
    }

    pub fn new(creds: Credentials) -> anyhow::Result<Self> {
        let managers = crate::managers::Managers::parse(&creds.url)?;
        let mut http = reqwest::Client::builder()
            // A standby's redirect is followed by hand (`managers.rs`): reqwest would drop the
            // token on the way to another port.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("berth-cli/", env!("CARGO_PKG_VERSION")))
            // A dead host should fail fast; an answer may still take long (big logs), so only
            // the connect step has a short limit.
            .connect_timeout(Duration::from_secs(5));
        if managers.urls().len() > 1 {
            // A frozen manager accepts connections and never answers: with others to ask,
            // give up on it (reads and keyed writes then go elsewhere, see `managers.rs`).
            http = http.read_timeout(crate::managers::READ_TIMEOUT);
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
                (Some(crate::credentials::SOCKET_URL.to_string()), format!("unix socket {}", s.display()))
            }
            None => (None, managers.shown()),
        };
        let http = http.build().context("cannot set up the HTTP client")?;
        Ok(Self { http, base, managers, shown, token: creds.token, socket: creds.socket, ca_file: creds.ca_file })
    }

    /// The manager's URL, as others (nodes, other users) reach it: the leader, as far as this
    /// client knows.
    pub fn base_url(&self) -> String {
        self.managers.current()
    }

    /// Where the manager is, for messages.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let base = self.base.clone().unwrap_or_else(|| self.managers.current());
        let req = self.http.request(method, format!("{base}{path}"));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends a request and turns transport failures and error answers into messages.
    pub(crate) async fn send(&self, req: RequestBuilder) -> anyhow::Result<Response> {
        // On a runtime thread, where SIGPIPE is blocked (main.rs): the connection, its TLS
        // handshake and the task hyper spawns for it never write from the main thread, which
        // keeps the default SIGPIPE for `berth ps | head`.
        let resp = match &self.base {
            Some(_) => {
                let sent = tokio::spawn(req.send()).await.context("the request task failed")?;
                sent.map_err(|e| self.transport_error(e))?
            }
            None => self.managers.send(&self.http, req).await.map_err(|e| match e {
                crate::managers::SendError::Transport(e) => self.transport_error(e),
                crate::managers::SendError::Other(e) => e,
            })?,
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(error_answer(resp).await)
    }

    fn transport_error(&self, e: reqwest::Error) -> anyhow::Error {
        tracing::debug!(error = ?e, "request failed");
        // TLS failures happen while connecting: tell them apart from a manager that is down.
        match berth_tls::client::classify(&e) {
            Some(TlsFailure::Untrusted(why)) => {
                return anyhow!(
                    "the berth manager's certificate at {} is not trusted ({why}): set BERTH_CA_FILE to the CA certificate (PEM) that signed it",
                    self.shown
                );
            }
            Some(TlsFailure::WrongName(why)) => {
                return anyhow!(
                    "the berth manager's certificate at {} is not valid for this address ({why}): use a name it is valid for in BERTH_URL, or set BERTH_CA_FILE to the certificate itself",
                    self.shown
                );
            }
            Some(TlsFailure::NotTls) => {
                return anyhow!("the berth manager at {} does not speak TLS: use http:// in BERTH_URL", self.shown);
            }
            None => {}
        }
        if e.is_connect() {
            anyhow!("cannot reach the berth manager at {}: is `berth up` running?", self.shown)
        } else if e.is_timeout() {
            anyhow!("the berth manager at {} did not answer in time", self.shown)
        } else {
            anyhow::Error::new(e).context(format!("request to the berth manager at {} failed", self.shown))
        }
    }

    pub(crate) async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> anyhow::Result<T> {
        let resp = self.send(req).await?;
        let url = resp.url().path().to_string();
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?;
        serde_json::from_slice(&bytes).with_context(|| format!("unexpected answer from the manager for {url}"))
    }

    #[allow(dead_code)] // for the daemons and end-to-end tests: is a manager up?
    pub async fn health(&self) -> anyhow::Result<Health> {
        self.json(self.request(Method::GET, "/v1/health")).await
    }

    /// Every configured manager's URL.
    pub fn manager_urls(&self) -> &[String] {
        self.managers.urls()
    }

    /// With several managers, points this client at the leader (a WebSocket cannot follow a
    /// standby's redirect); with one, does nothing.
    pub(crate) async fn find_leader(&self) -> anyhow::Result<()> {
        if self.base.is_some() || self.managers.urls().len() < 2 {
            return Ok(());
        }
        let v: berth_model::api::LeaderView = self.json(self.request(Method::GET, "/v1/leader")).await?;
        match v.leader {
            Some(l) => self.managers.set_current(&l),
            None => anyhow::bail!("no manager leads right now (a takeover is under way): try again in a few seconds"),
        }
        Ok(())
    }

    /// `GET /v1/leader` of the manager at `url` itself, redirects not followed.
    pub async fn leader_at(&self, url: &str) -> anyhow::Result<berth_model::api::LeaderView> {
        let req = self.http.get(format!("{url}/v1/leader"));
        let resp = tokio::spawn(req.send()).await.context("the request task failed")?;
        let resp = resp.map_err(|e| anyhow!("{}", e.without_url()))?;
        if !resp.status().is_success() {
            return Err(error_answer(resp).await);
        }
        resp.json().await.map_err(|e| anyhow!("unexpected answer: {e}"))
    }

    pub async fn whoami(&self) -> anyhow::Result<WhoAmI> {
        self.json(self.request(Method::GET, "/v1/whoami")).await
    }

    /// A one-time dashboard login link (`berth ui`).
    pub async fn login_link(&self) -> anyhow::Result<berth_model::api::LoginLink> {
        self.json(self.request(Method::POST, "/v1/ui/login-links")).await
    }

    pub async fn submit(&self, req: &SubmitRequest) -> anyhow::Result<JobView> {
        // A submit whose answer is lost (its manager died, a takeover) is sent again safely.
        let key = format!("{:032x}", rand::random::<u128>());
        self.json(self.request(Method::POST, "/v1/jobs").header("idempotency-key", key).json(req)).await
    }

    /// `GET /v1/jobs` with every filter `q` sets (serde leaves the unset ones out).
    pub async fn jobs(&self, q: &JobListQuery) -> anyhow::Result<Vec<JobView>> {
        self.json(self.request(Method::GET, "/v1/jobs").query(q)).await
    }

    pub async fn job(&self, id: JobId) -> anyhow::Result<JobDetail> {
        self.json(self.request(Method::GET, &format!("/v1/jobs/{id}"))).await
    }

    /// The apps job `id` serves (`berth apps`).
    pub async fn apps(&self, id: JobId) -> anyhow::Result<Vec<berth_model::api::AppView>> {
        self.json(self.request(Method::GET, &format!("/v1/jobs/{id}/apps"))).await
    }

    /// A one-time link opening app `app` of job `id` (`berth open`).
    pub async fn app_link(&self, id: JobId, app: &str) -> anyhow::Result<berth_model::api::AppLink> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/apps/{app}/link"))).await
    }

    /// Stops running job `id` and queues it again (`POST /v1/jobs/{id}/requeue`).
    pub async fn requeue(&self, id: JobId) -> anyhow::Result<berth_model::api::RequeueResult> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/requeue"))).await
    }

    pub async fn cancel(&self, id: JobId) -> anyhow::Result<CancelResult> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/cancel"))).await
    }

    /// Cancels tasks `tasks` (`--array` syntax) of job array `array`, made or not.
    pub async fn cancel_tasks(&self, array: JobId, tasks: &str) -> anyhow::Result<Vec<TaskCancelled>> {
        let body = CancelTasks { tasks: tasks.to_string() };
        self.json(self.request(Method::POST, &format!("/v1/jobs/{array}/tasks/cancel")).json(&body)).await
    }

    /// Sends a signal now to running job `id` (an array: its running tasks, or those of `req.tasks`).
    pub async fn signal(&self, id: JobId, req: &SignalRequest) -> anyhow::Result<SignalResult> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/signal")).json(req)).await
    }

    pub async fn logs(&self, id: JobId, stream: LogStream, kernel: u32, offset: u64) -> anyhow::Result<LogChunk> {
        let stream = stream.as_str();
        let req = self.request(Method::GET, &format!("/v1/jobs/{id}/logs")).query(&[
            ("stream", stream.to_string()),
            ("kernel", kernel.to_string()),
            ("offset", offset.to_string()),
        ]);
        let resp = self.send(req).await?;
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let next = header(NEXT_OFFSET);
        // Without the header we cannot know; treat the job as still running so that `-f`
        // keeps following rather than stopping early.
        let done = header(JOB_DONE).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let attempt = header(ATTEMPT).and_then(|v| v.trim().parse().ok());
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?.to_vec();
        let next_offset = match next {
            Some(v) => v.trim().parse().map_err(|_| anyhow!("the manager sent an invalid {NEXT_OFFSET} `{v}`"))?,
            None => offset + bytes.len() as u64,
        };
        Ok(LogChunk { bytes, next_offset, done, attempt })
    }

    pub async fn nodes(&self) -> anyhow::Result<Vec<NodeView>> {
        self.json(self.request(Method::GET, "/v1/nodes")).await
    }

    pub async fn images(&self) -> anyhow::Result<berth_model::api::ImagesView> {
        self.json(self.request(Method::GET, "/v1/images")).await
    }

    /// Each node's cached Python environments.
    pub async fn envs(&self) -> anyhow::Result<Vec<berth_model::environment::NodeEnvs>> {
        self.json(self.request(Method::GET, "/v1/envs")).await
    }

    /// Removes a cached environment (`key` or a prefix) on every node (admins).
    pub async fn remove_env(&self, key: &str) -> anyhow::Result<berth_model::environment::EnvRemoved> {
        self.json(self.request(Method::DELETE, &format!("/v1/envs/{}", encode_path_segment(key)))).await
    }

    /// Drains (`Some(reason)` may be empty) or undrains (`None`) a node.
    pub async fn drain_node(&self, name: &str, drain: Option<&DrainRequest>) -> anyhow::Result<NodeView> {
        let node = encode_path_segment(name);
        match drain {
            Some(req) => self.json(self.request(Method::POST, &format!("/v1/nodes/{node}/drain")).json(req)).await,
            None => self.json(self.request(Method::POST, &format!("/v1/nodes/{node}/undrain"))).await,
        }
    }

    pub async fn queues(&self) -> anyhow::Result<Vec<QueueView>> {
        self.json(self.request(Method::GET, "/v1/queues")).await
    }

    pub async fn put_queue(&self, name: &str, update: &QueueUpdate) -> anyhow::Result<QueueView> {
        let path = format!("/v1/queues/{}", encode_path_segment(name));
        self.json(self.request(Method::PUT, &path).json(update)).await
    }

    pub async fn create_user(&self, req: &CreateUserRequest) -> anyhow::Result<UserCreated> {
        self.json(self.request(Method::POST, "/v1/admin/users").json(req)).await
    }

    pub async fn create_join_token(&self) -> anyhow::Result<JoinTokenCreated> {
        self.json(self.request(Method::POST, "/v1/admin/join-tokens")).await
    }
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

/// The message of an error answer: the manager's own `ErrorBody` text, with the status for
/// server faults (5xx) where the text alone may not say that the fault is not the user's.
async fn error_answer(resp: Response) -> anyhow::Error {
    let status = resp.status();
    let body = resp.bytes().await.unwrap_or_default();
    let text = match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(b) => b.error,
        Err(_) => {
            let raw = String::from_utf8_lossy(&body);
            let raw = raw.trim();
            if raw.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_lowercase()
            } else {
                raw.chars().take(500).collect()
            }
        }
    };
    message_for(status, text)
}

pub(crate) fn message_for(status: StatusCode, text: String) -> anyhow::Error {
    if status.is_server_error() {
        anyhow!("the berth manager failed ({}): {text}", status.as_u16())
    } else if status == StatusCode::UNAUTHORIZED && !text.contains("BERTH_TOKEN") {
        anyhow!("{text} (check BERTH_TOKEN or the credentials file)")
    } else if status == StatusCode::UNAUTHORIZED {
        // The manager's own message already says where the token comes from.
        anyhow!("{text}")
    } else {
        anyhow::Error::new(ApiFailure { status, message: text })
    }
}

/// A request the manager refused (4xx): its status, for callers that act on it (a 404 that
/// means "nothing there", a 409 that says where an upload stands), and its message.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: StatusCode,
    pub message: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiFailure {}

/// The status of a refused request, if `e` is one.
pub fn refused_with(e: &anyhow::Error) -> Option<StatusCode> {
    e.downcast_ref::<ApiFailure>().map(|f| f.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_keep_the_managers_words() {
        let e = message_for(StatusCode::CONFLICT, "job 7 already finished".into());
        assert_eq!(e.to_string(), "job 7 already finished");
        let e = message_for(StatusCode::INTERNAL_SERVER_ERROR, "store unavailable".into());
        assert_eq!(e.to_string(), "the berth manager failed (500): store unavailable");
    }

    /// A one-route-per-call HTTP server: answers every request with `respond(request head)`
    /// and closes the connection. Enough to check what the client sends and how it reads.
    async fn fake(respond: fn(&str) -> String) -> Client {
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

    fn answer(status: &str, headers: &str, body: &str) -> String {
        format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n{body}", body.len())
    }

    #[tokio::test]
    async fn sends_the_token_and_reads_logs_headers() {
        let c = fake(|req| {
            if !req.to_lowercase().contains("authorization: bearer sekret") {
                return answer("401 Unauthorized", "", r#"{"error":"no token"}"#);
            }
            assert!(req.starts_with("GET /v1/jobs/7/logs?stream=stderr&kernel=1&offset=3 "), "{req}");
            answer("200 OK", "berth-next-offset: 8\r\nberth-job-done: true\r\n", "hello")
        })
        .await;
        let chunk = c.logs(7, LogStream::Stderr, 1, 3).await.unwrap();
        assert_eq!(chunk.bytes, b"hello");
        assert_eq!(chunk.next_offset, 8);
        assert!(chunk.done);
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
        assert_eq!(c.nodes().await.unwrap_err().to_string(), "not found");
    }

    #[test]
    fn bad_urls_are_refused_early() {
        let c = |u: &str| {
            Client::new(Credentials {
                url: u.into(),
                token: Some("t".into()),
                ca_file: None,
                socket: None,
                data_dir: None,
            })
        };
        assert!(c("http://127.0.0.1:7070/").is_ok());
        assert!(c("127.0.0.1:7070").is_err());
        assert!(c("ftp://x").is_err());
    }
}
