//! WebSocket streams to the manager (exec, attach, port forwarding, job steps): over its unix
//! socket or over TCP (TLS with the same trust as the REST calls), with the bearer token, and
//! the manager's error answers to the upgrade turned into the same [`Error`]s as REST errors.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, http};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::{Client, Error};

/// Any byte stream a WebSocket runs over (a unix or a TCP socket).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open WebSocket to the manager.
pub type Ws = WebSocketStream<MaybeTlsStream<Box<dyn Io>>>;

impl Client {
    /// Opens the WebSocket at `path`: `/v1/jobs/{id}/exec`, `/v1/jobs/{id}/attach`,
    /// `/v1/jobs/{id}/forward/{port}`, `/v1/jobs/{id}/steps`.
    pub async fn websocket(&self, path: &str) -> Result<Ws, Error> {
        let (url, io, connector): (String, Box<dyn Io>, Option<Connector>) = match self.socket() {
            Some(sock) => {
                let s = tokio::net::UnixStream::connect(sock).await.map_err(|e| Error::Unreachable {
                    at: self.shown().to_string(),
                    hint: "is `berth up` running?",
                    source: Some(e),
                })?;
                (format!("ws://localhost{path}"), Box::new(s), None)
            }
            None => {
                self.find_leader().await?;
                let base = self.base_url();
                let invalid = || Error::InvalidUrl { url: base.clone(), why: "it has no scheme".into() };
                let (scheme, rest) = base.split_once("://").ok_or_else(invalid)?;
                let host = rest.split('/').next().unwrap_or(rest);
                let tcp = tokio::net::TcpStream::connect(host_port(host, scheme)).await.map_err(|e| {
                    Error::Unreachable { at: self.shown().to_string(), hint: "is it running?", source: Some(e) }
                })?;
                let _ = tcp.set_nodelay(true);
                let tls = (scheme == "https").then(|| berth_tls::client::client_config(self.ca_file()));
                let connector = tls.transpose()?.map(|c| Connector::Rustls(Arc::new(c)));
                let ws_scheme = if scheme == "https" { "wss" } else { "ws" };
                (format!("{ws_scheme}://{rest}{path}"), Box::new(tcp), connector)
            }
        };
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| Error::InvalidUrl { url: url.clone(), why: e.to_string() })?;
        if let Some(t) = self.token() {
            let value = format!("Bearer {t}").parse().map_err(|_| {
                Error::Protocol("the API token holds characters a header cannot carry: check BERTH_TOKEN".into())
            })?;
            req.headers_mut().insert(http::header::AUTHORIZATION, value);
        }
        match tokio_tungstenite::client_async_tls_with_config(req, io, None, connector).await {
            Ok((ws, _)) => Ok(ws),
            Err(tungstenite::Error::Http(resp)) => {
                let status = reqwest::StatusCode::from_u16(resp.status().as_u16()).unwrap_or_default();
                let body = resp.body().as_deref().unwrap_or_default();
                let body = serde_json::from_slice::<berth_model::api::ErrorBody>(body).unwrap_or_else(|_| {
                    berth_model::api::ErrorBody::new(String::from_utf8_lossy(body).trim().to_string())
                });
                Err(Error::from_body(status, body))
            }
            Err(e) => Err(Error::Stream { at: self.shown().to_string(), error: Box::new(e) }),
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
