//! The berth agent: discovers the node's hardware, dials the manager over the agent protocol,
//! and runs kernels with the binding the manager chose (docs/cluster.md, docs/node.md).
//!
//! CONTRACT (the `berth` binary builds against these names; keep them stable):
//! - `AgentConfig` (fields below) and `pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()>`.
//! - `pub fn discover(&AgentConfig) -> anyhow::Result<Topology>` (sysfs, NVML, fake GPUs, topology file).
//!
//! Layout: `discover` builds the topology, `runtime` starts and watches kernel processes,
//! `kernels` is the agent's table of kernels and its ledger, `meter` samples what they use,
//! `conn` speaks the protocol, `envs` builds and caches jobs' Python environments.

use std::future::Future;
use std::path::PathBuf;

mod conn;
mod datasets;
mod dial;
pub mod discover;
mod disk;
pub mod envs;
mod epoch;
mod kernels;
pub mod ledger;
pub mod logs;
mod meter;
pub mod metrics;
pub mod runtime;
mod setup;
mod streams;

/// How to start an agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Manager base URL, e.g. `http://127.0.0.1:7070` (the agent dials `<url>/v1/agents/connect`),
    /// or several comma-separated for managers that stand by for each other: the agent dials
    /// them all and follows the leader. While connected, the URL of the manager it is connected to.
    pub manager_url: String,
    pub join_token: String,
    /// Node name; defaults to the host name.
    pub name: String,
    pub queue: String,
    /// Where the agent keeps kernel logs and default work dirs:
    /// `<data_dir>/kernels/<job>.<attempt>.<index>/{stdout.log,stderr.log,work/}`.
    pub data_dir: PathBuf,
    /// Root of sysfs for discovery (`/sys`); tests point it at fixture trees.
    pub sysfs_root: PathBuf,
    /// Add N fake GPUs instead of asking NVML.
    pub fake_gpus: Option<u32>,
    /// A TOML topology file that replaces discovery entirely.
    pub topology_file: Option<PathBuf>,
    /// Unix user kernels run as when the agent runs as root (default `nobody`).
    pub run_as: Option<String>,
    /// How a root agent gives each berth user its own Unix uid (default: a uid range).
    pub user_map: runtime::UserMap,
    /// Grace between SIGTERM and SIGKILL when a kernel is stopped.
    pub stop_grace: std::time::Duration,
    /// Where other nodes reach this one (`MASTER_ADDR`); `None`: the local address of the
    /// route to the manager.
    pub address: Option<String>,
    /// Labels queues may select this node by (`--label gpu=a100`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// PEM certificates trusted for an `https://` manager besides the public roots
    /// (`--ca-file`; see [`tls`]). Read at start, and again on every dial so a fixed file is
    /// picked up without a restart.
    pub ca_file: Option<PathBuf>,
    /// The `docker` runtime: on or off, mount allow-list, pulling of missing images.
    pub docker: runtime::DockerOptions,
    /// An executable with the `kernel-supervisor` subcommand (the `berth` binary itself): the
    /// node's kernel supervisor forks process kernels, so they outlive the agent and a
    /// restarted agent takes them over (see [`runtime::supervisor`]); `None` runs them as the
    /// agent's children.
    pub kernel_shim: Option<PathBuf>,
    /// Stop the running kernels when the agent is stopped gracefully (`--stop-jobs`); by
    /// default they run on and the next agent takes them over.
    pub stop_jobs: bool,
    /// On cgroup v1, mount a `favordynmods` cgroup hierarchy so that kernels join their
    /// cgroups without waiting for an RCU grace period (`runtime::dynmods`).
    pub favor_dynmods: bool,
    /// The manager runs in this process (`berth up`): while the agent is away so is the
    /// manager, nobody requeues, and the supervisor never fences the kernels.
    pub local_manager: bool,
    /// The dataset cache node on this machine, reported to the manager at registration.
    pub cache_url: Option<String>,
    /// Its relative weight in the cache's routing, reported with it (an admin's weight set
    /// on the manager wins).
    pub cache_weight: u32,
    /// Serve Prometheus `/metrics` (kernels, their usage, GPUs) on this address
    /// (`--metrics-listen`); `None`: no metrics server.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How often heartbeats carry what kernels use (`--usage-interval`); `None`: never (their
    /// totals at the end are still reported).
    pub usage_interval: Option<std::time::Duration>,
    /// Python environments: where uv is, how much the node's cache may hold.
    pub envs: envs::EnvOptions,
}

/// The default of `--usage-interval`: live figures a few seconds old, at a cost a node with
/// a hundred kernels does not notice (Slurm gathers every 30 s by default).
pub const USAGE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Discovers this node's topology (see the `discover` module for the sources and their order).
pub fn discover(config: &AgentConfig) -> anyhow::Result<berth_model::Topology> {
    discover::discover(config)
}

/// Runs the agent until `shutdown` resolves: discovers the node, prepares the runtime, and keeps
/// a connection to the manager (reconnecting with backoff) while kernels run. On shutdown the
/// running kernels keep running for the next agent to take over (with `stop_jobs`, every one
/// is stopped and reported before the socket is closed).
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
    // A CA file that cannot be used fails the start: retrying would never help.
    berth_tls::client::client_config(config.ca_file.as_deref())?;
    let topology = discover(&config)?;
    tracing::info!(
        node = %config.name,
        cpus = topology.cpus.len(),
        numa = topology.numa_nodes.len(),
        gpus = topology.gpus.len(),
        mem = %berth_model::format_bytes(topology.mem_bytes),
        "discovered topology"
    );
    let runtime = runtime::Runtime::new(runtime::RuntimeOptions::from_config(&config, &topology))?
        .with_manager(config.manager_url.clone(), config.ca_file.clone());
    let board = metrics::Board::new(&config.name);
    if let Some(addr) = config.metrics_listen {
        metrics::serve(addr, board.clone()).await?;
    }
    conn::run(config, topology, runtime, board, shutdown).await
}
