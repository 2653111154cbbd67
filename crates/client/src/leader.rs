//! Following the leader among several managers that stand by for each other (`BERTH_URL` or
//! the credentials file's `url` with several comma-separated URLs). Requests go to the manager
//! this client last found leading; a standby's redirect (307 and the `berth-leader` header) is
//! followed with the token kept, a manager that cannot be reached is passed over for the next,
//! and while nobody leads (503 during a takeover) the request waits and tries again, up to
//! [`FOLLOW_FOR`]. A request is sent again only when that cannot carry it out twice: it never
//! reached a manager, a standby turned it away, it only reads (GET, HEAD), or it carries an
//! idempotency key (submits do).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_model::api::LEADER_HEADER;
use reqwest::{Method, RequestBuilder, Response, StatusCode};

use crate::Error;

/// How long a request keeps looking for a leader: a takeover takes about the lease timeout.
const FOLLOW_FOR: Duration = Duration::from_secs(30);
/// With several managers, a manager that sends nothing for this long is given up on.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between rounds while nobody leads.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// The configured managers, and which one leads as far as this client knows.
#[derive(Clone, Debug)]
pub(crate) struct Managers {
    urls: Arc<Vec<String>>,
    current: Arc<Mutex<String>>,
}

/// Why a request got no answer.
pub(crate) enum SendError {
    Transport(reqwest::Error),
    Other(Error),
}

impl Managers {
    /// `list`: one manager URL, or several comma-separated.
    pub fn parse(list: &str) -> Result<Managers, Error> {
        let invalid = |u: &str, why: String| Error::InvalidUrl { url: u.to_string(), why };
        let mut urls = Vec::new();
        for u in list.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let parsed = reqwest::Url::parse(u).map_err(|e| invalid(u, e.to_string()))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(invalid(u, "use http:// or https://".into()));
            }
            urls.push(u.trim_end_matches('/').to_string());
        }
        let first = urls.first().cloned().ok_or_else(|| invalid(list, "it is empty".into()))?;
        Ok(Managers { urls: Arc::new(urls), current: Arc::new(Mutex::new(first)) })
    }

    pub fn any_https(&self) -> bool {
        self.urls.iter().any(|u| u.starts_with("https://"))
    }

    /// The managers, for messages.
    pub fn shown(&self) -> String {
        self.urls.join(", ")
    }

    /// Every configured manager.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The manager requests go to now.
    pub fn current(&self) -> String {
        self.current.lock().expect("leader lock").clone()
    }

    pub fn set_current(&self, url: &str) {
        *self.current.lock().expect("leader lock") = url.trim_end_matches('/').to_string();
    }

    /// The next configured manager after the current one.
    fn rotate(&self) {
        let cur = self.current();
        let i = self.urls.iter().position(|u| *u == cur).map_or(0, |i| (i + 1) % self.urls.len());
        self.set_current(&self.urls[i]);
    }

    /// Sends `req` (built against [`Managers::current`]) to the leader.
    pub async fn send(&self, http: &reqwest::Client, req: RequestBuilder) -> Result<Response, SendError> {
        let req = req.build().map_err(SendError::Transport)?;
        let several = self.urls.len() > 1;
        // Sent again after an answer that never came only when that cannot do it twice.
        let again =
            matches!(*req.method(), Method::GET | Method::HEAD) || req.headers().contains_key("idempotency-key");
        let deadline = Instant::now() + FOLLOW_FOR;
        let mut down: Vec<String> = Vec::new();
        let mut req = Some(req);
        loop {
            let base = self.current();
            // A body that cannot be copied (a stream) is sent once, without retries.
            let Some(mut attempt) = req.as_ref().and_then(|r| r.try_clone()).or_else(|| req.take()) else {
                return Err(SendError::Other(Error::Protocol("the request could not be sent again".into())));
            };
            *attempt.url_mut() = rebase(attempt.url(), &base).map_err(SendError::Other)?;
            // On a runtime thread: see `Client::send`.
            let sent = tokio::spawn(http.execute(attempt)).await;
            let sent = sent.map_err(|e| SendError::Other(Error::internal("the request task failed", e)))?;
            let more = req.is_some() && Instant::now() < deadline;
            let status = sent.as_ref().map(|r| r.status()).ok();
            match sent {
                // A standby names the leader: go there, unless it just could not be reached
                // (the standby has not noticed yet that it died).
                Ok(resp) if status == Some(StatusCode::TEMPORARY_REDIRECT) && more => {
                    let Some(leader) = resp.headers().get(LEADER_HEADER).and_then(|v| v.to_str().ok()) else {
                        return Ok(resp);
                    };
                    let leader = leader.trim_end_matches('/').to_string();
                    if down.contains(&leader) || leader == base {
                        self.rotate();
                        tokio::time::sleep(RETRY_PAUSE).await;
                    } else {
                        tracing::debug!(leader, "a standby named the leader");
                        self.set_current(&leader);
                    }
                }
                // Nothing was done, and another manager should do it: a standby while nobody
                // leads (a takeover under way), or a leader that has just lost the lease.
                Ok(resp)
                    if status == Some(StatusCode::SERVICE_UNAVAILABLE)
                        && resp.headers().contains_key(reqwest::header::RETRY_AFTER)
                        && more =>
                {
                    self.rotate();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(resp) => return Ok(resp),
                Err(e) if several && more && (e.is_connect() || again) => {
                    tracing::debug!(manager = base, "cannot reach a manager: {e}");
                    if !down.contains(&base) {
                        down.push(base);
                    }
                    self.rotate();
                    if down.len() >= self.urls.len() {
                        // every one tried: wait for one to come (back)
                        down.clear();
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
                Err(e) => return Err(SendError::Transport(e)),
            }
        }
    }
}

/// `url`'s path and query on the manager at `base`.
fn rebase(url: &reqwest::Url, base: &str) -> Result<reqwest::Url, Error> {
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    reqwest::Url::parse(&format!("{base}{path}"))
        .map_err(|e| Error::InvalidUrl { url: base.to_string(), why: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_rotate() {
        let m = Managers::parse("http://a:1/, http://b:2").unwrap();
        assert_eq!((m.current(), m.shown()), ("http://a:1".into(), "http://a:1, http://b:2".into()));
        m.rotate();
        assert_eq!(m.current(), "http://b:2");
        m.rotate();
        assert_eq!(m.current(), "http://a:1");
        assert!(Managers::parse("http://a:1,ftp://b").unwrap_err().to_string().contains("use http://"));
        assert!(Managers::parse(" , ").is_err());
        let u = reqwest::Url::parse("http://a:1/v1/jobs?all=true").unwrap();
        assert_eq!(rebase(&u, "http://b:2").unwrap().as_str(), "http://b:2/v1/jobs?all=true");
    }
}
