//! The berth agent: discovers the node's hardware, dials the manager over the agent protocol,
//! and runs kernels with the binding the manager chose (DESIGN.md §7, §8).
//!
//! CONTRACT (the `berth` binary builds against these names; keep them stable):
//! - `AgentConfig` (fields below) and `pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()>`.
//! - `pub fn discover(&AgentConfig) -> anyhow::Result<Topology>` (sysfs, NVML, fake GPUs, topology file).

use std::path::PathBuf;

/// How to start an agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Manager base URL, e.g. `http://127.0.0.1:7070` (the agent dials `<url>/v1/agents/connect`).
    pub manager_url: String,
    pub join_token: String,
    /// Node name; defaults to the host name.
    pub name: String,
    pub queue: String,
    /// Where the agent keeps kernel logs, work dirs and its state (`<data_dir>/agent`).
    pub data_dir: PathBuf,
    /// Root of sysfs for discovery (`/sys`); tests point it at fixture trees.
    pub sysfs_root: PathBuf,
    /// Add N fake GPUs instead of asking NVML.
    pub fake_gpus: Option<u32>,
    /// A TOML topology file that replaces discovery entirely.
    pub topology_file: Option<PathBuf>,
    /// Unix user kernels run as when the agent runs as root (default `nobody`).
    pub run_as: Option<String>,
    /// Grace between SIGTERM and SIGKILL when a kernel is stopped.
    pub stop_grace: std::time::Duration,
}
