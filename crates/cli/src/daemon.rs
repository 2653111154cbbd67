//! The daemon subcommands: `berth up` (manager + local agent in one process), `berth manager`
//! and `berth agent`.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use berth_agent::AgentConfig;
use berth_manager::{Bootstrap, ManagerConfig};
use clap::Args;

use crate::args::parse_cache_weight;
use crate::tls::TlsArgs;

/// `berth up`: manager and one local agent, all in one process.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Directory for the SQLite store, logs and agent state [default: /var/lib/berth for
    /// root, else $XDG_DATA_HOME/berth, i.e. ~/.local/share/berth]
    #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub manager: ManagerFlags,
    /// Pretend the local node has N GPUs (for trying berth without GPUs).
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    /// Serve the local agent's Prometheus /metrics (kernels, their CPU and memory, GPUs) on
    /// this address, e.g. 127.0.0.1:9102; the manager's are always at /metrics on --listen
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub usage: UsageArgs,
    #[command(flatten)]
    pub envs: EnvArgs,
    /// Use this topology file instead of discovering the hardware.
    #[arg(long)]
    pub topology: Option<PathBuf>,
    #[command(flatten)]
    pub cache: crate::commands::cache_daemon::UpCacheArgs,
    #[command(flatten)]
    pub docker: DockerArgs,
    #[command(flatten)]
    pub shim: ShimArgs,
    #[command(flatten)]
    pub users: UserMapArgs,
}

/// How long a manager that lost the leadership waits for its shutdown before it exits.
const DEPOSED_SHUTDOWN: Duration = Duration::from_secs(10);

/// The manager's flags, the same for `berth up` and `berth manager`.
#[derive(Debug, Args)]
pub struct ManagerFlags {
    /// Address the REST API and agent endpoint listen on.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Manager config file (queues and their policies).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A node silent this long is `lost`: its jobs are requeued (`--requeue`) or LOST. Agents
    /// stop their kernels after half of it without word from the manager (fencing)
    #[arg(long, default_value = "30s", value_parser = parse_timeout, env = "BERTH_HEARTBEAT_TIMEOUT")]
    pub heartbeat_timeout: Duration,
    /// Archive finished jobs that ended longer ago than this, e.g. 180d (at least 1h): they
    /// leave `ps -a` and `show`, their usage stays in `berth usage` [default: the config
    /// file's `retain`, else keep every job]
    #[arg(long, value_name = "DURATION", value_parser = berth_manager::config::retain_period, env = "BERTH_RETAIN")]
    pub retain: Option<Duration>,
    /// Where data folders live: a local directory for one machine, a shared filesystem
    /// (NFS, CephFS, Lustre) mounted at the same path on every node for a cluster
    /// [default: DATA_DIR/folders]
    #[arg(long, value_name = "DIR", env = "BERTH_FOLDER_ROOT")]
    pub folder_root: Option<PathBuf>,
    /// The most a code snapshot (`berth submit --code DIR`) may hold, e.g. 2GiB [default: 1GiB]
    #[arg(long, value_name = "SIZE", value_parser = crate::commands::folder::parse_size, env = "BERTH_CODE_LIMIT")]
    pub code_limit: Option<u64>,
    /// `/metrics` shows every series to anyone, the ones that name users' serving endpoints
    /// included [default: those need an admin's token or the scrape token]
    #[arg(long, env = "BERTH_PUBLIC_METRICS")]
    pub public_metrics: bool,
    /// A file (mode 600) holding a token that scrapes every series of `/metrics` (Prometheus:
    /// `authorization: { credentials_file: ... }`), without an admin's API token
    #[arg(long, value_name = "FILE", env = "BERTH_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub apps: AppsArgs,
    /// The URL other machines reach this manager's API at, when it is not the listening address
    /// (several managers on one PostgreSQL store: standbys redirect clients and agents to the
    /// leader's)
    #[arg(long, value_name = "URL", env = "BERTH_ADVERTISE_URL", value_parser = parse_advertise_url)]
    pub advertise_url: Option<String>,
    /// How long the leader lease lasts without renewal: with several managers on one store, a
    /// standby takes over about this long after the leader died (1s to 1m)
    #[arg(long, default_value = "5s", value_parser = parse_lease_timeout, env = "BERTH_LEASE_TIMEOUT")]
    pub lease_timeout: Duration,
}

/// `--advertise-url`: an http(s) URL without a path.
fn parse_advertise_url(s: &str) -> Result<String, String> {
    let u = reqwest::Url::parse(s).map_err(|e| format!("`{s}` is not a URL: {e} (e.g. http://host:7070)"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
        return Err(format!("`{s}`: use http://HOST:PORT or https://HOST:PORT"));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// `--apps-url`: an http(s) URL whose host may start with `*.` (each app's own name).
fn parse_apps_url(s: &str) -> Result<String, String> {
    let rest = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://"));
    let Some(rest) = rest else { return Err(format!("`{s}` is not an http(s) URL: e.g. https://*.apps.example.org")) };
    let host = rest.split(['/', ':']).next().unwrap_or("");
    let wild = host.strip_prefix("*.").unwrap_or(host);
    if wild.is_empty() || wild.contains('*') || rest[host.len()..].contains('*') {
        return Err(format!("`{s}`: `*` may only stand first in the host name, as in https://*.apps.example.org"));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// `--lease-timeout`: a duration between 1 second and 1 minute.
fn parse_lease_timeout(s: &str) -> Result<Duration, String> {
    let secs = berth_model::parse_duration(s).map_err(|e| e.to_string())?;
    if !(1..=60).contains(&secs) {
        return Err(format!("`{s}` is out of range: use 1s to 1m (e.g. 5s)"));
    }
    Ok(Duration::from_secs(secs))
}

/// The app proxy (`berth open`, `/apps/<job>/<app>/`).
#[derive(Debug, Clone, Args)]
pub struct AppsArgs {
    /// Serve jobs' web apps (Jupyter, TensorBoard, `--app`) on this address, an origin apart
    /// from the API [default: --listen's address and the next port, e.g. 127.0.0.1:7071]
    #[arg(long, value_name = "ADDR")]
    pub apps_listen: Option<SocketAddr>,
    /// Turn the app proxy off
    #[arg(long, conflicts_with = "apps_listen")]
    pub no_apps: bool,
    /// The app proxy's URL as users reach it, with `*` for each app's own host name, e.g.
    /// 'https://*.apps.example.org' (a wildcard DNS name for the proxy; endpoints are at
    /// apps.example.org) [default: http://<job>-<app>.localhost:<port> for browsers on this
    /// machine or an SSH tunnel to it]
    #[arg(long, value_name = "URL", value_parser = parse_apps_url)]
    pub apps_url: Option<String>,
}

impl AppsArgs {
    /// Where the app proxy listens: as asked, or beside the API (an ephemeral port when the
    /// API's is).
    pub fn listen(&self, api: SocketAddr) -> Option<SocketAddr> {
        if self.no_apps {
            return None;
        }
        let next = if api.port() == 0 { 0 } else { api.port().saturating_add(1) };
        Some(self.apps_listen.unwrap_or(SocketAddr::new(api.ip(), next)))
    }
}

/// Who a root agent runs each job as.
#[derive(Debug, Clone, Args)]
pub struct UserMapArgs {
    /// Who a root agent runs jobs as: submitter (the Unix user who ran `berth submit` on the
    /// manager's machine, as its kernel vouched; else the node's account of the berth user's
    /// name; else uid 200000 + the berth user's id), range:FIRST-LAST (uid = FIRST + the berth
    /// user's id, always: isolation without accounts), passwd (the node's account of the same
    /// name), or fixed (everyone as nobody: no separation)
    #[arg(long, default_value = "submitter", value_name = "MAP")]
    pub user_map: berth_agent::runtime::UserMap,
}

/// How the agent runs process kernels, and what happens to them when it stops.
#[derive(Debug, Clone, Args)]
pub struct ShimArgs {
    /// On Ctrl-C or SIGTERM, stop the running jobs (SIGTERM, SIGKILL after 10 s; they end
    /// CANCELLED, or are requeued with --requeue) instead of leaving them running for the next
    /// start to take over
    #[arg(long)]
    pub stop_jobs: bool,
    /// No effect: process kernels always run under the node's kernel supervisor now
    #[arg(long, hide = true)]
    pub kernel_shim: bool,
    /// Leave the kernel's cgroup mode alone. By default a root agent on cgroup v1 makes sure
    /// the node has a `favordynmods` cgroup hierarchy mounted (Linux 6.0+, at
    /// /run/berth/cgroup-dynmods), so that a job starting on a quiet node does not wait ~10 ms
    /// for an RCU grace period to join its cgroups
    #[arg(long)]
    pub no_favordynmods: bool,
}

/// How the agent runs container jobs (jobs with `--image`).
#[derive(Debug, Clone, Args)]
pub struct DockerArgs {
    /// Do not run container jobs on this node (Docker is never contacted)
    #[arg(long, help_heading = "Containers")]
    pub no_docker: bool,
    /// Host paths container jobs may mount, e.g. /data,/scratch (repeatable or comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "PATH", help_heading = "Containers")]
    pub allow_mount: Vec<PathBuf>,
    /// Pull images that jobs need and the node lacks (from the registries the Docker daemon
    /// is configured with); the node then takes jobs of any image
    #[arg(long, help_heading = "Containers")]
    pub pull: bool,
    /// Make the private networks of jobs with several kernels on a node (`--kernels N`)
    /// Docker `internal` networks: the kernels reach each other only, not the host or the
    /// outside world (by default they reach out like `docker run` on a bridge)
    #[arg(long, help_heading = "Containers")]
    pub internal_job_networks: bool,
}

impl DockerArgs {
    fn options(&self) -> berth_agent::runtime::DockerOptions {
        berth_agent::runtime::DockerOptions {
            enabled: !self.no_docker,
            allow_mounts: self.allow_mount.clone(),
            pull: self.pull,
            internal_networks: self.internal_job_networks,
        }
    }
}

/// How often the agent measures what kernels use.
#[derive(Debug, Clone, Args)]
pub struct UsageArgs {
    /// How often heartbeats carry what each kernel uses (CPU time, memory, GPU busy time):
    /// `berth ps`/`show` figures are this old at most; `0` measures only each kernel's totals
    /// at its end
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_interval)]
    pub usage_interval: Duration,
}

impl UsageArgs {
    fn interval(&self) -> Option<Duration> {
        (!self.usage_interval.is_zero()).then_some(self.usage_interval)
    }
}

/// Jobs' Python environments (docs/environments.md).
#[derive(Debug, Clone, Args)]
pub struct EnvArgs {
    /// The uv executable that builds jobs' Python environments [default: `uv` on PATH]
    #[arg(long, env = "BERTH_UV", value_name = "PATH")]
    pub uv: Option<PathBuf>,
    /// The most disk the node's cache of built environments may take; past it the least
    /// recently used ones no kernel uses are deleted
    #[arg(long, value_name = "SIZE", default_value = "20GiB", value_parser = parse_cache_size)]
    pub env_cache_size: u64,
    /// The package index environment builds use instead of uv's default (PyPI); users' uv
    /// configuration never applies to shared environments
    #[arg(long, env = "BERTH_UV_INDEX_URL", value_name = "URL")]
    pub uv_index_url: Option<String>,
    /// Further package indexes for environment builds (repeat, or space-separated in the variable)
    #[arg(long, env = "BERTH_UV_EXTRA_INDEX_URL", value_name = "URL", value_delimiter = ' ')]
    pub uv_extra_index_url: Vec<String>,
    /// Directories or pages of wheels environment builds may take packages from (repeat, or
    /// space-separated in the variable)
    #[arg(long, env = "BERTH_UV_FIND_LINKS", value_name = "PATH|URL", value_delimiter = ' ')]
    pub uv_find_links: Vec<String>,
    /// Environment builds use no index, only --uv-find-links
    #[arg(long, env = "BERTH_UV_NO_INDEX")]
    pub uv_no_index: bool,
}

impl EnvArgs {
    fn options(&self) -> berth_agent::envs::EnvOptions {
        berth_agent::envs::EnvOptions {
            uv: self.uv.clone(),
            cache_bytes: self.env_cache_size,
            index: berth_model::environment::IndexSettings {
                index_url: self.uv_index_url.clone(),
                extra_index_urls: self.uv_extra_index_url.clone(),
                find_links: self.uv_find_links.clone(),
                no_index: self.uv_no_index,
            },
        }
    }
}

fn parse_cache_size(s: &str) -> Result<u64, String> {
    berth_model::parse_mem(s).map_err(|e| format!("{e} (e.g. 20GiB)"))
}

/// A duration with a unit (`5s`, `500ms`, `1m`), or `0`.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if let Some(ms) = s.strip_suffix("ms") {
        return ms
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("`{s}`: use e.g. 5s, 500ms or 0"));
    }
    berth_model::parse_duration(s).map(Duration::from_secs).map_err(|e| format!("{e}: use e.g. 5s, 500ms or 0"))
}

/// `berth manager`: the manager alone.
#[derive(Debug, Args)]
pub struct ManagerArgs {
    /// Directory for the SQLite store and the manager's files [default: /var/lib/berth for
    /// root, else $XDG_DATA_HOME/berth, i.e. ~/.local/share/berth]
    #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub manager: ManagerFlags,
    /// The store: sqlite:PATH or postgres://USER@HOST[:PORT]/DATABASE (the password from
    /// ~/.pgpass or PGPASSFILE, never here) [default: the config file's `store`, else SQLite
    /// in the data dir]
    #[arg(long, value_name = "URL", conflicts_with = "store_file")]
    pub store: Option<String>,
    /// A file (mode 0600) holding the store URL, for a URL with a password
    #[arg(long, value_name = "PATH")]
    pub store_file: Option<PathBuf>,
    #[command(flatten)]
    pub cache: crate::commands::cache_daemon::ManagerCacheArgs,
}

/// `berth agent`: one node's agent.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Manager URL, e.g. http://head:7070; several comma-separated for managers that stand by
    /// for each other (the agent follows the leader)
    #[arg(long, env = "BERTH_MANAGER")]
    pub manager: String,
    /// Join token from `berth up`/`berth manager` (or `berth admin join-token create`); on a
    /// command line every local user can read it: prefer --join-token-file
    #[arg(long, env = "BERTH_JOIN_TOKEN", hide_env_values = true, required_unless_present = "join_token_file")]
    pub join_token: Option<String>,
    /// A file holding the join token (private: mode 600), e.g. a systemd credential
    /// (`LoadCredential=`, then `--join-token-file ${CREDENTIALS_DIRECTORY}/join-token`)
    #[arg(long, value_name = "FILE", conflicts_with = "join_token")]
    pub join_token_file: Option<PathBuf>,
    /// Node name (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Queue the node serves.
    #[arg(long, default_value = berth_model::DEFAULT_QUEUE)]
    pub queue: String,
    /// Directory for kernels, logs and the kernel supervisor [default: /var/lib/berth/agent
    /// for root, else $XDG_DATA_HOME/berth/agent]
    #[arg(long, env = "BERTH_AGENT_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Serve Prometheus /metrics (kernels, their CPU and memory, GPUs) on this address, e.g.
    /// 0.0.0.0:9102 (unauthenticated, like every Prometheus exporter)
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub usage: UsageArgs,
    #[command(flatten)]
    pub envs: EnvArgs,
    /// Address other nodes reach this one at (MASTER_ADDR of multi-node jobs); default: this
    /// host's address on the route to the manager
    #[arg(long)]
    pub address: Option<std::net::IpAddr>,
    #[command(flatten)]
    pub users: UserMapArgs,
    /// A label queues may select this node by (repeatable), e.g. --label gpu=a100; its key and
    /// KEY=VALUE are also features jobs may ask for (--constraint)
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
    /// Root of sysfs used for hardware discovery.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// PEM certificate(s) to trust for an https:// manager besides the public CAs: the CA that
    /// signed the manager's certificate, or that certificate itself.
    #[arg(long, env = "BERTH_CA_FILE", value_name = "CA.pem")]
    pub ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub docker: DockerArgs,
    #[command(flatten)]
    pub shim: ShimArgs,
    /// The dataset cache node on this machine (`berth cache serve`), e.g. http://10.0.0.5:7171:
    /// the manager adds it to the cache's members and hands it to the kernels run here.
    #[arg(long, value_name = "URL", value_parser = parse_cache_url)]
    pub cache_url: Option<String>,
    /// That cache node's relative share of the keys (1-1000), e.g. 2 for twice the disk of
    /// the others; an admin's `berth cache member set --weight` wins over it.
    #[arg(long, value_name = "W", default_value_t = 1, value_parser = parse_cache_weight)]
    pub cache_weight: u32,
}

/// How long `berth up` waits for the local agent to stop its kernels on Ctrl-C.
const AGENT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Grace between SIGTERM and SIGKILL when kernels are stopped.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// `--cache-url`: an http:// or https:// base URL, kept without a trailing `/`.
fn parse_cache_url(s: &str) -> Result<String, String> {
    let ok = ["http://", "https://"].iter().any(|p| s.strip_prefix(p).is_some_and(|h| !h.is_empty()));
    if !ok {
        return Err(format!("`{s}` is not a cache node URL: use http://HOST:PORT (https:// with TLS)"));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// `--label KEY=VALUE`.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("invalid label `{s}`: use KEY=VALUE, e.g. gpu=a100"))?;
    let ok = berth_manager::config::valid_label;
    if !ok(k) || !ok(v) {
        return Err(format!("invalid label `{s}`: keys and values are 1-63 letters, digits, `-`, `_`, `.`, `/`"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// `--heartbeat-timeout`: a duration (`30s`, `2m`) between 1 second and 1 day.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs = berth_model::parse_duration(s).map_err(|e| e.to_string())?;
    if !(1..=86_400).contains(&secs) {
        return Err(format!("`{s}` is out of range: use 1s to 24h (e.g. 30s)"));
    }
    Ok(Duration::from_secs(secs))
}

pub async fn up(args: UpArgs) -> anyhow::Result<()> {
    // Kernels' dirs live below it (`agent/kernels`), so their users must be able to pass.
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Manager)?;
    let data_dir = prepare_data_dir(&data_dir, Traverse::Allowed)?;
    let trusted_cert = args.manager.tls.trusted_cert();
    let cache = args.cache.start(&data_dir, args.manager.tls.files().as_ref(), trusted_cert.as_deref()).await?;
    let cache_env = cache.as_ref().map(|c| c.env.clone());
    // `berth up` is one machine: its store is always SQLite in its data dir.
    // One machine, one manager: a `berth up` whose store another manager leads (a second
    // `berth up` on the same data dir) stops instead of standing by.
    let refuse = berth_manager::OnStandby(std::sync::Arc::new(|leader: &str| {
        eprintln!(
            "error: another berth already serves this data dir (at {leader}): stop it first, or give this one \
             another --data-dir"
        );
        std::process::exit(1);
    }));
    let handle = start_manager(&data_dir, None, &args.manager, cache_env, Some(refuse), None).await?;
    let url = handle.url.clone();
    let handle_apps = handle.apps_addr;
    let token = remember_admin_token(&data_dir, handle.bootstrap.as_ref())?;
    let creds = match &token {
        Some(t) => Some(
            crate::cred_guard::install(credentials_of(&url, t, trusted_cert.as_deref(), &handle), &data_dir).await?,
        ),
        None => None,
    };

    let stop_jobs = args.shim.stop_jobs;
    let agent = AgentConfig {
        manager_url: url.clone(),
        join_token: handle.join_token.clone(),
        name: host_name(),
        queue: berth_model::DEFAULT_QUEUE.to_string(),
        data_dir: data_dir.join("agent"),
        sysfs_root: PathBuf::from("/sys"),
        fake_gpus: args.fake_gpus,
        topology_file: args.topology,
        run_as: None,
        user_map: args.users.user_map,
        stop_grace: STOP_GRACE,
        address: None,
        labels: Default::default(),
        ca_file: trusted_cert,
        docker: args.docker.options(),
        kernel_shim: Some(kernel_supervisor()),
        stop_jobs: args.shim.stop_jobs,
        favor_dynmods: !args.shim.no_favordynmods,
        local_manager: true,
        cache_url: cache.as_ref().map(|c| c.url.clone()),
        cache_weight: 1,
        metrics_listen: args.metrics_listen,
        usage_interval: args.usage.interval(),
        envs: args.envs.options(),
    };
    // Discover before printing "up" so a bad --topology file fails the command at once.
    berth_agent::discover(&agent).context("cannot discover this machine's hardware")?;
    let (stop_agent, agent_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut agent_task = tokio::spawn(berth_agent::run(agent, async move {
        let _ = agent_stopped.await;
    }));

    match &creds {
        Some(c) => println!("berth is up: {url}  {}", c.describe()),
        None => println!("berth is up: {url}  (no admin token on record: set BERTH_URL and BERTH_TOKEN)"),
    }
    println!("data dir: {}", data_dir.display());
    if let Some(a) = handle_apps {
        println!("app proxy: {a} (jobs' web apps: berth apps ID, berth open ID APP)");
    }
    if let Some(s) = &handle.socket {
        // SAFETY: geteuid cannot fail and touches no memory.
        let who = if unsafe { libc::geteuid() } == 0 { "every local user" } else { "you" };
        println!("local socket: {} ({who}; jobs run as the Unix user who submits them)", s.display());
        // Local users find a root berth's socket at the system path by themselves; anywhere
        // else they need the line that points them at it.
        if s.as_path() != std::path::Path::new(crate::credentials::SYSTEM_SOCKET) {
            println!("  other local users: export BERTH_SOCKET={}", s.display());
        }
    }
    if let Some(c) = &cache {
        println!(
            "dataset cache: {} (jobs get BERTH_CACHE_URL and a job token; admin token: berth cache token --admin --key-file {})",
            c.url,
            c.key_file.display()
        );
    }
    if let Some(hint) = path_hint(std::env::current_exe().ok().as_deref(), std::env::var_os("PATH").as_deref()) {
        println!("{hint}");
    }
    println!("press Ctrl-C to stop");
    let stop = shutdown_signal();
    crate::service::ready(&format!("serving {url}"));

    tokio::select! {
        _ = stop => crate::service::stopping(),
        why = handle.deposed() => {
            // Only a second manager on the same store can take the lease over.
            let _ = stop_agent.send(());
            let _ = tokio::time::timeout(AGENT_STOP_TIMEOUT, agent_task).await;
            handle.shutdown().await;
            anyhow::bail!("the manager lost the leadership ({why})");
        }
        res = &mut agent_task => {
            handle.shutdown().await;
            return match res {
                Ok(Ok(())) => Err(anyhow::anyhow!("the local agent stopped unexpectedly")),
                Ok(Err(e)) => Err(e.context("the local agent failed")),
                Err(e) => Err(anyhow::anyhow!("the local agent crashed: {e}")),
            };
        }
    }
    if stop_jobs {
        tracing::info!("stopping berth: stopping running kernels, then the manager");
    } else {
        tracing::info!(
            "stopping berth: running jobs keep running and the next `berth up` takes them over (--stop-jobs stops them)"
        );
    }
    let _ = stop_agent.send(());
    match tokio::time::timeout(AGENT_STOP_TIMEOUT, agent_task).await {
        Ok(Ok(Err(e))) => tracing::warn!("agent stopped with an error: {e:#}"),
        Err(_) => tracing::warn!("agent did not stop within {}s", AGENT_STOP_TIMEOUT.as_secs()),
        _ => {}
    }
    handle.shutdown().await;
    if let Some(c) = cache {
        c.task.abort();
    }
    tracing::info!("berth stopped");
    Ok(())
}

pub async fn manager(args: ManagerArgs) -> anyhow::Result<()> {
    // Bad store flags fail before anything is made.
    let store = crate::commands::store::url("--store", args.store.as_deref(), args.store_file.as_deref())?;
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Manager)?;
    // Local users pass through to the manager's socket (`berth.sock`); the store and the
    // tokens beside it are 0600.
    let data_dir = prepare_data_dir(&data_dir, Traverse::Allowed)?;
    let cache_env = args.cache.env()?;
    // A standby is a started service too: it serves (redirects to the leader) until it leads.
    let on_standby = berth_manager::OnStandby(std::sync::Arc::new(|leader: &str| {
        println!("berth manager stands by: the leader is {leader}");
        crate::service::ready(&format!("standing by for the leader at {leader}"));
    }));
    // The stop handlers go in before the start: it stands by for as long as another manager
    // leads, and SIGINT must end that as SIGTERM does (a handler installed only once it led
    // left a standby with whatever the shell gave it: a background job ignores SIGINT).
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let signalled = shutdown_signal();
    tokio::spawn(async move {
        signalled.await;
        let _ = stop_tx.send(true);
    });
    let started = start_manager(&data_dir, store, &args.manager, cache_env, Some(on_standby), Some(stop.clone())).await;
    let handle = match started {
        Ok(h) => h,
        Err(e) if e.downcast_ref::<berth_manager::StoppedStandingBy>().is_some() => {
            crate::service::stopping();
            tracing::info!("stopping the berth manager (it stood by)");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let url = handle.url.clone();
    let trusted_cert = args.manager.tls.trusted_cert();
    if let Some(token) = remember_admin_token(&data_dir, handle.bootstrap.as_ref())? {
        let creds = credentials_of(&url, &token, trusted_cert.as_deref(), &handle);
        let written = crate::cred_guard::install(creds, &data_dir).await?;
        println!("berth manager is up: {url}  {}", written.describe());
    } else {
        println!("berth manager is up: {url}");
    }
    println!("join token for agents: {}", handle.join_token);
    if let Some(a) = handle.apps_addr {
        println!("app proxy: {a} (jobs' web apps: berth apps ID, berth open ID APP)");
    }
    // With TLS, agents need the certificate (or its CA) unless a public CA signed it.
    let ca = trusted_cert.map(|c| format!(" --ca-file {}", c.display())).unwrap_or_default();
    // Listening on every address: other machines reach this one by its name, not loopback.
    let agent_url = if handle.local_addr.ip().is_unspecified() {
        let scheme = url.split("://").next().unwrap_or("http");
        format!("{scheme}://{}:{}", host_name(), handle.local_addr.port())
    } else {
        url.clone()
    };
    println!("  berth agent --manager {agent_url} --join-token {}{ca}", handle.join_token);
    crate::service::ready(&format!("serving {url}"));
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        why = handle.deposed() => {
            crate::service::stopping();
            // A manager cut off from its store may wait long on it: it has stopped acting
            // already, so a bounded shutdown loses nothing.
            if tokio::time::timeout(DEPOSED_SHUTDOWN, handle.shutdown()).await.is_err() {
                tracing::warn!("the shutdown did not finish in {}s: exiting anyway", DEPOSED_SHUTDOWN.as_secs());
            }
            // Non-zero, so that a service manager restarts it, as a standby.
            anyhow::bail!("this manager lost the leadership ({why}): exiting so that it comes back as a standby");
        }
    }
    crate::service::stopping();
    // Through the log, which may be JSON lines (`--log-format json`).
    tracing::info!("stopping the berth manager");
    handle.shutdown().await;
    Ok(())
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Agent)?;
    let data_dir = prepare_data_dir(&data_dir, Traverse::Denied)?;
    let join_token = match (args.join_token, &args.join_token_file) {
        (_, Some(file)) => crate::service::read_secret_file(file, "join token")?,
        (Some(token), None) => token,
        (None, None) => anyhow::bail!("give the join token: --join-token-file FILE (or BERTH_JOIN_TOKEN)"),
    };
    let config = AgentConfig {
        manager_url: args.manager.trim_end_matches('/').to_string(),
        join_token,
        name: args.name.unwrap_or_else(host_name),
        queue: args.queue,
        data_dir,
        sysfs_root: args.sysfs_root,
        fake_gpus: args.fake_gpus,
        topology_file: args.topology,
        run_as: None,
        user_map: args.users.user_map,
        stop_grace: STOP_GRACE,
        address: args.address.map(|a| a.to_string()),
        labels: args.label.into_iter().collect(),
        ca_file: args.ca_file,
        docker: args.docker.options(),
        kernel_shim: Some(kernel_supervisor()),
        stop_jobs: args.shim.stop_jobs,
        favor_dynmods: !args.shim.no_favordynmods,
        local_manager: false,
        cache_url: args.cache_url,
        cache_weight: args.cache_weight,
        metrics_listen: args.metrics_listen,
        usage_interval: args.usage.interval(),
        envs: args.envs.options(),
    };
    berth_agent::discover(&config).context("cannot discover this machine's hardware")?;
    let stop = shutdown_signal();
    crate::service::ready("running kernels");
    let stopping = async {
        stop.await;
        crate::service::stopping();
    };
    berth_agent::run(config, stopping).await
}

async fn start_manager(
    data_dir: &Path,
    store: Option<berth_store::StoreUrl>,
    flags: &ManagerFlags,
    cache: Option<berth_manager::cache_env::CacheEnv>,
    on_standby: Option<berth_manager::OnStandby>,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
) -> anyhow::Result<berth_manager::ManagerHandle> {
    let (listen, apps) = (flags.listen, &flags.apps);
    // Local users reach the manager over its unix socket, where the kernel vouches for who
    // they are, so their jobs run as them. Only a root manager's agents can run jobs as
    // other users, so only its socket is open to every local user.
    let socket = berth_manager::local::LocalSocket {
        path: berth_manager::local::socket_path(data_dir),
        // SAFETY: geteuid cannot fail and touches no memory.
        everyone: unsafe { libc::geteuid() } == 0,
    };
    let mut metrics = berth_manager::MetricsAccess { public: flags.public_metrics, token_hash: None };
    if let Some(file) = &flags.metrics_token_file {
        metrics = metrics.with_token(&crate::service::read_secret_file(file, "metrics token")?);
    }
    let config = ManagerConfig {
        metrics,
        stop,
        socket: Some(socket),
        data_dir: data_dir.to_path_buf(),
        store,
        listen,
        admin_user: std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "admin".into()),
        config_file: flags.config.clone(),
        heartbeat_timeout: flags.heartbeat_timeout,
        tls: flags.tls.files(),
        cache,
        apps_listen: apps.listen(listen),
        apps_url: apps.apps_url.clone(),
        apps_listen_defaulted: apps.apps_listen.is_none(),
        advertise_url: flags.advertise_url.clone(),
        lease_timeout: flags.lease_timeout,
        on_standby,
        retain: flags.retain,
        folder_root: flags.folder_root.clone(),
        code_limit: flags.code_limit,
    };
    berth_manager::start(config).await.with_context(|| format!("cannot start the manager on {listen}"))
}

/// The credentials of the manager `handle` serves at `url`, for its admin `token`.
fn credentials_of(
    url: &str,
    token: &str,
    ca_file: Option<&Path>,
    handle: &berth_manager::ManagerHandle,
) -> crate::credentials::Credentials {
    crate::credentials::Credentials {
        url: url.to_string(),
        token: Some(token.to_string()),
        ca_file: ca_file.map(Path::to_path_buf),
        socket: handle.socket.clone(),
        data_dir: None,
    }
}

/// Whether others may pass through a data dir (never list or change it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traverse {
    Allowed,
    Denied,
}

/// Creates the data dir (0700) or tightens an existing one: nobody but the daemon lists,
/// reads or writes it (`berth.db` holds every job's environment, and the tokens sit beside
/// it); a manager's (`berth up`'s, whose kernels' own dirs are below too) lets others pass
/// (0711) to its unix socket.
fn prepare_data_dir(dir: &Path, traverse: Traverse) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("cannot resolve data directory {}", dir.display()))?;
    let mode = match traverse {
        Traverse::Allowed => 0o711,
        Traverse::Denied => 0o700,
    };
    let old = std::fs::metadata(&dir).with_context(|| format!("cannot read data directory {}", dir.display()))?;
    if old.permissions().mode() & 0o777 != mode {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot make data directory {} private (mode {mode:o})", dir.display()))?;
    }
    Ok(dir)
}

/// The admin token of this data dir. The manager stores only its hash and shows the plain
/// token once, on the first start; `berth up` keeps a copy (mode 0600) beside the store so
/// that later starts on another address can still write a working credentials file.
fn remember_admin_token(data_dir: &Path, bootstrap: Option<&Bootstrap>) -> anyhow::Result<Option<String>> {
    let path = data_dir.join("admin-token");
    if let Some(b) = bootstrap {
        write_private(&path, &b.token)?;
        return Ok(Some(b.token.clone()));
    }
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    // A new 0600 file renamed over the old one: truncating an existing file keeps its mode.
    berth_cache::private::write_atomic(path, content.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The kernel supervisor that forks process kernels: this very binary (`berth
/// kernel-supervisor`), by `/proc/self/exe` so that it keeps working when the file is replaced
/// (a rebuild, an upgrade) while the agent runs.
fn kernel_supervisor() -> PathBuf {
    PathBuf::from("/proc/self/exe")
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Resolves on Ctrl-C or SIGTERM.
/// Resolves on SIGINT or SIGTERM. The handlers are installed by the call, not the first
/// poll: a daemon that has told systemd it is ready must not die of a SIGTERM sent right
/// after.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// When no `berth` on `PATH` is this very binary (`cargo run --release -- up` leaves it in
/// `target/release`), where it is and the one line that puts it on `PATH`.
fn path_hint(exe: Option<&Path>, path: Option<&std::ffi::OsStr>) -> Option<String> {
    let exe = exe?.canonicalize().ok()?;
    let on_path = path
        .map(|p| std::env::split_paths(p).any(|d| d.join("berth").canonicalize().is_ok_and(|b| b == exe)))
        .unwrap_or(false);
    if on_path {
        return None;
    }
    let dir = exe.parent()?;
    Some(format!(
        "the berth CLI is {}; to run `berth` from any shell: export PATH=\"{}:$PATH\" (or: cargo install --path crates/cli)",
        exe.display(),
        dir.display()
    ))
}

#[cfg(test)]
mod path_hint_tests {
    use super::path_hint;

    #[test]
    fn a_binary_not_on_path_gets_the_line_that_puts_it_there() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("berth");
        std::fs::write(&exe, "").unwrap();
        let hint = path_hint(Some(&exe), Some(std::ffi::OsStr::new("/usr/bin:/bin"))).unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert!(hint.contains(&format!("export PATH=\"{}:$PATH\"", real.display())), "{hint}");
        let path = std::env::join_paths([std::path::Path::new("/usr/bin"), dir.path()]).unwrap();
        assert_eq!(path_hint(Some(&exe), Some(&path)), None, "already on PATH");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_intervals_take_a_unit_or_zero() {
        assert_eq!(parse_interval("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert!(parse_interval("soon").unwrap_err().contains("use e.g. 5s"));
        let off = UsageArgs { usage_interval: Duration::ZERO };
        assert_eq!(off.interval(), None);
    }
}
