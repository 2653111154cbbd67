//! WebSocket connections to the manager (`berth exec`): over its unix socket or over TCP (TLS
//! with the same trust as the REST calls), with the bearer token, and the manager's error
//! answers to the upgrade turned into the same messages as REST errors.

use std::sync::Arc;

use anyhow::{Context, anyhow};
use berth_model::api::ErrorBody;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, http};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::client::{Client, message_for};

/// Any byte stream a WebSocket runs over (a unix or a TCP socket).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Ws = WebSocketStream<MaybeTlsStream<Box<dyn Io>>>;

impl Client {
    /// Opens the WebSocket at `path` (e.g. `/v1/jobs/7/exec`).
    pub async fn websocket(&self, path: &str) -> anyhow::Result<Ws> {
        let (url, io, connector): (String, Box<dyn Io>, Option<Connector>) = match &self.socket {
            Some(sock) => {
                let s = tokio::net::UnixStream::connect(sock).await.with_context(|| {
                    format!("cannot reach the berth manager at {}: is `berth up` running?", self.shown())
                })?;
                (format!("ws://localhost{path}"), Box::new(s), None)
            }
            None => {
                self.find_leader().await?;
                let base = self.base_url();
                let (scheme, rest) = base.split_once("://").ok_or_else(|| anyhow!("invalid manager url `{base}`"))?;
                let host = rest.split('/').next().unwrap_or(rest);
                let tcp = tokio::net::TcpStream::connect(host_port(host, scheme))
                    .await
                    .with_context(|| format!("cannot reach the berth manager at {}: is it running?", self.shown()))?;
                let _ = tcp.set_nodelay(true);
                let tls = (scheme == "https").then(|| berth_tls::client::client_config(self.ca_file.as_deref()));
                let connector = tls.transpose()?.map(|c| Connector::Rustls(Arc::new(c)));
                let ws_scheme = if scheme == "https" { "wss" } else { "ws" };
                (format!("{ws_scheme}://{rest}{path}"), Box::new(tcp), connector)
            }
        };
        let mut req = url.as_str().into_client_request().with_context(|| format!("invalid url {url}"))?;
        if let Some(t) = self.token() {
            req.headers_mut().insert(http::header::AUTHORIZATION, format!("Bearer {t}").parse()?);
        }
        match tokio_tungstenite::client_async_tls_with_config(req, io, None, connector).await {
            Ok((ws, _)) => Ok(ws),
            Err(tungstenite::Error::Http(resp)) => {
                let body = resp.body().as_deref().unwrap_or_default();
                let text = serde_json::from_slice::<ErrorBody>(body)
                    .map(|b| b.error)
                    .unwrap_or_else(|_| String::from_utf8_lossy(body).trim().to_string());
                let status = reqwest::StatusCode::from_u16(resp.status().as_u16()).unwrap_or_default();
                Err(message_for(status, text))
            }
            Err(e) => Err(anyhow!("cannot open a stream to the berth manager at {}: {e}", self.shown())),
        }
    }
}

/// `host[:port]` with the scheme's default port when it has none.
fn host_port(host: &str, scheme: &str) -> String {
    let has_port =
        host.rsplit_once(':').is_some_and(|(h, p)| !h.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()))
            && !host.ends_with(']');
    if has_port { host.to_string() } else { format!("{host}:{}", if scheme == "https" { 443 } else { 80 }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_default_by_scheme() {
        assert_eq!(host_port("head:7070", "http"), "head:7070");
        assert_eq!(host_port("head", "https"), "head:443");
        assert_eq!(host_port("[::1]:7070", "http"), "[::1]:7070");
        assert_eq!(host_port("[::1]", "http"), "[::1]:80");
    }
}
