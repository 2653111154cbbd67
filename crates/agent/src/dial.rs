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
use crate::tls::TlsFailure;

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long the agent waits for the TCP/WebSocket handshake (and, in `conn`, for `Welcome`).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[error("{0}")]
    Other(String),
}

/// `<manager_url>/v1/agents/connect` with the scheme turned into ws/wss.
pub(crate) fn connect_url(manager_url: &str) -> Result<String, String> {
    ws_url(manager_url, "/v1/agents/connect")
}

/// `<manager_url><path>` with the scheme turned into ws/wss.
pub(crate) fn ws_url(manager_url: &str, path: &str) -> Result<String, String> {
    let base = manager_url.trim_end_matches('/');
    let rest = if let Some(r) = base.strip_prefix("http://") {
        format!("ws://{r}")
    } else if let Some(r) = base.strip_prefix("https://") {
        format!("wss://{r}")
    } else if base.starts_with("ws://") || base.starts_with("wss://") {
        base.to_string()
    } else {
        return Err(manager_url.to_string());
    };
    Ok(format!("{rest}{path}"))
}

/// Dials the manager's agent endpoint.
pub(crate) async fn dial(config: &AgentConfig) -> Result<Ws, DialError> {
    let url = connect_url(&config.manager_url).map_err(DialError::Url)?;
    dial_url(config, &url, &[]).await
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
            let tls =
                crate::tls::client_config(config.ca_file.as_deref()).map_err(|e| DialError::Other(e.to_string()))?;
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
    // back ~40 ms on loopback (it capped a 2-CPU node at 20 jobs/s).
    let connect = tokio_tungstenite::connect_async_tls_with_config(req, None, true, connector);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connect).await {
        Err(_) => Err(DialError::Other(format!("no answer from {url}"))),
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) if resp.status() == 401 || resp.status() == 403 => Err(DialError::Auth),
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
        Ok(Err(e)) => Err(DialError::Other(match crate::tls::classify(&e) {
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
