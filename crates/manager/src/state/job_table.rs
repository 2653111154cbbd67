//! The job table: the jobs in memory (every unfinished one, and an ended one until its move
//! lets it go), read through questions the services ask of it. A job enters only through
//! [`State::insert_job`] and changes state only through `lifecycle::Move`, which is the one
//! caller of [`State::job_mut`] that touches `state` and of [`State::remove_job`].

use berth_model::{JobId, JobState};

use super::{Job, State};

impl State {
    /// Job `id`, if it is in memory.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Whether job `id` is in memory (unfinished, or ended and not yet let go).
    pub fn has_job(&self, id: JobId) -> bool {
        self.jobs.contains_key(&id)
    }

    /// How many jobs are in memory.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Every job in memory, oldest first.
    pub fn live_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// The jobs in memory submitted before `before` (all with `None`), newest first: a page of
    /// `berth ps`.
    pub fn live_jobs_newest_first(&self, before: Option<JobId>) -> impl Iterator<Item = &Job> {
        self.jobs.range(..before.unwrap_or(JobId::MAX)).rev().map(|(_, j)| j)
    }

    /// The jobs holding resources (scheduled, running, terminating).
    pub fn holding_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(|j| j.state.holds_resources())
    }

    /// The PENDING jobs, held ones among them.
    pub fn pending_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(|j| j.state == JobState::Pending)
    }

    /// The tasks of job array `array` that are in memory.
    pub fn tasks_of(&self, array: JobId) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(move |j| j.spec.array_task.is_some_and(|t| t.array_id == array))
    }

    /// The replica jobs of serving endpoint `endpoint_id` that are in memory.
    pub fn replicas_of(&self, endpoint_id: i64) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(move |j| j.spec.replica_of.as_ref().is_some_and(|r| r.endpoint_id == endpoint_id))
    }

    /// Job `id` to change a field that is not its state (a pending reason, an attempt's
    /// bookkeeping); a state change goes through `lifecycle::Move`, and a change the
    /// scheduler sees is followed by [`State::sync_sets`].
    pub fn job_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.jobs.get_mut(&id)
    }

    /// Lets ended job `id` go from memory (`lifecycle::Move`, once its end is stored).
    pub fn remove_job(&mut self, id: JobId) -> Option<Job> {
        self.jobs.remove(&id)
    }

    /// The usage of every job holding resources is accounted up to `now_ms`.
    pub fn accounted_until(&mut self, now_ms: i64) {
        for j in self.jobs.values_mut().filter(|j| j.state.holds_resources()) {
            j.attempt.accounted_ms = now_ms;
        }
    }
}
