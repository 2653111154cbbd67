//! berth's scheduler core: pure, synchronous and deterministic (DESIGN.md §5).
//!
//! The manager keeps one [`NodeLedger`] per node (which CPUs, how much memory per NUMA node and
//! which GPU fractions are free) and calls [`schedule`] with a snapshot of the pending jobs.
//! The pass returns the exact [`Binding`]s to start and, for every job left waiting, its
//! position and a precise [`PendingReason`]. No clock, no I/O, no async: the same input always
//! gives the same output, so the live manager and `berth sim` run the same code.
//!
//! CONTRACT (other crates build against these names; keep them stable):
//! - `NodeLedger::new(name, queue, topology)`, `.allocate(&Binding) -> Result<(), LedgerError>`,
//!   `.release(&Binding)`, `.set_schedulable(bool)`, `.name()`, `.queue()`, `.topology()`,
//!   `.cpus_used() -> u32`, `.mem_used() -> u64`, `.gpu_used_milli(gpu_index) -> u64`,
//!   `.try_bind(&ResourceRequest, NumaPolicy) -> Result<Binding, String>`.
//! - `schedule(&PassInput) -> PassOutput`.
//! - `check_feasible(&ResourceRequest, nodes_needed, &[NodeLedger], queue) -> Result<(), String>`.
//!
//! Also public: [`check_feasible_with`] (the same with the job's NUMA policy), [`LedgerError`],
//! and the read-only `NodeLedger::{cpus_total, mem_total, gpus_used_milli, allocations}`.
//!
//! How the manager uses it:
//! - at start, build one ledger per known node and `allocate` the binding of every kernel that
//!   still holds resources (SCHEDULED..TERMINATING); an error there means the store disagrees
//!   with itself (two kernels on one CPU) and should be logged, not ignored;
//! - after a pass, `allocate` every binding of every start on the real ledgers (in the same
//!   transaction that records the starts), and store each waiting job's `position`, `reason`
//!   and `blocked_passes`;
//! - when a kernel ends, `release` its binding (releasing twice is harmless); when a node is
//!   lost or drained, `set_schedulable(false)`; when its agent re-registers, rebuild its
//!   ledger from the topology and re-allocate the kernels it still runs.

mod bind;
mod feasible;
mod ledger;
mod pass;
mod place;
mod shortfall;
mod slots;
mod water;

#[cfg(test)]
mod test_support;

pub use feasible::{check_feasible, check_feasible_with};
pub use ledger::{LedgerError, NodeLedger};
pub use pass::schedule;

use berth_model::{Binding, JobId, NumaPolicy, PendingReason, ResourceRequest};

/// How a queue treats a job at its head that cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadOfLine {
    /// Nothing passes a blocked job: strict priority/FIFO order.
    Strict,
    /// A blocked job keeps its place for N passes, then steps aside so later jobs may start.
    SkipAfter(u32),
}

/// One queue's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    pub name: String,
    pub head_of_line: HeadOfLine,
}

/// A job waiting to be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub id: JobId,
    pub priority: i32,
    pub queue: String,
    pub request: ResourceRequest,
    pub nodes: u32,
    pub numa: NumaPolicy,
    /// Passes in which this job was blocked while it could hold others back (for `SkipAfter`).
    pub blocked_passes: u32,
}

/// Input of one scheduling pass.
#[derive(Debug, Clone, Copy)]
pub struct PassInput<'a> {
    pub queues: &'a [QueueConfig],
    pub nodes: &'a [NodeLedger],
    pub pending: &'a [PendingJob],
}

/// A job to start now, with one binding per kernel (index 0 is `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    pub bindings: Vec<Binding>,
}

/// A job that stays pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub job: JobId,
    /// 1-based position in its queue's order.
    pub position: u32,
    pub reason: PendingReason,
    /// New value of `PendingJob::blocked_passes`.
    pub blocked_passes: u32,
}

/// Output of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassOutput {
    pub starts: Vec<Start>,
    pub waiting: Vec<Waiting>,
}
