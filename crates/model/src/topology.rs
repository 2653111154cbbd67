//! What an agent reports about its machine: CPUs, NUMA nodes, memory and GPUs.
//!
//! The same shape comes from sysfs + NVML on real hardware and from a `--topology` TOML file
//! or `--fake-gpus` in tests, so the scheduler never knows the difference.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One logical CPU (a hardware thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Cpu {
    /// Logical CPU id as the kernel numbers it (`/sys/devices/system/cpu/cpuN`).
    pub id: u32,
    /// Physical core id within its package; SMT siblings share it.
    pub core: u32,
    /// Physical package (socket) id.
    pub package: u32,
    /// NUMA node the CPU belongs to.
    pub numa: u32,
}

/// One NUMA node: its CPUs and local memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub mem_bytes: u64,
    /// Distances to every NUMA node, indexed by node id (SLIT); empty when unknown.
    #[serde(default)]
    pub distances: Vec<u32>,
}

/// One GPU as NVML (or a fixture) describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Gpu {
    pub uuid: String,
    pub index: u32,
    pub model: String,
    pub mem_bytes: u64,
    /// NUMA node the device is attached to, when known.
    #[serde(default)]
    pub numa: Option<u32>,
}

/// Everything the manager needs to know to bind devices on a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Topology {
    pub cpus: Vec<Cpu>,
    pub numa_nodes: Vec<NumaNode>,
    pub mem_bytes: u64,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
}

impl Topology {
    /// Total CPU capacity in millicores.
    pub fn cpu_milli(&self) -> u64 {
        self.cpus.len() as u64 * 1000
    }

    /// Total GPU capacity in thousandths of a device.
    pub fn gpu_milli(&self) -> u64 {
        self.gpus.len() as u64 * 1000
    }

    /// A simple machine for tests: `numa` nodes, each with `cpus_per_numa` CPUs (one per core),
    /// `mem_per_numa` bytes and `gpus_per_numa` GPUs named `GPU-fake-<index>`.
    pub fn synthetic(numa: u32, cpus_per_numa: u32, mem_per_numa: u64, gpus_per_numa: u32) -> Topology {
        let mut t = Topology::default();
        for n in 0..numa {
            let ids: Vec<u32> = (n * cpus_per_numa..(n + 1) * cpus_per_numa).collect();
            for &id in &ids {
                t.cpus.push(Cpu { id, core: id, package: n, numa: n });
            }
            t.numa_nodes.push(NumaNode { id: n, cpus: ids, mem_bytes: mem_per_numa, distances: vec![] });
            for g in 0..gpus_per_numa {
                let index = n * gpus_per_numa + g;
                t.gpus.push(Gpu {
                    uuid: format!("GPU-fake-{index}"),
                    index,
                    model: "Fake GPU".into(),
                    mem_bytes: 16 << 30,
                    numa: Some(n),
                });
            }
        }
        t.mem_bytes = mem_per_numa * numa as u64;
        t
    }
}
