//! The daemon subcommands: `berth up` (manager + local agent in one process), `berth manager`
//! and `berth agent`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// `berth up`: manager and one local agent, all in one process.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Directory for the SQLite store, logs and agent state.
    #[arg(long, default_value = "./berth-data")]
    pub data_dir: PathBuf,
    /// Address the REST API and agent endpoint listen on.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Pretend the local node has N GPUs (for trying berth without GPUs).
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    /// Use this topology file instead of discovering the hardware.
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Manager config file (queues and their policies).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `berth manager`: the manager alone.
#[derive(Debug, Args)]
pub struct ManagerArgs {
    #[arg(long, default_value = "./berth-data")]
    pub data_dir: PathBuf,
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `berth agent`: one node's agent.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Manager URL, e.g. http://head:7070.
    #[arg(long, env = "BERTH_MANAGER")]
    pub manager: String,
    /// Join token from `berth up`/`berth manager` (or `berth admin join-token create`).
    #[arg(long, env = "BERTH_JOIN_TOKEN", hide_env_values = true)]
    pub join_token: String,
    /// Node name (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Queue the node serves.
    #[arg(long, default_value = berth_model::DEFAULT_QUEUE)]
    pub queue: String,
    #[arg(long, default_value = "./berth-agent-data")]
    pub data_dir: PathBuf,
    #[arg(long)]
    pub fake_gpus: Option<u32>,
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Root of sysfs used for hardware discovery.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
}

pub async fn up(_args: UpArgs) -> anyhow::Result<()> {
    anyhow::bail!("berth up is not wired yet")
}

pub async fn manager(_args: ManagerArgs) -> anyhow::Result<()> {
    anyhow::bail!("berth manager is not wired yet")
}

pub async fn agent(_args: AgentArgs) -> anyhow::Result<()> {
    anyhow::bail!("berth agent is not wired yet")
}
