//! Agent reports whose state change could not be stored (a full disk, a store error): kept and
//! applied again on every tick of the scheduling loop until they are. Without this a job whose
//! end could not be recorded stayed RUNNING for good: the agent keeps an end until the manager
//! says `Forget` (sent only once it is recorded), but re-sends it only when it reconnects.
//!
//! This module is the record and the retry rule only; the state changes that defer reports,
//! and `Jobs::retry_deferred` that applies them again, are in `lifecycle.rs`.

use berth_model::JobId;
use berth_model::protocol::{KernelKey, KernelOutcome};
use berth_store::StoreError;

/// What lost a job's kernel (`Jobs::lose_job`, and kept with a deferred loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostCause {
    /// Its node (no heartbeat, not back after a restart, or fenced): LOST.
    Node,
    /// Its agent answered without the kernel: FAILED.
    Kernel,
}

/// A report to apply again.
#[derive(Debug, Clone)]
pub enum Deferred {
    Started {
        node: String,
        key: KernelKey,
    },
    Finished {
        node: String,
        key: KernelKey,
        outcome: KernelOutcome,
        exit_code: Option<i32>,
        signal: Option<i32>,
        message: String,
    },
    Lost {
        job_id: JobId,
        node: String,
        cause: LostCause,
        reason: String,
    },
}

/// Whether a failed write may work later. A compare-and-set conflict or an impossible
/// transition means the job has moved on: the report is stale, not deferred.
pub fn worth_retrying(e: &StoreError) -> bool {
    matches!(e, StoreError::DiskFull(_) | StoreError::Db(_))
}
