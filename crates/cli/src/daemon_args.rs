//! The daemons' flags: `berth up`, `berth manager` and `berth agent` (clap), and their parsers;
//! `daemon.rs` wires them into a manager and an agent.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    #[command(flatten)]
    pub log: crate::service::LogArgs,
}

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
    /// The engine that runs container jobs: `docker` (the Docker daemon) or `podman` (Podman's
    /// API service, which the agent starts when nobody runs it)
    #[arg(long, value_name = "ENGINE", default_value = "docker", value_parser = parse_engine, help_heading = "Containers")]
    pub container_runtime: berth_agent::runtime::Engine,
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
    pub(crate) fn options(&self) -> berth_agent::runtime::DockerOptions {
        berth_agent::runtime::DockerOptions {
            enabled: !self.no_docker,
            engine: self.container_runtime,
            allow_mounts: self.allow_mount.clone(),
            pull: self.pull,
            internal_networks: self.internal_job_networks,
        }
    }
}

fn parse_engine(s: &str) -> Result<berth_agent::runtime::Engine, berth_agent::runtime::UnknownEngine> {
    s.parse()
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
    pub(crate) fn interval(&self) -> Option<Duration> {
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
    pub(crate) fn options(&self) -> berth_agent::envs::EnvOptions {
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
    #[command(flatten)]
    pub log: crate::service::LogArgs,
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
    #[command(flatten)]
    pub log: crate::service::LogArgs,
}

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
