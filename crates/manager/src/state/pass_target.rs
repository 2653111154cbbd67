//! The manager's in-memory state as a pass's target (`berth_sched::apply::PassTarget`): the
//! scheduler's code applies a pass to it exactly as `berth sim` applies one to a replay. The
//! scheduling loop (`scheduler.rs`) stores the pass first and calls in only once that
//! succeeded; this module only changes memory.

use std::collections::BTreeSet;

use berth_model::StopCause;
use berth_model::{JobId, JobState};
use berth_sched::apply::PassTarget;
use berth_sched::{Millis, NodeLedger, Start, Untried, Waiting};
use jiff::Timestamp;

use super::State;

impl PassTarget for State {
    fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger> {
        State::ledger_mut(self, node)
    }

    fn is_pending(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| j.state == JobState::Pending)
    }

    fn stoppable(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.attempt.stop.is_none() && matches!(j.state, JobState::Scheduled | JobState::Preparing | JobState::Running)
        })
    }

    fn awaiting_victims(&self) -> BTreeSet<JobId> {
        self.jobs
            .values()
            .filter(|j| j.state == JobState::Terminating)
            .filter_map(|j| match j.attempt.stop {
                Some(StopCause::Preempted { by_job, .. }) => Some(by_job),
                _ => None,
            })
            .collect()
    }

    fn waits(&mut self, w: Waiting) {
        self.pending.set_blocked_passes(w.job, w.blocked_passes);
        if let Some(job) = self.jobs.get_mut(&w.job) {
            job.waiting.pass = self.pass_seq;
            job.waiting.position = Some(w.position);
            job.waiting.blocked_passes = w.blocked_passes;
            job.waiting.reason = Some(w.reason);
            job.waiting.expected_start = w.expected_start.and_then(|ms| Timestamp::from_millisecond(ms).ok());
        }
    }

    fn untried(&mut self, run: &Untried) {
        if run.rest.is_some() {
            // The jobs behind it are placed when someone looks (`State::untried_places`).
            self.untried.push(run.clone());
        }
        for (k, id) in run.jobs.iter().enumerate() {
            if let Some(job) = self.jobs.get_mut(id) {
                job.waiting.pass = self.pass_seq;
                job.waiting.position = Some(run.first_position + k as u32);
                // A deep queue's reasons rarely change: no copy for those that did not.
                if job.waiting.reason.as_ref() != Some(&run.reason) {
                    job.waiting.reason = Some(run.reason.clone());
                }
                job.waiting.expected_start = None;
            }
        }
    }

    fn started(&mut self, s: Start, borrowed: bool, now: Millis) {
        let id = s.job;
        if let Some(job) = self.jobs.get_mut(&id) {
            job.place(s.bindings, borrowed, now);
        }
        self.sync_sets(id);
    }
}
