//! The manager's in-memory state as a pass's target (`berth_sched::apply::PassTarget`): the
//! scheduler's code applies a pass to it exactly as `berth sim` applies one to a replay. The
//! scheduling loop (`scheduler.rs`) stores the pass first and calls in only once that
//! succeeded; this module only changes memory.

use std::collections::BTreeSet;

use berth_model::StopCause;
use berth_model::{Binding, JobId, JobState};
use berth_sched::apply::PassTarget;
use berth_sched::{Millis, NodeLedger, Start, Untried, Waiting};
use jiff::Timestamp;

use crate::state::State;

/// The reason a placed job carries: `scheduled on NODE, NODE`.
pub fn scheduled_reason(bindings: &[Binding]) -> String {
    let mut nodes: Vec<&str> = bindings.iter().map(|b| b.node.as_str()).collect();
    nodes.dedup();
    format!("scheduled on {}", nodes.join(", "))
}

impl PassTarget for State {
    fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger> {
        State::ledger_mut(self, node)
    }

    fn is_pending(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| j.state == JobState::Pending)
    }

    fn stoppable(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.stop.is_none() && matches!(j.state, JobState::Scheduled | JobState::Preparing | JobState::Running)
        })
    }

    fn awaiting_victims(&self) -> BTreeSet<JobId> {
        self.jobs
            .values()
            .filter(|j| j.state == JobState::Terminating)
            .filter_map(|j| match j.stop {
                Some(StopCause::Preempted { by_job, .. }) => Some(by_job),
                _ => None,
            })
            .collect()
    }

    fn waits(&mut self, w: Waiting) {
        if let Some(job) = self.jobs.get_mut(&w.job) {
            job.position = Some(w.position);
            job.blocked_passes = w.blocked_passes;
            job.pending_reason = Some(w.reason);
            job.expected_start = w.expected_start.and_then(|ms| Timestamp::from_millisecond(ms).ok());
        }
    }

    fn untried(&mut self, run: &Untried) {
        for (k, id) in run.jobs.iter().enumerate() {
            if let Some(job) = self.jobs.get_mut(id) {
                job.position = Some(run.first_position + k as u32);
                // A deep queue's reasons rarely change: no copy for those that did not.
                if job.pending_reason.as_ref() != Some(&run.reason) {
                    job.pending_reason = Some(run.reason.clone());
                }
                job.expected_start = None;
            }
        }
    }

    fn started(&mut self, s: Start, borrowed: bool, now: Millis) {
        let Some(job) = self.jobs.get_mut(&s.job) else { return };
        let kernels = s.bindings.len();
        job.state = JobState::Scheduled;
        job.reason = Some(scheduled_reason(&s.bindings));
        job.position = None;
        job.pending_reason = None;
        job.expected_start = None;
        job.placed_at = Timestamp::from_millisecond(now).ok();
        job.accounted_ms = now;
        job.ends = vec![None; kernels];
        job.unstarted = (0..kernels as u32).collect();
        job.borrowed = borrowed;
        job.bindings = s.bindings;
    }
}
