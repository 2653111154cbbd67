//! Dialling the manager's WebSockets: the agent connection (`/v1/agents/connect`, `conn`)
//! and the streams it is asked to open (`/v1/agents/streams/{id}`, `streams`), with the join
//! token, the agent's TLS trust, and failures told apart (the manager down, a bad token, an
//! untrusted certificate).

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::AgentConfig;
use berth_tls::client::TlsFailure;

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long the agent waits for the TCP/WebSocket handshake (and, in `conn`, for `Welcome`).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The same, per manager, when the agent has several to choose from.
const SEVERAL_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Error)]
pub(crate) enum DialError {
    #[error("join token rejected by the manager")]
    Auth,
    #[error("invalid manager url `{0}`: use http://host:port or https://host:port")]
    Url(String),
    /// The manager's host answered but nothing listens (connection refused): the manager
    /// process is down, so nobody can be declaring this node lost; kernels keep running.
    #[error("{0}")]
    Down(String),
    /// A standby manager answered: the leader is at this URL, or (`None`) nobody leads right
    /// now, a takeover under way, whose new leader waits a full heartbeat timeout for agents.
    #[error("{url}: a standby manager{}", .leader.as_ref().map(|l| format!(" (the leader is at {l})")).unwrap_or_else(|| ", and no manager leads right now".into()))]
    Standby { url: String, leader: Option<String> },
    #[error("{0}")]
    Other(String),
}

/// `<manager_url>/v1/agents/connect` with the scheme turned into ws/wss.
pub(crate) fn connect_url(manager_url: &str) -> Result<String, DialError> {
    ws_url(manager_url, "/v1/agents/connect")
}

/// `<manager_url><path>` with the scheme turned into ws/wss.
pub(crate) fn ws_url(manager_url: &str, path: &str) -> Result<String, DialError> {
    let base = manager_url.trim_end_matches('/');
    let rest = if let Some(r) = base.strip_prefix("http://") {
        format!("ws://{r}")
    } else if let Some(r) = base.strip_prefix("https://") {
        format!("wss://{r}")
    } else if base.starts_with("ws://") || base.starts_with("wss://") {
        base.to_string()
    } else {
        return Err(DialError::Url(manager_url.to_string()));
    };
    Ok(format!("{rest}{path}"))
}

/// The manager URLs of `--manager` (one, or several comma-separated for managers that stand
/// by for each other), without trailing slashes.
pub fn manager_urls(list: &str) -> Vec<String> {
    list.split(',').map(|u| u.trim().trim_end_matches('/').to_string()).filter(|u| !u.is_empty()).collect()
}

/// Dials the agent endpoint of every manager in `urls` at once and keeps the first that
/// takes the agent: the leader (standbys answer with a redirect). A leader a standby names
/// that is not in `urls` is dialled next. The connection and the URL it is at.
pub(crate) async fn dial(config: &AgentConfig, urls: &[String]) -> Result<(Ws, String), DialError> {
    use futures_util::StreamExt;
    // A frozen manager accepts connections and never answers: with others to try, it must
    // not hold the search for the leader for long.
    let limit = if urls.len() > 1 { SEVERAL_HANDSHAKE_TIMEOUT } else { HANDSHAKE_TIMEOUT };
    let mut tries: futures_util::stream::FuturesUnordered<_> =
        urls.iter().map(|u| dial_one(config, u.clone(), limit)).collect();
    let mut errors = Vec::new();
    while let Some(tried) = tries.next().await {
        match tried {
            Ok(found) => return Ok(found),
            Err(e) => errors.push(e),
        }
    }
    let named = errors.iter().find_map(|e| match e {
        DialError::Standby { leader: Some(l), .. } if !urls.contains(l) => Some(l.clone()),
        _ => None,
    });
    if let Some(leader) = named {
        return dial_one(config, leader, limit).await;
    }
    Err(combine(errors))
}

/// One error for the dials of several managers: the most telling.
fn combine(mut errors: Vec<DialError>) -> DialError {
    if let Some(i) = errors.iter().position(|e| matches!(e, DialError::Auth | DialError::Url(_))) {
        return errors.swap_remove(i);
    }
    if let Some(i) = errors.iter().position(|e| matches!(e, DialError::Standby { leader: None, .. })) {
        return errors.swap_remove(i);
    }
    if errors.iter().all(|e| matches!(e, DialError::Down(_))) {
        let all = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ");
        return DialError::Down(all);
    }
    DialError::Other(errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))
}

async fn dial_one(config: &AgentConfig, manager: String, limit: Duration) -> Result<(Ws, String), DialError> {
    let url = connect_url(&manager)?;
    match tokio::time::timeout(limit, dial_url(config, &url, &[])).await {
        Ok(ws) => Ok((ws?, manager)),
        Err(_) => Err(DialError::Other(format!("no answer from {url} in {limit:?}"))),
    }
}

/// Dials a WebSocket of the manager at `url` with the join token (and `headers`).
pub(crate) async fn dial_url(
    config: &AgentConfig,
    url: &str,
    headers: &[(&'static str, &str)],
) -> Result<Ws, DialError> {
    // The CA file is read on every dial: a file the admin fixed counts from the next retry.
    let connector = match url.starts_with("wss://") {
        true => {
            let tls = berth_tls::client::client_config(config.ca_file.as_deref())
                .map_err(|e| DialError::Other(e.to_string()))?;
            Some(Connector::Rustls(Arc::new(tls)))
        }
        false => None,
    };
    let mut req = url.into_client_request().map_err(|_| DialError::Url(config.manager_url.clone()))?;
    let auth = format!("Bearer {}", config.join_token).parse().map_err(|_| DialError::Auth)?;
    req.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, auth);
    for (name, value) in headers {
        req.headers_mut().insert(*name, value.parse().map_err(|_| DialError::Url(url.to_string()))?);
    }
    // Nagle off: commands and events are small frames, and Nagle + delayed ACK held each one
    // back ~40 ms on loopback (it capped a 2-CPU node at 20 jobs/s). The read buffer is sized
    // to those frames: tungstenite zero-fills it before every read.
    let config = tungstenite::protocol::WebSocketConfig::default().read_buffer_size(berth_model::stream::READ_BUFFER);
    let connect = tokio_tungstenite::connect_async_tls_with_config(req, Some(config), true, connector);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connect).await {
        Err(_) => Err(DialError::Other(format!("no answer from {url}"))),
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) if resp.status() == 401 || resp.status() == 403 => Err(DialError::Auth),
        Ok(Err(tungstenite::Error::Http(resp))) if resp.status() == 307 || resp.status() == 503 => {
            let leader = resp.headers().get(berth_model::api::LEADER_HEADER).and_then(|v| v.to_str().ok());
            let leader = leader.map(|l| l.trim_end_matches('/').to_string());
            Err(DialError::Standby { url: url.to_string(), leader })
        }
        Ok(Err(tungstenite::Error::Http(resp))) => {
            // e.g. a TLS manager answering plain http:// with the URL to use.
            let body = resp.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let said = serde_json::from_str::<berth_model::api::ErrorBody>(&body).map(|b| b.error);
            let said = said.map(|e| format!(": {e}")).unwrap_or_default();
            Err(DialError::Other(format!("cannot connect to {url}: the manager answered {}{said}", resp.status())))
        }
        Ok(Err(tungstenite::Error::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(DialError::Down(format!("cannot connect to {url}: {e} (is the manager running?)")))
        }
        Ok(Err(e)) => Err(DialError::Other(match berth_tls::client::classify(&e) {
            Some(TlsFailure::Untrusted(why)) => format!(
                "cannot connect to {url}: manager certificate not trusted ({why}): pass --ca-file with the CA that signed it"
            ),
            Some(TlsFailure::WrongName(why)) => format!(
                "cannot connect to {url}: manager certificate not valid for this address ({why}): use a name it is valid for in --manager, or pass the certificate itself as --ca-file"
            ),
            Some(TlsFailure::NotTls) => {
                format!("cannot connect to {url}: the manager does not speak TLS: use http:// in --manager")
            }
            None => format!("cannot connect to {url}: {e}"),
        })),
    }
}
