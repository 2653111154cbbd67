//! Hardware discovery: what the agent reports in `Register` (ARCHITECTURE.md).
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn config(sysfs: &str, file: Option<PathBuf>, fake: Option<u32>) -> AgentConfig {
        AgentConfig {
            manager_url: String::new(),
            join_token: String::new(),
            name: "n1".into(),
            queue: "default".into(),
            data_dir: PathBuf::new(),
            sysfs_root: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(sysfs).join("sys"),
            fake_gpus: fake,
            topology_file: file,
            run_as: None,
            user_map: Default::default(),
            stop_grace: std::time::Duration::from_secs(1),
            address: None,
            labels: Default::default(),
            ca_file: None,
            docker: Default::default(),
            kernel_shim: None,
            favor_dynmods: false,
            stop_jobs: false,
            local_manager: false,
            cache_url: None,
            cache_weight: 1,
            metrics_listen: None,
            usage_interval: Some(crate::USAGE_INTERVAL),
            envs: Default::default(),
        }
    }

    #[test]
    fn fake_gpus_on_a_fixture_tree() {
        let t = discover(&config("2numa-smt", None, Some(3))).unwrap();
        assert_eq!(t.cpus.len(), 8);
        assert_eq!(t.gpus.len(), 3);
        assert_eq!(t.gpus[1].numa, Some(1));
    }

    #[test]
    fn topology_file_replaces_discovery() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/topology-2numa-4gpu.toml");
        let t = discover(&config("does-not-exist", Some(example.clone()), None)).unwrap();
        assert_eq!((t.cpus.len(), t.gpus.len()), (32, 4));
        let t = discover(&config("does-not-exist", Some(example), Some(1))).unwrap();
        assert_eq!(t.gpus.len(), 1, "--fake-gpus replaces the file's GPUs");

        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[[numa]]\ncpus = \"0-3\"\nmemory = \"lots\"\n").unwrap();
        let e = discover(&config("x", Some(bad.clone()), None)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("topology file `{}`: line 3, numa[0].memory: invalid memory size", bad.display())),
            "{e}"
        );
        let e = discover(&config("x", Some(dir.path().join("missing.toml")), None)).unwrap_err().to_string();
        assert!(e.contains("cannot read topology file"), "{e}");
    }
}
