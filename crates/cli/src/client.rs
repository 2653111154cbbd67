//! A small REST client for the manager's `/v1` API: one method per route, the bearer token on
//! every call, and error answers (`ErrorBody`) turned into messages a user can act on.

use std::time::Duration;

use anyhow::{Context, anyhow};
use berth_model::JobId;
use berth_model::api::{
    CancelResult, CreateUserRequest, ErrorBody, Health, JobDetail, JobListQuery, JobView, JoinTokenCreated, NodeView,
    SubmitRequest, UserCreated, WhoAmI,
};
use berth_model::protocol::LogStream;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;

use crate::credentials::Credentials;

/// Header naming the log offset to ask for next.
const NEXT_OFFSET: &str = "berth-next-offset";
/// Header saying that the job has ended, so a log will not grow any more.
const JOB_DONE: &str = "berth-job-done";

pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// One piece of a log: the bytes from the asked offset on, where to continue, and whether the
/// job has ended.
pub struct LogChunk {
    pub bytes: Vec<u8>,
    pub next_offset: u64,
    pub done: bool,
}

impl Client {
    /// A client for the manager that [`crate::credentials::load`] finds.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::new(crate::credentials::load()?)
    }

    pub fn new(creds: Credentials) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(&creds.url).map_err(|e| anyhow!("invalid manager url `{}`: {e}", creds.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            anyhow::bail!("invalid manager url `{}`: use http:// or https://", creds.url);
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("berth-cli/", env!("CARGO_PKG_VERSION")))
            // A dead host should fail fast; an answer may still take long (big logs), so only
            // the connect step has a short limit.
            .connect_timeout(Duration::from_secs(5))
            .build()
            .context("cannot set up the HTTP client")?;
        Ok(Self { http, base: creds.url.trim_end_matches('/').to_string(), token: creds.token })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token)
    }

    /// Sends a request and turns transport failures and error answers into messages.
    async fn send(&self, req: RequestBuilder) -> anyhow::Result<Response> {
        let resp = req.send().await.map_err(|e| self.transport_error(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(error_answer(resp).await)
    }

    fn transport_error(&self, e: reqwest::Error) -> anyhow::Error {
        tracing::debug!(error = ?e, "request failed");
        if e.is_connect() {
            anyhow!("cannot reach the berth manager at {}: is `berth up` running?", self.base)
        } else if e.is_timeout() {
            anyhow!("the berth manager at {} did not answer in time", self.base)
        } else {
            anyhow::Error::new(e).context(format!("request to the berth manager at {} failed", self.base))
        }
    }

    async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> anyhow::Result<T> {
        let resp = self.send(req).await?;
        let url = resp.url().path().to_string();
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?;
        serde_json::from_slice(&bytes).with_context(|| format!("unexpected answer from the manager for {url}"))
    }

    #[allow(dead_code)] // for the daemons and end-to-end tests: is a manager up?
    pub async fn health(&self) -> anyhow::Result<Health> {
        self.json(self.request(Method::GET, "/v1/health")).await
    }

    pub async fn whoami(&self) -> anyhow::Result<WhoAmI> {
        self.json(self.request(Method::GET, "/v1/whoami")).await
    }

    pub async fn submit(&self, req: &SubmitRequest) -> anyhow::Result<JobView> {
        self.json(self.request(Method::POST, "/v1/jobs").json(req)).await
    }

    pub async fn jobs(&self, q: &JobListQuery) -> anyhow::Result<Vec<JobView>> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(s) = &q.state {
            query.push(("state", s.clone()));
        }
        if q.all {
            query.push(("all", "true".into()));
        }
        if let Some(l) = q.limit {
            query.push(("limit", l.to_string()));
        }
        self.json(self.request(Method::GET, "/v1/jobs").query(&query)).await
    }

    pub async fn job(&self, id: JobId) -> anyhow::Result<JobDetail> {
        self.json(self.request(Method::GET, &format!("/v1/jobs/{id}"))).await
    }

    pub async fn cancel(&self, id: JobId) -> anyhow::Result<CancelResult> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/cancel"))).await
    }

    pub async fn logs(&self, id: JobId, stream: LogStream, kernel: u32, offset: u64) -> anyhow::Result<LogChunk> {
        let stream = match stream {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        };
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
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?.to_vec();
        let next_offset = match next {
            Some(v) => v.trim().parse().map_err(|_| anyhow!("the manager sent an invalid {NEXT_OFFSET} `{v}`"))?,
            None => offset + bytes.len() as u64,
        };
        Ok(LogChunk { bytes, next_offset, done })
    }

    pub async fn nodes(&self) -> anyhow::Result<Vec<NodeView>> {
        self.json(self.request(Method::GET, "/v1/nodes")).await
    }

    pub async fn create_user(&self, req: &CreateUserRequest) -> anyhow::Result<UserCreated> {
        self.json(self.request(Method::POST, "/v1/admin/users").json(req)).await
    }

    pub async fn create_join_token(&self) -> anyhow::Result<JoinTokenCreated> {
        self.json(self.request(Method::POST, "/v1/admin/join-tokens")).await
    }
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

fn message_for(status: StatusCode, text: String) -> anyhow::Error {
    if status.is_server_error() {
        anyhow!("the berth manager failed ({}): {text}", status.as_u16())
    } else if status == StatusCode::UNAUTHORIZED {
        anyhow!("{text} (check BERTH_TOKEN or the credentials file)")
    } else {
        anyhow!(text)
    }
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

    #[test]
    fn bad_urls_are_refused_early() {
        let c = |u: &str| Client::new(Credentials { url: u.into(), token: "t".into() });
        assert!(c("http://127.0.0.1:7070/").is_ok());
        assert!(c("127.0.0.1:7070").is_err());
        assert!(c("ftp://x").is_err());
    }
}
