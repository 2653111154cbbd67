//! The agent's own check of a binding before it starts a kernel (ARCHITECTURE.md).
//!
//! The manager binds devices, but the agent is the last line of defence against a stale or
//! buggy manager view: a binding must name this node, devices that exist here, and nothing that
//! a live kernel already holds. The ledger is derived from the live kernels' bindings each time,
//! so it can never drift from the kernel table.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{Binding, Topology, format_bytes};
use thiserror::Error;

/// Why a binding cannot be started here; sent to the manager as `CommandFailed`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LedgerError {
    #[error("binding is for node `{want}`, this is `{have}`")]
    WrongNode { want: String, have: String },
    #[error("binding names CPU {0}, which this node does not have")]
    NoSuchCpu(u32),
    #[error("CPU {0} is already used by another kernel")]
    CpuTaken(u32),
    #[error("binding names NUMA node {0}, which this node does not have")]
    NoSuchMemNode(u32),
    #[error("binding names GPU `{0}`, which this node does not have")]
    NoSuchGpu(String),
    #[error("GPU `{uuid}` would be over-committed: {used} + {want} thousandths > 1000")]
    GpuOvercommit { uuid: String, used: u64, want: u64 },
    #[error("memory would be over-committed: {want} requested, {free} free of {total}")]
    MemOvercommit { want: String, free: String, total: String },
}

/// Checks `binding` for node `node` against the topology and the bindings of live kernels.
pub fn check<'a>(
    topology: &Topology,
    node: &str,
    binding: &Binding,
    live: impl IntoIterator<Item = &'a Binding>,
) -> Result<(), LedgerError> {
    if binding.node != node {
        return Err(LedgerError::WrongNode { want: binding.node.clone(), have: node.to_string() });
    }
    let mut used_cpus = BTreeSet::new();
    let mut used_gpu: BTreeMap<&str, u64> = BTreeMap::new();
    let mut used_mem = 0u64;
    for b in live {
        used_cpus.extend(b.cpus.iter().copied());
        for g in &b.gpus {
            *used_gpu.entry(g.uuid.as_str()).or_default() += g.milli;
        }
        used_mem = used_mem.saturating_add(b.mem_bytes);
    }
    for &c in &binding.cpus {
        if !topology.cpus.iter().any(|x| x.id == c) {
            return Err(LedgerError::NoSuchCpu(c));
        }
        if used_cpus.contains(&c) {
            return Err(LedgerError::CpuTaken(c));
        }
    }
    for &m in &binding.mems {
        if !topology.numa_nodes.iter().any(|n| n.id == m) {
            return Err(LedgerError::NoSuchMemNode(m));
        }
    }
    // Sum this binding's own shares per uuid too: two entries for one GPU must also fit.
    let mut want_gpu: BTreeMap<&str, u64> = BTreeMap::new();
    for g in &binding.gpus {
        if !topology.gpus.iter().any(|x| x.uuid == g.uuid) {
            return Err(LedgerError::NoSuchGpu(g.uuid.clone()));
        }
        *want_gpu.entry(g.uuid.as_str()).or_default() += g.milli;
    }
    for (uuid, want) in want_gpu {
        let used = used_gpu.get(uuid).copied().unwrap_or(0);
        if used + want > 1000 {
            return Err(LedgerError::GpuOvercommit { uuid: uuid.to_string(), used, want });
        }
    }
    let free = topology.mem_bytes.saturating_sub(used_mem);
    if binding.mem_bytes > free {
        return Err(LedgerError::MemOvercommit {
            want: format_bytes(binding.mem_bytes),
            free: format_bytes(free),
            total: format_bytes(topology.mem_bytes),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::GpuShare;

    fn topo() -> Topology {
        Topology::synthetic(2, 2, 4 << 30, 1)
    }

    fn b(cpus: &[u32], mem_gib: u64, gpus: &[(&str, u64)]) -> Binding {
        Binding {
            node: "n1".into(),
            cpus: cpus.to_vec(),
            cpu_milli: cpus.len() as u64 * 1000,
            mems: vec![0],
            mem_bytes: mem_gib << 30,
            gpus: gpus.iter().map(|(u, m)| GpuShare { uuid: u.to_string(), index: 0, milli: *m }).collect(),
            port: None,
        }
    }

    #[test]
    fn accepts_a_free_binding() {
        let live = [b(&[0], 2, &[("GPU-fake-0", 500)])];
        assert_eq!(check(&topo(), "n1", &b(&[1, 2], 6, &[("GPU-fake-0", 500)]), &live), Ok(()));
    }

    #[test]
    fn refuses_clashes_and_unknown_devices() {
        let t = topo();
        let live = [b(&[0], 2, &[("GPU-fake-0", 600)])];
        let mut other = b(&[1], 1, &[]);
        other.node = "n2".into();
        assert!(matches!(check(&t, "n1", &other, &live), Err(LedgerError::WrongNode { .. })));
        assert_eq!(check(&t, "n1", &b(&[0, 1], 1, &[]), &live), Err(LedgerError::CpuTaken(0)));
        assert_eq!(check(&t, "n1", &b(&[9], 1, &[]), &live), Err(LedgerError::NoSuchCpu(9)));
        assert!(matches!(
            check(&t, "n1", &b(&[1], 1, &[("GPU-fake-0", 500)]), &live),
            Err(LedgerError::GpuOvercommit { used: 600, want: 500, .. })
        ));
        assert!(matches!(
            check(&t, "n1", &b(&[1], 1, &[("GPU-fake-1", 600), ("GPU-fake-1", 600)]), []),
            Err(LedgerError::GpuOvercommit { .. })
        ));
        assert_eq!(check(&t, "n1", &b(&[1], 1, &[("GPU-x", 100)]), &live), Err(LedgerError::NoSuchGpu("GPU-x".into())));
        let e = check(&t, "n1", &b(&[1], 7, &[]), &live).unwrap_err();
        assert_eq!(e.to_string(), "memory would be over-committed: 7GiB requested, 6GiB free of 8GiB");
        let mut bad_mems = b(&[1], 1, &[]);
        bad_mems.mems = vec![5];
        assert_eq!(check(&t, "n1", &bad_mems, &live), Err(LedgerError::NoSuchMemNode(5)));
    }
}
