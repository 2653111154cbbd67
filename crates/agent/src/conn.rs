//! The agent's side of the manager connection (DESIGN.md §7): dial, register, heartbeat, carry
//! out commands, reconnect with backoff, and shut down cleanly.
//!
//! Kernels never depend on the connection: while it is down their events are recorded in the
//! kernel table, and the next `Register` reports them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use berth_model::Topology;
use berth_model::protocol::{AgentMessage, ManagerMessage, PROTOCOL_VERSION};
use futures_util::{SinkExt, StreamExt};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::AgentConfig;
use crate::kernels::Kernels;
use crate::runtime::{KernelUpdate, Runtime};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long the agent waits for the TCP/WebSocket handshake and for `Welcome`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
enum DialError {
    #[error("join token rejected by the manager")]
    Auth,
    #[error("invalid manager url `{0}`: use http://host:port or https://host:port")]
    Url(String),
    /// `wss://` needs a TLS feature of tokio-tungstenite that this build does not enable.
    #[error(
        "cannot reach `{0}`: this build has no TLS support for wss://; use http:// (e.g. behind a TLS-terminating proxy on the manager host)"
    )]
    NoTls(String),
    #[error("{0}")]
    Other(String),
}

/// How one connection ended.
enum End {
    Shutdown(Option<Box<Ws>>),
    Lost(String),
    Refused(String),
}

/// `<manager_url>/v1/agents/connect` with the scheme turned into ws/wss.
pub(crate) fn connect_url(manager_url: &str) -> Result<String, String> {
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
    Ok(format!("{rest}/v1/agents/connect"))
}

async fn dial(config: &AgentConfig) -> Result<Ws, DialError> {
    let url = connect_url(&config.manager_url).map_err(DialError::Url)?;
    if url.starts_with("wss://") {
        // Known before dialing: retrying could never succeed.
        return Err(DialError::NoTls(url));
    }
    let mut req = url.as_str().into_client_request().map_err(|_| DialError::Url(config.manager_url.clone()))?;
    let auth = format!("Bearer {}", config.join_token).parse().map_err(|_| DialError::Auth)?;
    req.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, auth);
    // Nagle off: commands and events are small frames, and Nagle + delayed ACK held each one
    // back ~40 ms on loopback (it capped a 2-CPU node at 20 jobs/s).
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_tungstenite::connect_async_with_config(req, None, true)).await {
        Err(_) => Err(DialError::Other(format!("no answer from {url}"))),
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) if resp.status() == 401 || resp.status() == 403 => Err(DialError::Auth),
        Ok(Err(tungstenite::Error::Url(tungstenite::error::UrlError::TlsFeatureNotEnabled))) => {
            Err(DialError::NoTls(url))
        }
        Ok(Err(e)) => Err(DialError::Other(format!("cannot connect to {url}: {e}"))),
    }
}

async fn send(ws: &mut Ws, msg: &AgentMessage) -> Result<(), String> {
    let text = serde_json::to_string(msg).map_err(|e| e.to_string())?;
    ws.send(Message::text(text)).await.map_err(|e| e.to_string())
}

/// A refusal the agent cannot fix by retrying.
fn is_fatal_refusal(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    ["version", "token", "auth", "unauthorized", "forbidden"].iter().any(|w| r.contains(w))
}

struct Agent {
    config: AgentConfig,
    topology: Topology,
    kernels: Kernels,
    events: mpsc::UnboundedReceiver<KernelUpdate>,
}

pub(crate) async fn run(
    config: AgentConfig,
    topology: Topology,
    runtime: Runtime,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    let kernels = Kernels::new(config.name.clone(), topology.clone(), config.data_dir.clone(), runtime, tx);
    let mut agent = Agent { config, topology, kernels, events: rx };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = BACKOFF_MIN;
    loop {
        let dialed = {
            let config = agent.config.clone();
            let dial = dial(&config);
            tokio::pin!(dial);
            loop {
                tokio::select! {
                    _ = &mut shutdown => return agent.shut_down(None).await,
                    Some(u) = agent.events.recv() => { agent.kernels.record(u); }
                    r = &mut dial => break r,
                }
            }
        };
        let why = match dialed {
            Err(DialError::Auth) => return agent.fail(DialError::Auth.to_string()).await,
            Err(e @ (DialError::Url(_) | DialError::NoTls(_))) => return agent.fail(e.to_string()).await,
            Err(DialError::Other(e)) => e,
            Ok(ws) => match agent.session(ws, &mut shutdown, &mut backoff).await {
                End::Shutdown(ws) => return agent.shut_down(ws.map(|b| *b)).await,
                End::Refused(reason) if is_fatal_refusal(&reason) => {
                    return agent.fail(format!("the manager refused this agent: {reason}")).await;
                }
                End::Refused(reason) => format!("the manager refused this agent: {reason}"),
                End::Lost(e) => e,
            },
        };
        tracing::warn!("manager connection: {why}; retrying in {}ms", backoff.as_millis());
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut shutdown => return agent.shut_down(None).await,
                Some(u) = agent.events.recv() => { agent.kernels.record(u); }
                _ = &mut sleep => break,
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

impl Agent {
    /// One connection: register, wait for `Welcome`, then serve until it ends.
    async fn session(
        &mut self,
        mut ws: Ws,
        shutdown: &mut Pin<&mut (impl Future<Output = ()> + Send)>,
        backoff: &mut Duration,
    ) -> End {
        let register = AgentMessage::Register {
            protocol_version: PROTOCOL_VERSION,
            node: self.config.name.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            queue: self.config.queue.clone(),
            topology: self.topology.clone(),
            kernels: self.kernels.reports(),
        };
        if let Err(e) = send(&mut ws, &register).await {
            return End::Lost(e);
        }
        // Runtime events wait in the channel until Welcome: they happened after the
        // Register snapshot, so they are sent (not lost) once the session is up.
        let welcome = tokio::select! {
            _ = &mut *shutdown => return End::Shutdown(Some(Box::new(ws))),
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, next_message(&mut ws)) => r,
        };
        let interval = match welcome {
            Err(_) => return End::Lost("no welcome from the manager".into()),
            Ok(Err(e)) => return End::Lost(e),
            Ok(Ok(ManagerMessage::Welcome { heartbeat_interval_ms })) => heartbeat_interval_ms.max(100),
            Ok(Ok(ManagerMessage::Refused { reason })) => return End::Refused(reason),
            Ok(Ok(other)) => return End::Lost(format!("expected welcome, got {other:?}")),
        };
        tracing::info!(manager = %self.config.manager_url, "registered with the manager");
        *backoff = BACKOFF_MIN;
        let mut heartbeat = tokio::time::interval(Duration::from_millis(interval));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        loop {
            let out: Vec<AgentMessage> = tokio::select! {
                _ = &mut *shutdown => return End::Shutdown(Some(Box::new(ws))),
                m = next_message(&mut ws) => match m {
                    Ok(ManagerMessage::Refused { reason }) => return End::Refused(reason),
                    Ok(cmd) => self.kernels.handle(cmd),
                    Err(e) => return End::Lost(e),
                },
                Some(u) = self.events.recv() => vec![self.kernels.record(u)],
                _ = heartbeat.tick() => vec![AgentMessage::Heartbeat { at: jiff::Timestamp::now() }],
            };
            for m in &out {
                if let Err(e) = send(&mut ws, m).await {
                    return End::Lost(e);
                }
            }
        }
    }

    /// Stops every kernel, reports their ends if connected, and closes the socket.
    async fn shut_down(&mut self, mut ws: Option<Ws>) -> anyhow::Result<()> {
        let running = self.kernels.running();
        if running > 0 {
            tracing::info!("agent shutting down: stopping {running} kernels");
        }
        self.kernels.stop_all("agent shut down", self.config.stop_grace);
        while self.kernels.running() > 0 {
            let Some(u) = self.events.recv().await else { break };
            let m = self.kernels.record(u);
            let failed = match ws.as_mut() {
                Some(s) => send(s, &m).await.is_err(),
                None => false,
            };
            if failed {
                ws = None;
            }
        }
        if let Some(mut s) = ws {
            let _ = s.close(None).await;
            // Read until the manager acknowledges the close, briefly.
            let _ = tokio::time::timeout(Duration::from_secs(2), async { while s.next().await.is_some() {} }).await;
        }
        self.kernels.runtime().cleanup();
        Ok(())
    }

    /// Gives up: stops the kernels (no one would supervise them) and returns the error.
    async fn fail(&mut self, error: String) -> anyhow::Result<()> {
        tracing::error!("{error}");
        self.shut_down(None).await?;
        Err(anyhow::anyhow!(error))
    }
}

/// The next manager message; pings and unknown messages are skipped.
async fn next_message(ws: &mut Ws) -> Result<ManagerMessage, String> {
    loop {
        match ws.next().await {
            None => return Err("connection closed".into()),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(Message::Close(_))) => return Err("closed by the manager".into()),
            Some(Ok(Message::Text(t))) => match serde_json::from_str(t.as_str()) {
                Ok(m) => return Ok(m),
                // A newer manager may send messages this agent does not know; skip them.
                Err(e) => tracing::warn!("ignoring a manager message: {e}"),
            },
            Some(Ok(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_refusals() {
        assert_eq!(connect_url("http://h:7070/").unwrap(), "ws://h:7070/v1/agents/connect");
        assert_eq!(connect_url("https://h").unwrap(), "wss://h/v1/agents/connect");
        assert!(connect_url("h:7070").is_err());
        assert!(is_fatal_refusal("protocol version 2 is not supported"));
        assert!(!is_fatal_refusal("node n1 is already connected"));
    }
}
