//! Group commit of agent reports: the state changes of many agents' kernel events go to the
//! store in ONE transaction, and the commands they call for go out only once it committed.
//!
//! While a [`Batch`] is open on the state, `Jobs::transition` stages its changes here
//! instead of writing them, changes memory at once (so later reports of the same batch see
//! it), and `State::send` holds commands back. Each touched job, usage figure and released
//! device is recorded first, so that a batch the store refuses is undone exactly; its
//! reports are then applied again one by one, each in its own transaction, which is what
//! happened before batching (a stale report is dropped, one the store refused for a passing
//! reason is deferred).
//!
//! Why: each report was its own transaction (BEGIN, statements, COMMIT: three round trips to
//! SQLite's worker thread) under the state lock, so after a pass that started 10,000 jobs the
//! next pass waited behind 10,000 small transactions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_model::protocol::ManagerMessage;
use berth_model::{Binding, JobId};
use berth_sched::Millis;
use berth_store::{Change, UsageRow};

use super::{Job, JobEvent, State};

/// A usage figure (kind, name) as it was before the batch: value and time, if any.
type UsageBefore = (String, String, Option<(f64, Millis)>);

/// Changes staged, commands held and what undoes them.
#[derive(Default)]
pub struct Batch {
    changes: Vec<Change>,
    /// Commands to send once the batch is stored (a `Mutex` because `State::send` takes
    /// `&State`; never contended: the state lock is held).
    outbox: Mutex<Vec<(String, ManagerMessage)>>,
    /// Each job as it was before the batch first touched it (`None`: not in memory).
    jobs: HashMap<JobId, Option<Job>>,
    /// Usage figures as they were.
    usage: Vec<UsageBefore>,
    /// Job changes for live views, announced once the batch is stored.
    events: Vec<Arc<JobEvent>>,
    /// Devices released by the batch's ends and requeues, per job.
    released: Vec<(JobId, Vec<Binding>)>,
    /// How many deferred reports there were.
    deferred: usize,
    /// Metric events of the batch's moves, recorded once it is stored (dropped with an
    /// undone batch, whose reports are applied and counted again one by one).
    metric_events: Vec<crate::metrics::JobEvent>,
}

impl Batch {
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    pub fn stage(&mut self, changes: Vec<Change>) {
        self.changes.extend(changes);
    }

    /// Holds a command until the batch is stored.
    pub fn hold(&self, node: &str, msg: ManagerMessage) {
        self.outbox.lock().expect("outbox lock").push((node.to_string(), msg));
    }

    /// Takes the held commands (to send once stored).
    pub fn take_outbox(&mut self) -> Vec<(String, ManagerMessage)> {
        std::mem::take(&mut *self.outbox.lock().expect("outbox lock"))
    }

    /// Holds a job change for live views until the batch is stored.
    pub fn hold_event(&mut self, event: Arc<JobEvent>) {
        self.events.push(event);
    }

    /// Takes the held job changes (to announce once stored).
    pub fn take_events(&mut self) -> Vec<Arc<JobEvent>> {
        std::mem::take(&mut self.events)
    }

    pub fn note(&mut self, ev: crate::metrics::JobEvent) {
        self.metric_events.push(ev);
    }

    /// Takes the metric events (to record once stored).
    pub fn take_metric_events(&mut self) -> Vec<crate::metrics::JobEvent> {
        std::mem::take(&mut self.metric_events)
    }

    pub fn released(&mut self, job: JobId, bindings: &[Binding]) {
        self.released.push((job, bindings.to_vec()));
    }
}

impl State {
    /// Opens a batch: from now on state changes are staged (see the module doc).
    pub fn begin_batch(&mut self) {
        debug_assert!(self.batch.is_none(), "batches do not nest");
        self.batch = Some(Batch { deferred: self.deferred.len(), ..Batch::default() });
    }

    /// Records `job` as it is now, the first time the open batch touches it.
    pub fn touch(&mut self, job: JobId) {
        let Some(b) = self.batch.as_mut() else { return };
        b.jobs.entry(job).or_insert_with(|| self.jobs.get(&job).cloned());
    }

    /// Records the usage figures `rows` are about to replace, the first time the open batch
    /// changes them.
    pub fn touch_usage(&mut self, rows: &[UsageRow]) {
        let Some(b) = self.batch.as_mut() else { return };
        for r in rows {
            if b.usage.iter().any(|(k, n, _)| *k == r.kind && *n == r.name) {
                continue;
            }
            let before = match r.kind.as_str() {
                "user" => self.usage.users.get(&r.name).copied(),
                "project" => self.usage.projects.get(&r.name).copied(),
                _ => None,
            };
            b.usage.push((r.kind.clone(), r.name.clone(), before));
        }
    }

    /// Closes the batch, undoing every change it made to memory; its held commands are
    /// dropped. The store was not changed (its transaction rolled back).
    pub fn undo_batch(&mut self) {
        let Some(b) = self.batch.take() else { return };
        for (id, job) in b.jobs {
            match job {
                Some(j) => self.jobs.insert(id, j),
                None => self.jobs.remove(&id),
            };
            self.sync_sets(id);
        }
        for (kind, name, before) in b.usage {
            let map = if kind == "user" { &mut self.usage.users } else { &mut self.usage.projects };
            match before {
                Some(v) => map.insert(name, v),
                None => map.remove(&name),
            };
        }
        // The released devices belong to the restored jobs again.
        for (job, bindings) in &b.released {
            for c in berth_sched::apply::allocate(self, *job, bindings) {
                tracing::error!(job, node = %c.node, "cannot undo a release: {}", c.error);
            }
        }
        self.deferred.truncate(b.deferred);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::JobState;

    /// State with node n1 (4 CPUs) and job 1 of alice running on 2 of them.
    fn state() -> (State, Binding) {
        let (mut st, b) = crate::state::fixture::one_running_job();
        st.usage.users.insert("alice".into(), (5.0, 10));
        (st, b)
    }

    #[test]
    fn an_undone_batch_leaves_memory_as_it_was() {
        let (mut st, b) = state();
        assert_eq!(st.ledgers[0].cpus_used(), 2);

        st.begin_batch();
        st.touch(1);
        st.jobs.get_mut(&1).unwrap().state = JobState::Succeeded;
        st.touch(1);
        let at = jiff::Timestamp::now();
        let rows = vec![
            UsageRow { kind: "user".into(), name: "alice".into(), value: 9.0, at },
            UsageRow { kind: "user".into(), name: "bob".into(), value: 1.0, at },
        ];
        st.touch_usage(&rows);
        st.usage.set(&rows);
        let bindings = std::mem::take(&mut st.jobs.get_mut(&1).unwrap().attempt.bindings);
        st.release(&bindings);
        st.batch.as_mut().unwrap().released(1, &bindings);
        st.jobs.remove(&1);
        let key = berth_model::protocol::KernelKey { job_id: 1, attempt: 0, index: 0 };
        assert!(st.send("n1", ManagerMessage::Forget { key }), "held, so as good as sent");
        assert_eq!(st.batch.as_ref().unwrap().outbox.lock().unwrap().len(), 1);
        assert_eq!(st.ledgers[0].cpus_used(), 0);

        st.undo_batch();
        assert!(st.batch.is_none());
        assert_eq!(st.jobs[&1].state, JobState::Running, "the first touch is what comes back");
        assert_eq!(st.jobs[&1].attempt.bindings, vec![b]);
        assert_eq!(st.usage.users.get("alice"), Some(&(5.0, 10)));
        assert_eq!(st.usage.users.get("bob"), None);
        assert_eq!(st.ledgers[0].cpus_used(), 2);
    }

    #[test]
    fn outside_a_batch_nothing_is_recorded() {
        let (mut st, _) = state();
        st.touch(1);
        st.undo_batch();
        assert_eq!(st.jobs[&1].state, JobState::Running);
    }
}
