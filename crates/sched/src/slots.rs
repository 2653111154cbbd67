//! The pieces a [`NodeLedger`](crate::NodeLedger) is made of (one slot per CPU, NUMA node
//! and GPU, plus cached totals) and the error it returns when a binding does not fit.

use thiserror::Error;

/// Why [`NodeLedger::allocate`](crate::NodeLedger::allocate) refused a binding. The ledger is unchanged when it does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LedgerError {
    #[error("binding is for node {binding}, not {node}")]
    WrongNode { binding: String, node: String },
    #[error("cpu {cpu} does not exist on node {node}")]
    UnknownCpu { node: String, cpu: u32 },
    #[error("cpu {cpu} on node {node} is already taken")]
    CpuTaken { node: String, cpu: u32 },
    #[error("gpu {index} does not exist on node {node}")]
    UnknownGpu { node: String, index: u32 },
    #[error("gpu {index} on node {node} has uuid {actual}, binding says {uuid}")]
    GpuUuidMismatch { node: String, index: u32, uuid: String, actual: String },
    #[error("gpu {index} on node {node} has {free} free, binding wants {want}")]
    GpuOverbooked { node: String, index: u32, free: String, want: String },
    #[error("numa node {numa} does not exist on node {node}")]
    UnknownNuma { node: String, numa: u32 },
    #[error("binding wants {want} memory, node {node} has {free} free on numa nodes {mems}")]
    MemoryOver { node: String, want: String, free: String, mems: String },
}

/// One logical CPU as the ledger sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuSlot {
    pub id: u32,
    /// Index into `NodeLedger::numas`.
    pub numa: usize,
    pub taken: bool,
}

/// One NUMA node: memory and the physical cores whose CPUs belong to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NumaSlot {
    pub id: u32,
    pub mem_cap: u64,
    pub mem_used: u64,
    pub cpu_total: u32,
    pub cpu_free: u32,
    /// Indices into `NodeLedger::cores`, ordered by their lowest CPU id. Shared: it never
    /// changes, and a pass copies ledgers by the thousand.
    pub cores: std::sync::Arc<[usize]>,
}

impl NumaSlot {
    pub fn mem_free(&self) -> u64 {
        self.mem_cap.saturating_sub(self.mem_used)
    }
}

/// One GPU and how many thousandths of it are in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuSlot {
    /// Shared: cloning a ledger should not allocate a string per GPU.
    pub uuid: std::sync::Arc<str>,
    pub index: u32,
    /// Index into `NodeLedger::numas`; `None` when the topology does not say.
    pub numa: Option<usize>,
    pub used: u64,
}

impl GpuSlot {
    pub fn free(&self) -> u64 {
        1000u64.saturating_sub(self.used)
    }
}

/// Node-wide totals derived from the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Aggregates {
    pub mem_cap: u64,
    pub mem_used: u64,
    pub gpu_used: u64,
    pub whole_gpus_free: u32,
    pub max_gpu_free: u64,
    pub max_partial_gpu_free: u64,
}
