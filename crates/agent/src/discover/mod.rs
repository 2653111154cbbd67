//! Hardware discovery: what the agent reports in `Register` (DESIGN.md §4).
//!
//! Sources, in order: a `--topology` TOML file replaces everything; otherwise CPUs, NUMA nodes
//! and memory come from sysfs and GPUs from NVML. `--fake-gpus N` replaces the GPU list in
//! both cases, so every test and demo runs without a GPU.

mod file;
mod gpu;
mod sysfs;

pub use file::{TopologyFileError, parse_topology_file};
pub use gpu::fake_gpus;
pub use sysfs::discover_sysfs;

use anyhow::Context;
use berth_model::Topology;

use crate::AgentConfig;

/// Builds the node's topology from the configured sources.
pub fn discover(config: &AgentConfig) -> anyhow::Result<Topology> {
    let mut topology = match &config.topology_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read topology file `{}`", path.display()))?;
            parse_topology_file(&text, &config.name)
                .map_err(|e| anyhow::anyhow!("topology file `{}`: {e}", path.display()))?
        }
        None => {
            let mut t = discover_sysfs(&config.sysfs_root)?;
            if config.fake_gpus.is_none() {
                t.gpus = gpu::nvml_gpus(&config.sysfs_root);
            }
            t
        }
    };
    if let Some(n) = config.fake_gpus {
        topology.gpus = fake_gpus(&config.name, n, &topology);
    }
    Ok(topology)
}
