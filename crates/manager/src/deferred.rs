//! Agent reports whose state change could not be stored (a full disk, a store error): kept and
//! applied again on every tick of the scheduling loop until they are. Without this a job whose
//! end could not be recorded stayed RUNNING for good: the agent keeps an end until the manager
//! says `Forget` (sent only once it is recorded), but re-sends it only when it reconnects.

use berth_model::protocol::{KernelKey, KernelOutcome};
use berth_model::{JobId, JobState};
use berth_store::StoreError;

use crate::manager::Manager;

/// A report to apply again.
#[derive(Debug, Clone)]
pub enum Deferred {
    Started { node: String, key: KernelKey },
    Finished { node: String, key: KernelKey, outcome: KernelOutcome, exit_code: Option<i32>, message: String },
    Lost { job_id: JobId, node: String, to: JobState, reason: String },
}

/// Whether a failed write may work later. A compare-and-set conflict or an impossible
/// transition means the job has moved on: the report is stale, not deferred.
pub fn worth_retrying(e: &StoreError) -> bool {
    matches!(e, StoreError::DiskFull(_) | StoreError::Db(_))
}

impl Manager {
    /// Applies the deferred reports again; those that fail once more stay deferred.
    pub async fn retry_deferred(&self) {
        let mut st = self.lock_state().await;
        if st.deferred.is_empty() {
            return;
        }
        let todo = std::mem::take(&mut st.deferred);
        tracing::info!(reports = todo.len(), "applying agent reports the store refused before");
        for d in todo {
            match d {
                Deferred::Started { node, key } => {
                    self.kernel_started(&mut st, &node, key).await;
                }
                Deferred::Finished { node, key, outcome, exit_code, message } => {
                    self.kernel_finished(&mut st, &node, key, outcome, exit_code, &message).await;
                }
                Deferred::Lost { job_id, node, to, reason } => {
                    self.lose_job(&mut st, job_id, &node, to, reason).await;
                }
            }
        }
    }
}
