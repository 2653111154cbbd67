//! The berth manager: REST API, auth, job queue, scheduling loop and agent hub (ARCHITECTURE.md).
//!
//! CONTRACT (the `berth` binary builds against these names; keep them stable):
//! - `ManagerConfig` (fields below).
//! - `pub async fn start(config: ManagerConfig) -> anyhow::Result<ManagerHandle>`: opens the
//!   store, runs migrations, bootstraps the admin, binds the listener, spawns everything.
//! - `ManagerHandle { pub url: String, pub local_addr: SocketAddr, pub bootstrap: Option<Bootstrap>,
//!   pub join_token: String, pub socket: Option<PathBuf>, pub apps_addr: Option<SocketAddr>, .. }` with `pub async fn shutdown(self)` and `pub async fn wait(self)`.
//! - `Bootstrap { pub user: String, pub token: String }` is `Some` only on the first start of a
//!   data dir: the admin user and its API token, shown once.

mod access_log;
mod admission;
mod agent_conn;
mod api;
mod apps;
mod array_progress;
mod arrays;
mod auth;
mod bad_tokens;
pub mod cache_env;
mod cache_members;
mod cache_push;
pub mod clock;
mod cluster_env;
mod code_store;
pub mod config;
mod dataset_holdings;
mod datasets;
mod deferred;
mod env_intern;
mod error;
mod folders;
mod heard;
mod heartbeat;
mod holds;
mod hub;
mod identity;
mod idle;
mod images;
mod job_requests;
mod jobs;
mod kernel_start;
mod leader;
mod lease;
mod lifecycle;
pub mod local;
mod login_links;
mod manager;
mod metrics;
mod node_name;
mod nodes;
mod openapi;
mod origin;
mod predictions;
pub mod qos;
mod queues;
mod quota_table;
mod quotas;
mod reports;
mod retention;
mod run_as;
mod scheduler;
mod serving;
mod session_cookie;
mod sessions;
mod slurm_env;
mod standby;
mod state;
mod step_token;
mod store_health;
mod streams;
mod submit_queue;
mod tenancy;
mod token;
mod user_holds;
mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use berth_store::{Store, StoreUrl};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use metrics::MetricsAccess;
pub use openapi::ApiDoc;

/// How to start a manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Data directory holding `berth.db` (SQLite, WAL), unless `store` says otherwise.
    pub data_dir: PathBuf,
    /// The store (`--store`), over the config file's `store`; neither: `berth.db` in `data_dir`.
    pub store: Option<StoreUrl>,
    pub listen: SocketAddr,
    /// Name of the admin user created on first start.
    pub admin_user: String,
    /// Optional TOML config file with queues and their policies, and fair-share settings
    /// (see [`config`]).
    pub config_file: Option<PathBuf>,
    /// Seconds without heartbeat before a node is `lost`.
    pub heartbeat_timeout: std::time::Duration,
    /// Serve HTTPS/WSS only, with this certificate and key (`--tls-cert`/`--tls-key`).
    pub tls: Option<berth_tls::server::TlsFiles>,
    /// The dataset cache to hand jobs (`BERTH_CACHE_URL` and a job-scoped token).
    pub cache: Option<cache_env::CacheEnv>,
    /// Also serve the API on this unix socket, for local users whose identity the kernel
    /// vouches for (`local.rs`).
    pub socket: Option<local::LocalSocket>,
    /// Serve jobs' apps (`/apps/<job>/<app>/`) on this address, an origin apart from the API
    /// and dashboard; `None`: no app proxy.
    pub apps_listen: Option<SocketAddr>,
    /// The app proxy's URL as users reach it, when not `http(s)://<API host>:<apps port>`.
    pub apps_url: Option<String>,
    /// `apps_listen` is a default: when its port is taken, a free one is used instead.
    pub apps_listen_defaulted: bool,
    /// The URL other hosts reach this manager's API at (what standbys redirect to while it
    /// leads); `None`: the listening address (loopback for `0.0.0.0`).
    pub advertise_url: Option<String>,
    /// How long the leader lease lasts without renewal (`leader.rs`): a standby takes over
    /// about this long after the leader died.
    pub lease_timeout: Duration,
    /// Told the leader's URL whenever this manager stands by behind a new leader (before
    /// [`start`] returns, which it does only once this manager leads).
    pub on_standby: Option<OnStandby>,
    /// Archive finished jobs that ended longer ago (`--retain`, over the config file's
    /// `retain`; `retention.rs`); `None`: keep every job.
    pub retain: Option<std::time::Duration>,
    /// Where data folders live (`--folder-root`); `None`: `<data_dir>/folders`.
    pub folder_root: Option<PathBuf>,
    /// The most bytes a code snapshot (`--code`) may hold (`--code-limit`); `None`: 1 GiB.
    pub code_limit: Option<u64>,
    /// Who sees the `/metrics` series that name tenants' objects (`--public-metrics`,
    /// `--metrics-token-file`); the default: admins only.
    pub metrics: MetricsAccess,
    /// Turns `true` when the daemon is told to stop (SIGINT, SIGTERM): a manager that stands
    /// by then stops standing by and [`start`] fails with [`StoppedStandingBy`]. (Once it
    /// leads, [`ManagerHandle::shutdown`] stops it.) `None`: it stands by until it leads.
    pub stop: Option<watch::Receiver<bool>>,
}

/// What [`start`] fails with when [`ManagerConfig::stop`] stopped it while it stood by: a
/// clean stop, not a failure of the start.
#[derive(Debug, thiserror::Error)]
#[error("the manager was stopped while it stood by")]
pub struct StoppedStandingBy;

/// A callback for [`ManagerConfig::on_standby`].
#[derive(Clone)]
pub struct OnStandby(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for OnStandby {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnStandby")
    }
}

/// The default of [`ManagerConfig::lease_timeout`].
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The admin user and its API token, shown once on the first start of a data dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub user: String,
    pub token: String,
}

/// A running manager.
pub struct ManagerHandle {
    /// `http://<addr>`, or `https://<addr>` with TLS.
    pub url: String,
    pub local_addr: SocketAddr,
    pub bootstrap: Option<Bootstrap>,
    /// The local agent's join token (the same across restarts of a data dir).
    pub join_token: String,
    /// The unix socket the API is also served on, when it could be bound.
    pub socket: Option<PathBuf>,
    /// Where the app proxy listens, if it does.
    pub apps_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    deposed: watch::Receiver<Option<String>>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    store: Arc<dyn Store>,
}

/// How long shutdown waits for open connections (agents' WebSockets, slow clients).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

impl ManagerHandle {
    /// Stops accepting requests, lets in-flight requests and the current scheduling pass
    /// finish their store writes, then closes the store.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.finish().await;
    }

    /// Resolves when this manager lost the leadership (the reason): it has stopped acting
    /// already, and its owner should shut it down (a restart comes back as a standby).
    pub async fn deposed(&self) -> String {
        let mut d = self.deposed.clone();
        match d.wait_for(|d| d.is_some()).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// How many jobs run (or are being stopped) on node `node`: what a stopping `berth up`
    /// leaves running for its next start. 0 when the store cannot say.
    pub async fn jobs_running_on(&self, node: &str) -> usize {
        use berth_model::JobState;
        let jobs = self.store.unfinished_jobs().await.unwrap_or_default();
        jobs.iter()
            .filter(|j| {
                matches!(j.state, JobState::Running | JobState::Terminating) && j.nodes.iter().any(|n| n == node)
            })
            .count()
    }

    /// Waits until the server stops (it only stops through [`ManagerHandle::shutdown`] or an
    /// accept error).
    pub async fn wait(mut self) {
        let _ = (&mut self.server).await;
        let _ = self.shutdown.send(true);
        self.finish().await;
    }

    async fn finish(self) {
        let mut server = self.server;
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut server).await.is_err() {
            tracing::warn!("connections still open after {}s: closing them", DRAIN_TIMEOUT.as_secs());
            server.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
        self.store.close().await;
    }
}

/// Opens the store in `config.data_dir`, bootstraps, binds `config.listen` and spawns the
/// HTTP server, the scheduling loop and the heartbeat checker.
pub async fn start(config: ManagerConfig) -> anyhow::Result<ManagerHandle> {
    start_with_clock(config, clock::Clock::system()).await
}

/// [`start`] reading the time from `clock`: a test passes a [`clock::Clock::manual`] and
/// advances it instead of sleeping (the leader lease and tokio's timers stay on real time).
pub async fn start_with_clock(config: ManagerConfig, clock: clock::Clock) -> anyhow::Result<ManagerHandle> {
    let cfg = config::load(config.config_file.as_deref())?;
    // Bad certificate files fail the start before anything is opened.
    let tls = config.tls.as_ref().map(berth_tls::server::server_config).transpose()?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))?;
    let url = config
        .store
        .clone()
        .or(cfg.store.clone())
        .unwrap_or_else(|| StoreUrl::Sqlite(config.data_dir.join("berth.db")));
    let store: Arc<dyn Store> =
        berth_store::open(&url).await.with_context(|| format!("cannot open the store {url}"))?;
    let listener = std::net::TcpListener::bind(config.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let local_addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let me = leader::Candidate::new(
        config.advertise_url.clone().unwrap_or_else(|| local_url(scheme, local_addr)),
        config.lease_timeout,
    );
    let stood = stand_by(&*store, &me, &listener, tls.clone(), config.on_standby.clone(), config.stop.clone()).await;
    let (epoch, until) = match stood {
        Ok(won) => won,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    store.fence(epoch);
    let lease = Arc::new(lease::Lease::default());
    lease.lead(epoch, until);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (deposed_tx, deposed) = watch::channel(None);
    // Renewed from now on: loading a big store must not cost the lease it was loaded under.
    let keeper = tokio::spawn(leader::keep(store.clone(), me.clone(), lease.clone(), deposed_tx, shutdown_rx.clone()));
    let led = lead(config, cfg, store.clone(), tls, listener, me, lease, shutdown_rx, clock).await;
    let (bootstrap, join_token, server, mut tasks, socket, apps_addr) = match led {
        Ok(started) => started,
        Err(e) => {
            // Give the lease up at once: a standby need not wait it out.
            let _ = shutdown_tx.send(true);
            let _ = keeper.await;
            store.close().await;
            return Err(e);
        }
    };
    tasks.push(keeper);
    tracing::info!(%local_addr, "berth manager listening");
    Ok(ManagerHandle {
        url: local_url(scheme, local_addr),
        local_addr,
        bootstrap,
        join_token,
        socket,
        apps_addr,
        shutdown: shutdown_tx,
        deposed,
        server,
        tasks,
        store,
    })
}

/// What [`lead`] started: the bootstrap, the join token, the API server, the other tasks, the
/// unix socket and the app proxy's address.
type Started = (Option<Bootstrap>, String, JoinHandle<()>, Vec<JoinHandle<()>>, Option<PathBuf>, Option<SocketAddr>);

/// The leader's start: the manager's state from the store, then its servers and tasks.
#[allow(clippy::too_many_arguments)]
async fn lead(
    config: ManagerConfig,
    cfg: config::Config,
    store: Arc<dyn Store>,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: std::net::TcpListener,
    me: leader::Candidate,
    lease: Arc<lease::Lease>,
    shutdown_rx: watch::Receiver<bool>,
    clock: clock::Clock,
) -> anyhow::Result<Started> {
    // Everything the manager is told is known before it is made (and shared).
    let step_key = step_token::StepKey::load(&*store).await.context("cannot load the step token key")?;
    let apps_listener = match config.apps_listen {
        Some(addr) => Some(bind_apps(addr, config.apps_listen_defaulted).await?),
        None => None,
    };
    let apps = match &apps_listener {
        Some(l) => Some(manager::AppsEndpoint { port: l.local_addr()?.port(), public_url: config.apps_url.clone() }),
        None => None,
    };
    let wiring = manager::Wiring {
        leader_url: me.url.clone(),
        apps,
        cache: config.cache.clone(),
        retain: config.retain.or(cfg.retain),
        step_key,
        tls: tls.is_some(),
    };
    let mut made = manager::Manager::new(
        store.clone(),
        clock,
        cfg.fair_share.clone(),
        config.heartbeat_timeout,
        shutdown_rx.clone(),
        &config.data_dir,
        wiring,
    )
    .with_lease(lease);
    made.kill_invalid_depend = cfg.kill_invalid_depend;
    made.metrics_access = config.metrics.clone();
    made.qos = cfg.qos.clone();
    if let Some(root) = &config.folder_root {
        made = made.with_folder_root(root.clone());
    }
    if let Some(limit) = config.code_limit {
        made = made.with_code_limit(limit);
    }
    let m = Arc::new(made);
    m.folders.prepare().with_context(|| format!("cannot make the folder storage {}", m.folders.root().display()))?;
    m.folders.detect_limits().await;
    m.queues.load(&cfg).await.context("cannot load the queues")?;
    m.quotas.load_quotas().await.context("cannot load the quotas")?;
    let bootstrap = m.tenancy.bootstrap(&config.admin_user).await.context("cannot create the admin user")?;
    let join_token = m.tenancy.local_join_token(&config.data_dir).await.context("cannot set up the join token")?;
    m.rebuild().await.context("cannot load jobs and nodes from the store")?;
    m.serving.load().await.context("cannot load the serving endpoints from the store")?;
    m.cache_members.load(&*store).await.context("cannot load the dataset cache's members and buckets")?;

    let listener = tokio::net::TcpListener::from_std(listener)?;
    // Apps and endpoints speak HTTP/2 too (browsers open WebSockets on HTTP/1.1 beside it).
    let tls_apps = tls.as_ref().map(|c| {
        let mut c = (**c).clone();
        c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(c)
    });
    let server = serve_tcp(listener, api::router(m.clone()), tls, shutdown_rx.clone())?;
    let mut tasks = Vec::new();
    let socket = match &config.socket {
        Some(s) => match local::bind(s) {
            Ok(listener) => {
                let admin = local::LocalAdmin(config.admin_user.as_str().into());
                let app = api::router(m.clone())
                    .layer(axum::Extension(admin))
                    .into_make_service_with_connect_info::<local::LocalPeer>();
                let mut stop = shutdown_rx.clone();
                let graceful = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                tasks.push(tokio::spawn(async move {
                    report(axum::serve(listener, app).with_graceful_shutdown(graceful).await)
                }));
                tracing::info!(socket = %s.path.display(), everyone = s.everyone, "berth manager listening");
                Some(s.path.clone())
            }
            // The socket is a convenience for local users; the manager serves without it.
            Err(e) => {
                tracing::warn!("no unix socket for local users: {e:#}");
                None
            }
        },
        None => None,
    };
    let apps_addr = match apps_listener {
        Some(listener) => {
            let (bound, task) = serve_apps(&m, listener, tls_apps.clone(), shutdown_rx.clone())?;
            tasks.push(task);
            Some(bound)
        }
        None => None,
    };
    let reports = m.hub.take_reports().expect("the report loop starts once");
    tasks.extend([
        tokio::spawn(reports::run(m.clone(), reports)),
        tokio::spawn(scheduler::run(m.clone())),
        tokio::spawn(heartbeat::run(m.clone())),
        tokio::spawn(idle::run(m.clone())),
        tokio::spawn(serving::controller::run(m.clone())),
        tokio::spawn(retention::run(m.clone())),
        tokio::spawn(cache_push::run(m.clone())),
        tokio::spawn(datasets::run(m.clone())),
        tokio::spawn(m.tenancy.bad_tokens().flush_at_shutdown(m.store.clone(), m.shutdown.clone())),
    ]);
    Ok((bootstrap, join_token, server, tasks, socket, apps_addr))
}

/// Serves as a standby on `listener` (redirects to the leader, `standby.rs`) until this
/// manager takes the lease: its epoch and until when it may act. Fails with
/// [`StoppedStandingBy`] once `halt` ([`ManagerConfig::stop`]) turns `true` first.
async fn stand_by(
    store: &dyn Store,
    me: &leader::Candidate,
    listener: &std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    on_standby: Option<OnStandby>,
    halt: Option<watch::Receiver<bool>>,
) -> anyhow::Result<(u64, std::time::Instant)> {
    let (seen_tx, seen) = watch::channel(None);
    let (stop_tx, stop) = watch::channel(false);
    // A second handle on the same socket: the leader serves the first once this one is done.
    let dup = tokio::net::TcpListener::from_std(listener.try_clone().context("cannot share the listener")?)?;
    let server = serve_tcp(dup, standby::router(seen, me.url.clone()), tls, stop)?;
    let told = |url: &str| {
        if let Some(f) = &on_standby {
            (f.0)(url)
        }
    };
    // A stop must end a standby as it ends a leader: without this, a standby outlived the
    // SIGINT it was sent (and whatever signal the daemon's handlers took from the default).
    let stopped = async {
        let told = match halt {
            Some(mut h) => h.wait_for(|h| *h).await.is_ok(),
            None => false,
        };
        if !told {
            // No stop, or its sender gone: only leading ends the standby.
            std::future::pending::<()>().await;
        }
    };
    let won = tokio::select! {
        won = leader::campaign(store, me, &seen_tx, told) => Some(won),
        () = stopped => None,
    };
    let _ = stop_tx.send(true);
    // Keep-alive clients of the standby get their answers; then they are cut and reconnect.
    let mut server = server;
    if tokio::time::timeout(Duration::from_secs(1), &mut server).await.is_err() {
        server.abort();
    }
    won.ok_or_else(|| StoppedStandingBy.into())
}

/// The app proxy's listener: on `addr`, or when that is a default whose port is taken, on a
/// free port of the same address (with a warning), as a second `berth up` would need.
async fn bind_apps(addr: SocketAddr, defaulted: bool) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if defaulted && e.kind() == std::io::ErrorKind::AddrInUse => {
            let any = SocketAddr::new(addr.ip(), 0);
            let l = tokio::net::TcpListener::bind(any).await.with_context(|| format!("cannot listen on {any}"))?;
            tracing::warn!("port {} is taken: the app proxy listens on a free port instead", addr.port());
            Ok(l)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot listen on {addr} (--apps-listen)"))),
    }
}

/// Serves the app proxy (`apps/`) on `listener` until shutdown.
fn serve_apps(
    m: &Arc<manager::Manager>,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let bound = listener.local_addr()?;
    if let Some(url) = m.apps.as_ref().and_then(|a| a.public_url.as_deref()).filter(|u| !u.contains('*')) {
        tracing::warn!(
            "--apps-url {url} has no `*`: every app shares one origin there, so one app's pages can read \
             another's; use a wildcard name (https://*.apps.example.org)"
        );
    }
    let task = match tls {
        // A current-thread worker per core (`apps/workers.rs`); TLS on the shared runtime.
        None => apps::workers::serve(m.clone(), listener, stop)?,
        tls => serve_tcp(listener, apps::router(m.clone()), tls, stop)?,
    };
    tracing::info!(%bound, "app proxy listening");
    Ok((bound, task))
}

/// Serves `app` on a TCP listener (TLS when configured) until shutdown.
fn serve_tcp(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let graceful = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    Ok(match tls {
        Some(tls) => {
            let listener = berth_tls::server::TlsListener::new(listener, tls)?;
            tokio::spawn(async move { report(axum::serve(listener, app).with_graceful_shutdown(graceful).await) })
        }
        None => tokio::spawn(async move {
            let listener = listener.tap_io(|tcp| {
                // Small WebSocket frames and answers must not wait for delayed ACKs (Nagle).
                let _ = tcp.set_nodelay(true);
            });
            report(axum::serve(listener, app).with_graceful_shutdown(graceful).await)
        }),
    })
}

fn report(served: std::io::Result<()>) {
    if let Err(e) = served {
        tracing::error!("http server failed: {e}");
    }
}

/// The URL this process (and the local CLI) reaches the manager at: a manager listening on
/// every address (`0.0.0.0`, `::`) is reached at the loopback address, never at `0.0.0.0`.
fn local_url(scheme: &str, addr: SocketAddr) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    use super::local_url;

    /// Regression: `--listen 0.0.0.0:P` printed `http://0.0.0.0:P` as the URL to use.
    #[test]
    fn listening_everywhere_is_reached_at_loopback() {
        assert_eq!(local_url("http", "0.0.0.0:7070".parse().unwrap()), "http://127.0.0.1:7070");
        assert_eq!(local_url("https", "[::]:7070".parse().unwrap()), "https://[::1]:7070");
        assert_eq!(local_url("http", "10.1.2.3:80".parse().unwrap()), "http://10.1.2.3:80");
    }
}
