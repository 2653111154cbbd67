//! Shared by unit tests: machines with SMT laid out the way Linux numbers them, and pending
//! jobs with neutral defaults.

use berth_model::{Cpu, Gpu, JobId, NumaNode, NumaPolicy, ResourceRequest, Topology};

use crate::PendingJob;

/// A one-kernel job of user and project `u` in queue `q` asking for `request` (tests change
/// the fields they care about).
pub fn pending(id: JobId, request: ResourceRequest) -> PendingJob {
    PendingJob {
        id,
        priority: 0,
        queue: "q".into(),
        request,
        nodes: 1,
        numa: NumaPolicy::PreferLocal,
        blocked_passes: 0,
        user: "u".into(),
        project: "u".into(),
        submitted_at: 0,
        time_limit_ms: None,
        estimate_ms: None,
        attained: 0,
        image: None,
        kernels: 1,
        mounts: Vec::new(),
        data_on: Vec::new(),
        avoid: Vec::new(),
        constraint: None,
        exclusive: false,
        folders: false,
    }
}

/// `numa` NUMA nodes with `cores` physical cores each and two threads per core, numbered like
/// Linux does on most x86 machines: core `c` has CPUs `c` and `c + total_cores`. GPUs are
/// spread evenly (`gpus` per NUMA node), `GPU-<index>`.
pub fn smt(numa: u32, cores: u32, mem_per_numa: u64, gpus: u32) -> Topology {
    let total = numa * cores;
    let mut t = Topology::default();
    for n in 0..numa {
        let mut ids = Vec::new();
        for c in n * cores..(n + 1) * cores {
            for id in [c, c + total] {
                t.cpus.push(Cpu { id, core: c, package: n, numa: n });
                ids.push(id);
            }
        }
        ids.sort_unstable();
        t.numa_nodes.push(NumaNode { id: n, cpus: ids, mem_bytes: mem_per_numa, distances: vec![] });
        for g in 0..gpus {
            let index = n * gpus + g;
            t.gpus.push(Gpu {
                uuid: format!("GPU-{index}"),
                index,
                model: "test".into(),
                mem_bytes: 16 << 30,
                numa: Some(n),
            });
        }
    }
    t.mem_bytes = mem_per_numa * numa as u64;
    t
}
