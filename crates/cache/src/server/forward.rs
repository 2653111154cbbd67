//! Forwarding a request to the key's owner, bodies streamed both ways over pooled keep-alive
//! connections. An owner that does not answer is remembered as down for a few seconds, so
//! that while a node is dead its keys cost clients one fast miss, not a connect timeout each.
//! `https://` members are reached with the rustls client config the node was given (the CLI
//! builds it with berth's trust rules: public roots plus `--ca-file`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::{Body, FORWARDED};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an owner that failed is skipped.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// Longest wait for an owner's response head (bodies may take longer).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Forwarder {
    client: Client<HttpsConnector<HttpConnector>, Incoming>,
    down: Mutex<HashMap<String, Instant>>,
}

/// Why a forward did not produce the owner's answer.
#[derive(Debug)]
pub enum ForwardError {
    /// Skipped: the owner failed moments ago.
    Down,
    /// The owner did not answer now.
    Failed(String),
}

impl Forwarder {
    /// A forwarder speaking plain HTTP, and HTTPS with `tls` (without it an `https://` owner
    /// cannot be reached: the forward fails and the key reads as a miss).
    pub fn new(tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> Forwarder {
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(CONNECT_TIMEOUT));
        conn.set_nodelay(true);
        conn.enforce_http(false);
        let tls = tls.map(|c| (*c).clone()).unwrap_or_else(no_trust);
        let conn = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(conn);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(conn);
        Forwarder { client, down: Mutex::new(HashMap::new()) }
    }

    fn is_down(&self, owner: &str) -> bool {
        let mut d = self.down.lock().unwrap_or_else(|p| p.into_inner());
        match d.get(owner) {
            Some(&until) if until > Instant::now() => true,
            Some(_) => {
                d.remove(owner);
                false
            }
            None => false,
        }
    }

    fn mark_down(&self, owner: &str) {
        self.down.lock().unwrap_or_else(|p| p.into_inner()).insert(owner.to_string(), Instant::now() + DOWN_FOR);
    }

    /// Sends `req` to `owner` (a base URL such as `http://10.0.0.2:7171`) and returns its answer.
    pub async fn forward(&self, owner: &str, req: Request<Incoming>) -> Result<Response<Body>, ForwardError> {
        if self.is_down(owner) {
            return Err(ForwardError::Down);
        }
        let (mut parts, body) = req.into_parts();
        let pq = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let uri: Uri = format!("{}{pq}", owner.trim_end_matches('/'))
            .parse()
            .map_err(|e| ForwardError::Failed(format!("member `{owner}` is not a valid URL: {e}")))?;
        parts.uri = uri;
        parts.headers.remove(http::header::HOST);
        parts.headers.remove(http::header::CONNECTION);
        parts.headers.insert(FORWARDED, http::HeaderValue::from_static("1"));
        let fut = self.client.request(Request::from_parts(parts, body));
        match tokio::time::timeout(RESPONSE_TIMEOUT, fut).await {
            Ok(Ok(resp)) => Ok(resp.map(Body::Proxied)),
            Ok(Err(e)) => {
                self.mark_down(owner);
                Err(ForwardError::Failed(format!("{e}")))
            }
            Err(_) => {
                self.mark_down(owner);
                Err(ForwardError::Failed(format!("no answer within {}s", RESPONSE_TIMEOUT.as_secs())))
            }
        }
    }
}

/// A client config that trusts no certificate: what a node without `--ca-file` or TLS uses
/// for `https://` owners it should not be forwarding to anyway.
fn no_trust() -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}
