//! The agent's side of the manager connection (docs/cluster.md): dial, register, heartbeat, carry
//! out commands, reconnect with backoff, and shut down cleanly.
//!
//! Kernels never depend on the connection: while it is down their events are recorded in the
//! kernel table, and the next `Register` reports them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use berth_model::Topology;
use berth_model::protocol::{AgentMessage, ContainerInfo, Envelope, ManagerMessage, PROTOCOL_VERSION, StreamOpen};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::AgentConfig;
use crate::dial::{DialError, HANDSHAKE_TIMEOUT, Ws, dial, manager_urls};
use crate::epoch::Epochs;
use crate::kernels::Kernels;
use crate::runtime::{KernelUpdate, Runtime};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The longest wait between tries when there are several managers to try.
const BACKOFF_SEVERAL: Duration = Duration::from_secs(1);
/// How often the agent looks at Docker (daemon up, images) to report changes.
const CONTAINER_POLL: Duration = Duration::from_secs(2);

/// How one connection ended.
enum End {
    Shutdown(Option<Box<Ws>>),
    Lost(LinkError),
    Refused(String),
}

/// Why a connection to the manager was lost (the agent logs it and dials again).
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Ws(#[from] tungstenite::Error),
    #[error("connection closed")]
    Closed,
    #[error("closed by the manager")]
    ClosedByManager,
    #[error(transparent)]
    Deposed(#[from] crate::epoch::Deposed),
    #[error("no welcome from the manager")]
    NoWelcome,
    #[error("expected welcome, got {0:?}")]
    NotWelcome(Box<ManagerMessage>),
    #[error("no word from the manager for {secs:.1}s")]
    Silent { secs: f64 },
    #[error("no word from the manager for {secs:.1}s: looking for the leader")]
    SilentLeader { secs: f64 },
}

async fn send(ws: &mut Ws, msg: &AgentMessage) -> Result<(), LinkError> {
    let text = serde_json::to_string(msg)?;
    Ok(ws.send(Message::text(text)).await?)
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
    /// Kernels' setups that ended (`kernels/start.rs`).
    setups: mpsc::UnboundedReceiver<crate::setup::SetupDone>,
    fence: Fence,
    /// The node's Docker state, kept fresh by a polling task.
    containers: tokio::sync::watch::Receiver<ContainerInfo>,
    /// When a heartbeat last carried the kernels' usage (see `AgentConfig::usage_interval`).
    last_usage: Option<std::time::Instant>,
    /// Every manager of `--manager` (`config.manager_url` is the one connected to).
    managers: Vec<String>,
    /// The highest leader epoch seen: older managers are refused.
    epochs: Epochs,
}

/// Self-fencing. The manager declares a node lost after `heartbeat_timeout` without a
/// heartbeat and requeues its jobs elsewhere. An agent that has heard nothing from the
/// manager (commands or its pings) for half of that stops its kernels first, SIGKILL
/// included well before the manager's deadline, so a partitioned node never runs a kernel
/// that also runs elsewhere. Connection refused counts as contact: the manager's host is up
/// and its process down, and a restarted manager waits a full timeout for agents to return.
struct Fence {
    /// Half the manager's heartbeat timeout (from `Welcome`); `None` until the first one.
    lease: Option<Duration>,
    timeout: Duration,
    last_contact: std::time::Instant,
    fenced: bool,
}

impl Fence {
    fn heard(&mut self) {
        self.last_contact = std::time::Instant::now();
        self.fenced = false;
    }

    fn expired(&self) -> bool {
        !self.fenced && self.lease.is_some_and(|l| self.last_contact.elapsed() > l)
    }

    /// How often to look: often enough to fence within a few percent of the lease.
    fn check_every(&self) -> Duration {
        self.lease.map_or(Duration::from_secs(1), |l| (l / 20).clamp(Duration::from_millis(20), Duration::from_secs(1)))
    }
}

pub(crate) async fn run(
    config: AgentConfig,
    topology: Topology,
    runtime: Runtime,
    board: crate::metrics::Board,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let managers = manager_urls(&config.manager_url);
    if managers.is_empty() {
        anyhow::bail!("no manager URL: give --manager URL (several, comma-separated, for standby managers)");
    }
    let (tx, rx) = mpsc::unbounded_channel();
    // Containers and shim kernels of a previous agent process are taken over before the
    // first Register.
    let engine = runtime.containers();
    let inherited_lease = runtime.inherited_lease();
    let adopted = runtime.adopt(&tx).await;
    let envs = crate::envs::EnvCache::new(&config.data_dir, config.envs.clone());
    let (setups_tx, setups) = mpsc::unbounded_channel();
    let mut kernels = Kernels::new(
        config.name.clone(),
        topology.clone(),
        config.data_dir.clone(),
        runtime,
        tx,
        board,
        envs,
        setups_tx,
        crate::datasets::client(config.ca_file.as_deref())?,
    );
    kernels.adopt(adopted);
    let first = engine.info().await.unwrap_or_default();
    if let Some(e) = &first.error {
        let name = engine.name();
        tracing::warn!("{name} runtime unavailable: {e}; jobs with an image will not be placed on this node");
    }
    let (info_tx, containers) = tokio::sync::watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(CONTAINER_POLL).await;
            let info = engine.info().await.unwrap_or_default();
            if info_tx.is_closed() {
                break;
            }
            info_tx.send_if_modified(|cur| {
                let changed = *cur != info;
                if changed {
                    tracing::info!(
                        docker_ok = info.docker_ok,
                        images = info.images.len(),
                        "container runtime state changed"
                    );
                    *cur = info;
                }
                changed
            });
        }
    });
    let mut fence =
        Fence { lease: None, timeout: Duration::ZERO, last_contact: std::time::Instant::now(), fenced: false };
    // Kernels taken over keep the lease their previous agent left: if the manager does not
    // welcome this agent before it runs out, they are fenced as they would have been.
    if let Some(left) = inherited_lease.filter(|_| !config.local_manager) {
        fence.lease = Some(left);
        fence.timeout = left * 2;
    }
    let mut agent = Agent {
        config,
        topology,
        kernels,
        events: rx,
        setups,
        fence,
        containers,
        last_usage: None,
        managers,
        epochs: Epochs::default(),
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = BACKOFF_MIN;
    loop {
        let dialed = {
            let (config, managers) = (agent.config.clone(), agent.managers.clone());
            let dial = dial(&config, &managers);
            tokio::pin!(dial);
            let mut fence_tick = tokio::time::interval(agent.fence.check_every());
            loop {
                tokio::select! {
                    _ = &mut shutdown => return agent.shut_down(None).await,
                    Some(u) = agent.events.recv() => { agent.kernels.record(u); }
                    Some(d) = agent.setups.recv() => { agent.kernels.setup_done(d); }
                    _ = fence_tick.tick() => agent.tick_fence(),
                    r = &mut dial => break r,
                }
            }
        };
        let why = match dialed {
            Err(DialError::Auth) => return agent.fail(DialError::Auth.to_string()).await,
            Err(e @ DialError::Url(_)) => return agent.fail(e.to_string()).await,
            // Nobody can be declaring this node lost: the manager is down, or a takeover is
            // under way (the new leader waits a full heartbeat timeout for its agents).
            Err(e @ (DialError::Down(_) | DialError::Standby { leader: None, .. })) => {
                agent.fence.heard();
                e.to_string()
            }
            Err(e @ (DialError::Other(_) | DialError::Standby { .. })) => e.to_string(),
            Ok((ws, url)) => match agent.session(ws, url, &mut shutdown, &mut backoff).await {
                End::Shutdown(ws) => return agent.shut_down(ws.map(|b| *b)).await,
                End::Refused(reason) if is_fatal_refusal(&reason) => {
                    return agent.fail(format!("the manager refused this agent: {reason}")).await;
                }
                End::Refused(reason) => format!("the manager refused this agent: {reason}"),
                End::Lost(e) => e.to_string(),
            },
        };
        // Jittered, so that the agents of a restarted manager do not all redial in step.
        let wait = jittered(backoff, rand::random::<f64>());
        tracing::warn!("manager connection: {why}; retrying in {}ms", wait.as_millis());
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        let mut fence_tick = tokio::time::interval(agent.fence.check_every());
        loop {
            tokio::select! {
                _ = &mut shutdown => return agent.shut_down(None).await,
                Some(u) = agent.events.recv() => { agent.kernels.record(u); }
                Some(d) = agent.setups.recv() => { agent.kernels.setup_done(d); }
                _ = fence_tick.tick() => agent.tick_fence(),
                _ = &mut sleep => break,
            }
        }
        // A refused connection renews the fencing lease only when a dial sees it: retry well
        // within the lease, or kernels would be fenced while the manager merely restarts.
        let cap = agent.fence.lease.map_or(BACKOFF_MAX, |l| (l / 4).clamp(BACKOFF_MIN, BACKOFF_MAX));
        // With standby managers a new leader may be there any moment: find it fast.
        let cap = if agent.managers.len() > 1 { cap.min(BACKOFF_SEVERAL) } else { cap };
        backoff = (backoff * 2).min(cap);
    }
}

/// A wait between half of `backoff` and all of it (`unit` in [0, 1)): "equal jitter" spreads a
/// crowd of agents over the second half while never waiting longer than the backoff, which
/// the fencing lease bounds.
fn jittered(backoff: Duration, unit: f64) -> Duration {
    backoff / 2 + backoff.div_f64(2.0).mul_f64(unit.clamp(0.0, 1.0))
}

impl Agent {
    /// One connection: register, wait for `Welcome`, then serve until it ends.
    async fn session(
        &mut self,
        mut ws: Ws,
        url: String,
        shutdown: &mut Pin<&mut (impl Future<Output = ()> + Send)>,
        backoff: &mut Duration,
    ) -> End {
        // Streams dial back the manager this session is with.
        self.config.manager_url = url;
        let register = AgentMessage::Register {
            protocol_version: PROTOCOL_VERSION,
            node: self.config.name.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            queue: self.config.queue.clone(),
            topology: self.topology.clone(),
            kernels: self.kernels.reports(),
            address: match &self.config.address {
                Some(a) => Some(a.clone()),
                None => route_address(&self.config.manager_url).await,
            },
            containers: self.containers.borrow_and_update().clone(),
            labels: berth_model::gpu_type::with_derived_label(&self.config.labels, &self.topology.gpus),
            cache_url: self.config.cache_url.clone(),
            cache_weight: self.config.cache_url.as_ref().map(|_| self.config.cache_weight),
            folder_mounts: self.kernels.runtime().mounts_folders(),
        };
        if let Err(e) = send(&mut ws, &register).await {
            return End::Lost(e);
        }
        // Runtime events wait in the channel until Welcome: they happened after the
        // Register snapshot, so they are sent (not lost) once the session is up.
        let welcome = tokio::select! {
            _ = &mut *shutdown => return End::Shutdown(Some(Box::new(ws))),
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, next_command(&mut ws)) => r,
        };
        let (epoch, welcome) = match welcome {
            Ok(Ok(Envelope { epoch, msg })) => (epoch, Ok(Ok(msg))),
            Ok(Err(e)) => (0, Ok(Err(e))),
            Err(e) => (0, Err(e)),
        };
        // Only a welcome names the leader's epoch (a refusal may come from any manager).
        if let Ok(Ok(ManagerMessage::Welcome { .. })) = &welcome
            && let Err(why) = self.epochs.welcome(epoch, &self.config.manager_url)
        {
            return End::Lost(why.into());
        }
        let interval = match welcome {
            Err(_) => return End::Lost(LinkError::NoWelcome),
            Ok(Err(e)) => return End::Lost(e),
            Ok(Ok(ManagerMessage::Welcome { heartbeat_interval_ms, heartbeat_timeout_ms })) => {
                self.fence.heard();
                self.fence.timeout = Duration::from_millis(heartbeat_timeout_ms);
                self.fence.lease = (heartbeat_timeout_ms > 0).then(|| self.fence.timeout / 2);
                heartbeat_interval_ms.max(20)
            }
            Ok(Ok(ManagerMessage::Refused { reason })) => return End::Refused(reason),
            Ok(Ok(other)) => return End::Lost(LinkError::NotWelcome(Box::new(other))),
        };
        tracing::info!(manager = %self.config.manager_url, epoch, "registered with the manager (leader epoch {epoch})");
        // With standby managers, a connection that stays silent (a frozen leader keeps its
        // sockets open) is left well before fencing, to look for the new leader.
        let silent_after = (Duration::from_millis(interval) * 3).max(Duration::from_secs(2));
        *backoff = BACKOFF_MIN;
        let mut heartbeat = tokio::time::interval(Duration::from_millis(interval));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        let mut fence_tick = tokio::time::interval(self.fence.check_every());
        // Starts that waited for stopping kernels while the connection was down, and the
        // environment cache, which the manager forgot with the last connection.
        self.kernels.envs_resend();
        for m in self.kernels.retry_deferred().into_iter().chain(self.kernels.envs_report()) {
            if let Err(e) = send(&mut ws, &m).await {
                return End::Lost(e);
            }
        }
        loop {
            let out: Vec<AgentMessage> = tokio::select! {
                _ = &mut *shutdown => return End::Shutdown(Some(Box::new(ws))),
                m = next_message(&mut ws) => match m {
                    Ok(Some(Envelope { msg: ManagerMessage::Refused { reason }, .. })) => return End::Refused(reason),
                    Ok(Some(Envelope { epoch, msg })) if !self.epochs.admit(epoch, msg.kind()) => Vec::new(),
                    Ok(Some(Envelope { msg: ManagerMessage::OpenStream { stream, secret, key, open }, .. })) => {
                        self.fence.heard();
                        // On a connection of its own: a long `exec` holds up no command.
                        let target = self.kernels.stream_target(key, open == StreamOpen::Attach);
                        tokio::spawn(crate::streams::serve(self.config.clone(), stream, secret, target, open));
                        Vec::new()
                    }
                    Ok(Some(Envelope { msg, .. })) => {
                        self.fence.heard();
                        self.kernels.handle(msg)
                    }
                    Ok(None) => {
                        self.fence.heard();
                        Vec::new()
                    }
                    Err(e) => return End::Lost(e),
                },
                _ = fence_tick.tick() => {
                    self.pass_lease();
                    if self.fence.expired() {
                        self.check_fence();
                        let secs = self.fence.last_contact.elapsed().as_secs_f64();
                        return End::Lost(LinkError::Silent { secs });
                    }
                    if self.managers.len() > 1 && self.fence.last_contact.elapsed() > silent_after {
                        let secs = self.fence.last_contact.elapsed().as_secs_f64();
                        return End::Lost(LinkError::SilentLeader { secs });
                    }
                    Vec::new()
                }
                Some(u) = self.events.recv() => {
                    let mut out: Vec<AgentMessage> = self.kernels.record(u).into_iter().collect();
                    out.extend(self.kernels.retry_deferred());
                    out
                }
                Some(d) = self.setups.recv() => self.kernels.setup_done(d),
                Ok(()) = self.containers.changed() => {
                    vec![AgentMessage::Containers { info: self.containers.borrow_and_update().clone() }]
                }
                _ = heartbeat.tick() => {
                    // A tick's jitter must not push a measurement to the next tick.
                    let slack = Duration::from_millis(100);
                    let measure = self.config.usage_interval.is_some_and(|every| {
                        self.last_usage.is_none_or(|t| t.elapsed() + slack >= every)
                    });
                    if measure {
                        self.last_usage = Some(std::time::Instant::now());
                    }
                    vec![self.kernels.heartbeat(measure)]
                }
            };
            // A start, an end, a build or a removal may have changed the environment cache.
            let out: Vec<AgentMessage> = out.into_iter().chain(self.kernels.envs_report()).collect();
            for m in &out {
                if let Err(e) = send(&mut ws, m).await {
                    return End::Lost(e);
                }
            }
        }
    }

    /// Fences when the lease ran out, and passes the lease on to the kernel supervisor.
    fn tick_fence(&mut self) {
        self.check_fence();
        self.pass_lease();
    }

    /// Tells the kernel supervisor when to fence the kernels should this agent go away: when
    /// the lease runs out (nothing while the manager runs in this process, or before the
    /// first lease).
    fn pass_lease(&self) {
        let fence_in = match self.fence.lease {
            Some(l) if !self.config.local_manager && !self.fence.fenced => {
                Some(l.saturating_sub(self.fence.last_contact.elapsed()))
            }
            _ => None,
        };
        let grace = self.config.stop_grace.min(self.fence.timeout / 8);
        self.kernels.runtime().pass_lease(fence_in, grace);
    }

    /// Fences when the lease ran out: stops every kernel, SIGKILL after at most an eighth of
    /// the manager's timeout, so they are gone before the manager can requeue them.
    fn check_fence(&mut self) {
        if !self.fence.expired() {
            return;
        }
        self.fence.fenced = true;
        let running = self.kernels.running();
        let secs = self.fence.last_contact.elapsed().as_secs_f64();
        if running == 0 {
            tracing::warn!("no word from the manager for {secs:.1}s");
            return;
        }
        tracing::warn!(
            "no word from the manager for {secs:.1}s: stopping {running} kernels before it declares this node lost"
        );
        let grace = self.config.stop_grace.min(self.fence.timeout / 8);
        let message = format!("fenced: the agent lost contact with the manager for {secs:.0}s");
        self.kernels.fence_all(&message, grace);
    }

    /// A graceful stop: leaves the kernels running for the next agent to take over (the
    /// supervisor keeps them, see `runtime::supervisor`), or with `--stop-jobs` stops them.
    async fn shut_down(&mut self, ws: Option<Ws>) -> anyhow::Result<()> {
        let running = self.kernels.running();
        // Without a supervisor the kernels are this process's children: nobody could take
        // them over (the next agent would kill them), so they are stopped and reported.
        if self.config.stop_jobs || running == 0 || !self.kernels.runtime().has_supervisor() {
            return self.stop_and_close(ws).await;
        }
        tracing::info!("agent shutting down: {running} kernels keep running for the next agent to take over");
        self.pass_lease();
        if let Some(mut s) = ws {
            let _ = s.close(None).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), async { while s.next().await.is_some() {} }).await;
        }
        Ok(())
    }

    /// Stops every kernel, reports their ends if connected, and closes the socket.
    async fn stop_and_close(&mut self, mut ws: Option<Ws>) -> anyhow::Result<()> {
        let running = self.kernels.running();
        if running > 0 {
            tracing::info!("agent shutting down: stopping {running} kernels");
        }
        self.kernels.stop_all("agent shut down", self.config.stop_grace);
        while self.kernels.running() > 0 {
            let Some(u) = self.events.recv().await else { break };
            let Some(m) = self.kernels.record(u) else { continue };
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
        self.stop_and_close(None).await?;
        Err(anyhow::anyhow!(error))
    }
}

/// The next frame from the manager: `Some` command, or `None` for a frame that is only a
/// sign of life (pings, and messages of a newer manager this agent does not know).
async fn next_message(ws: &mut Ws) -> Result<Option<Envelope>, LinkError> {
    match ws.next().await {
        None => Err(LinkError::Closed),
        Some(Err(e)) => Err(e.into()),
        Some(Ok(Message::Close(_))) => Err(LinkError::ClosedByManager),
        Some(Ok(Message::Text(t))) => match serde_json::from_str(t.as_str()) {
            Ok(m) => Ok(Some(m)),
            Err(e) => {
                tracing::warn!("ignoring a manager message: {e}");
                Ok(None)
            }
        },
        Some(Ok(_)) => Ok(None),
    }
}

/// The next command, skipping frames that carry none.
async fn next_command(ws: &mut Ws) -> Result<Envelope, LinkError> {
    loop {
        if let Some(m) = next_message(ws).await? {
            return Ok(m);
        }
    }
}

/// The local address this host uses to reach the manager: what other nodes most likely reach
/// it at too (the `MASTER_ADDR` of multi-node jobs). A connected UDP socket asks the routing
/// table without sending anything. `--address` overrides it.
async fn route_address(manager_url: &str) -> Option<String> {
    let uri: tungstenite::http::Uri = manager_url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    let target = tokio::net::lookup_host((host.as_str(), port)).await.ok()?.next()?;
    let bind: std::net::SocketAddr =
        if target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let sock = tokio::net::UdpSocket::bind(bind).await.ok()?;
    sock.connect(target).await.ok()?;
    Some(sock.local_addr().ok()?.ip().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_are_jittered_within_the_backoff() {
        let b = Duration::from_secs(4);
        assert_eq!(jittered(b, 0.0), Duration::from_secs(2));
        assert_eq!(jittered(b, 0.5), Duration::from_secs(3));
        assert!(jittered(b, 0.999_999) <= b && jittered(b, 2.0) == b, "never past the backoff");
        let waits: std::collections::BTreeSet<Duration> = (0..50).map(|_| jittered(b, rand::random())).collect();
        assert!(waits.len() > 40, "agents do not redial in step: {waits:?}");
    }

    #[test]
    fn urls_and_refusals() {
        use crate::dial::connect_url;
        assert_eq!(connect_url("http://h:7070/").unwrap(), "ws://h:7070/v1/agents/connect");
        assert_eq!(connect_url("https://h").unwrap(), "wss://h/v1/agents/connect");
        assert!(connect_url("h:7070").is_err());
        assert!(is_fatal_refusal("protocol version 2 is not supported"));
        assert!(!is_fatal_refusal("node n1 is already connected"));
    }

    #[tokio::test]
    async fn the_route_to_a_loopback_manager_is_loopback() {
        assert_eq!(route_address("http://127.0.0.1:7070").await.as_deref(), Some("127.0.0.1"));
        assert_eq!(
            route_address("http://localhost:7070/").await.as_deref().map(|a| a.starts_with("127.") || a == "::1"),
            Some(true)
        );
        assert_eq!(route_address("not a url").await, None);
    }

    #[test]
    fn the_fence_lease_runs_from_the_last_contact() {
        let mut f =
            Fence { lease: None, timeout: Duration::ZERO, last_contact: std::time::Instant::now(), fenced: false };
        std::thread::sleep(Duration::from_millis(5));
        assert!(!f.expired(), "no lease before the first welcome: never fence");
        f.lease = Some(Duration::from_millis(1));
        assert!(f.expired());
        f.fenced = true;
        assert!(!f.expired(), "fence once per loss of contact");
        f.heard();
        assert!(!f.expired());
        std::thread::sleep(Duration::from_millis(5));
        assert!(f.expired());
    }
}
