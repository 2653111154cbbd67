//! The simulated cluster: identical nodes in the simulator's one queue, and the shape each
//! trace job takes on them.

use berth_model::{ResourceRequest, Topology};

use super::trace::TraceJob;
use crate::NodeLedger;

/// The simulator's one queue.
pub(super) const QUEUE: &str = "sim";

/// The simulated cluster: identical nodes, one NUMA node each (`n0000`, `n0001`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    pub mem_per_node: u64,
}

impl Cluster {
    /// One ledger per node, all in the simulator's one queue.
    pub fn ledgers(&self) -> Vec<NodeLedger> {
        let topo = Topology::synthetic(1, self.cpus_per_node, self.mem_per_node, self.gpus_per_node);
        (0..self.nodes).map(|i| NodeLedger::new(node_name(i), QUEUE, topo.clone())).collect()
    }

    /// What each kernel of a trace job asks for and on how many nodes (a gang when > 1).
    ///
    /// GPU job of g GPUs on G-GPU nodes: ⌈g/G⌉ nodes with ⌈g/nodes⌉ whole GPUs each, plus
    /// ⌊C/G⌋ CPUs (at least one) and mem/G per GPU. CPU job of p processors on C-CPU nodes:
    /// ⌈p/C⌉ nodes with ⌈p/nodes⌉ CPUs each and mem/C per CPU. Errors when the job is larger
    /// than the cluster.
    pub fn shape(&self, job: &TraceJob) -> Result<(ResourceRequest, u32), TooBig> {
        let c = self.cpus_per_node.max(1) as u64;
        let per_share = |n: u64, of: u64| (self.mem_per_node as u128 * n as u128 / of as u128) as u64;
        let (req, nodes) = if job.gpus > 0 {
            let g = self.gpus_per_node as u64;
            if g == 0 {
                return Err(TooBig::NoGpus { gpus: job.gpus });
            }
            let want = job.gpus as u64;
            let nodes = want.div_ceil(g);
            let per = want.div_ceil(nodes);
            let cpus = (per * (c / g).max(1)).min(c);
            (ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: per_share(per, g), gpu_milli: per * 1000 }, nodes)
        } else {
            let want = job.cpus.max(1) as u64;
            let nodes = want.div_ceil(c);
            let per = want.div_ceil(nodes);
            (ResourceRequest { cpu_milli: per * 1000, mem_bytes: per_share(per, c), gpu_milli: 0 }, nodes)
        };
        if nodes > self.nodes as u64 {
            let what = if job.gpus > 0 { format!("{} GPUs", job.gpus) } else { format!("{} CPUs", job.cpus) };
            return Err(TooBig::Nodes { what, nodes, cluster: self.nodes });
        }
        Ok((req, nodes as u32))
    }
}

/// Why a trace job cannot run on the simulated cluster ([`Cluster::shape`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooBig {
    #[error("needs {gpus} GPUs and the nodes have none")]
    NoGpus { gpus: u32 },
    #[error("needs {what} = {nodes} nodes, the cluster has {cluster}")]
    Nodes { what: String, nodes: u64, cluster: u32 },
}

fn node_name(i: u32) -> String {
    format!("n{i:05}")
}
