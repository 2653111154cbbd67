//! The jobs service: the job table and everything that changes it.
//!
//! It owns the manager's in-memory state ([`State`]: unfinished jobs, and the node ledgers a
//! scheduling pass places them on, under one lock because a pass needs both at once), the
//! inbox of freshly submitted jobs, the exported environments they share, and the wake-up of
//! the scheduling loop. Every state change of a job goes through it: submit here, the moves of
//! `lifecycle.rs` (cancel, end, preempt, requeue, node loss), and a pass's batch of starts
//! (`scheduler.rs` stores it with `Move`'s changes and applies it with
//! `berth_sched::apply`). Each writes the store before memory changes or an agent is told.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use berth_model::JobSpec;
use berth_model::api::JobView;
use berth_sched::Millis;
use berth_store::{Store, StoreError};
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, MutexGuard, Notify, broadcast};

use crate::clock::Clock;
use crate::env_intern::EnvInterner;
use crate::metrics::Metrics;
use crate::state::{Job, JobEvent, Owner, State};
use crate::submit_queue::SubmitQueue;

/// Job changes a slow listener may fall behind by before it is told to reload.
const EVENT_BACKLOG: usize = 4096;

pub struct Jobs {
    pub(crate) store: Arc<dyn Store>,
    /// The manager's clock (`Manager::clock`).
    pub(crate) clock: Clock,
    /// Only through [`Jobs::lock`], which first takes in the inbox.
    state: Mutex<State>,
    /// Jobs submitted since the last [`Jobs::lock`]: submit appends here instead of waiting
    /// for the state lock a scheduling pass may hold.
    inbox: StdMutex<Vec<Job>>,
    /// Stores submits (those without an idempotency key) by group commit.
    submits: SubmitQueue,
    /// One copy of each exported environment of the jobs in memory.
    envs: EnvInterner,
    /// Wakes the scheduling loop (submit, cancel, kernel end, node register); shared with
    /// the nodes service, whose changes also call for a pass.
    wake: Arc<Notify>,
    /// Ids of the commands sent to agents.
    next_cmd: AtomicU64,
    /// Job changes for live views (`GET /v1/events`); sent only while someone listens.
    events: broadcast::Sender<Arc<JobEvent>>,
    /// Fair-share usage decays with this half-life (charged when a job gives back resources).
    pub(crate) half_life_ms: Millis,
    /// Where submits, moves and commits are counted (shared with `Manager::metrics`).
    pub(crate) metrics: Arc<Metrics>,
}

/// Where a new job would best go (neither is a requirement).
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Bytes of its datasets each node's cache holds.
    pub data_on: Vec<(String, u64)>,
    /// Nodes to take only when no other can.
    pub avoid: Vec<String>,
}

impl Jobs {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Clock,
        wake: Arc<Notify>,
        half_life_ms: Millis,
        metrics: Arc<Metrics>,
    ) -> Jobs {
        Jobs {
            submits: SubmitQueue::new(store.clone(), wake.clone()),
            store,
            state: Mutex::new(State::new(clock.clone())),
            clock,
            inbox: StdMutex::new(Vec::new()),
            envs: EnvInterner::default(),
            wake,
            next_cmd: AtomicU64::new(1),
            events: broadcast::channel(EVENT_BACKLOG).0,
            half_life_ms,
            metrics,
        }
    }

    /// Puts into each of `rows` that holds resources what it used so far, measured live (a
    /// running job's row only has what its ended kernels used).
    pub async fn fill_live_usage(&self, rows: &mut [berth_store::JobRow]) {
        let st = self.lock().await;
        for r in rows.iter_mut().filter(|r| r.state.holds_resources()) {
            if let Some(live) = st.meters().job(r.id, r.attempt) {
                r.used = Some(live.total);
            }
        }
    }

    /// The gauges `/metrics` shows now: jobs by state and queue, nodes, ledgers.
    pub async fn metrics_snapshot(&self, queues: &[berth_sched::QueueConfig]) -> crate::metrics::Snapshot {
        let st = self.lock().await;
        crate::metrics::Snapshot::take(&st, queues.iter().map(|q| q.name.as_str()))
    }

    /// Locks the in-memory state, first moving freshly submitted jobs into it.
    pub async fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().await;
        let new = std::mem::take(&mut *self.inbox.lock().expect("inbox lock"));
        for j in new {
            st.insert_job(j);
        }
        for id in self.submits.take_orphans() {
            self.adopt(&mut st, id).await;
        }
        st
    }

    /// Puts a job that was stored for a submit that went away before its answer (its request
    /// dropped) into memory, as a restart would: stored is submitted.
    async fn adopt(&self, st: &mut State, id: berth_model::JobId) {
        if st.has_job(id) {
            return;
        }
        match self.store.job(id).await {
            Ok(Some(row)) => {
                let job = self.restore(row);
                self.metrics.submitted(&job.queue);
                st.insert_job(job);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("job {id} was stored for a submit that went away, but cannot be read back now: {e}");
                self.submits.orphaned(id);
            }
        }
    }

    /// Asks the scheduling loop for a pass.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves at the next [`Jobs::wake`] (or at once for one that came before).
    pub fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// A fresh id for a command to an agent.
    pub fn next_cmd_id(&self) -> u64 {
        self.next_cmd.fetch_add(1, Ordering::Relaxed)
    }

    /// Stores a new job and hands it to the scheduler. With `st` (the state already locked,
    /// e.g. to check a pending-jobs quota) it goes straight into the table, otherwise through
    /// the inbox, so a submit never waits for a pass.
    pub async fn submit(
        &self,
        st: Option<&mut State>,
        owner: Owner,
        spec: JobSpec,
        queue: String,
        key: Option<&str>,
        data_on: Vec<(String, u64)>,
    ) -> Result<JobView, StoreError> {
        self.submit_placed(st, owner, spec, queue, key, Placement { data_on, avoid: Vec::new() }).await
    }

    /// [`Jobs::submit`] with every placement hint (a serving endpoint's replicas avoid the
    /// nodes their siblings run on).
    pub async fn submit_placed(
        &self,
        st: Option<&mut State>,
        owner: Owner,
        spec: JobSpec,
        queue: String,
        key: Option<&str>,
        hints: Placement,
    ) -> Result<JobView, StoreError> {
        let now = self.clock.now();
        let (id, spec) = match key {
            // Concurrent submits share a transaction (`submit_queue.rs`).
            None => self.submits.insert(owner.user_id, spec, owner.submitter, now).await?,
            Some(key) => match self.store.insert_job_once(owner.user_id, &spec, owner.submitter, now, key).await? {
                (id, true) => (id, spec),
                // Sent again (the answer was lost): the job the first one made, as it is now.
                // It may have been archived since (`admin store purge`): the archive's row answers.
                (id, false) => {
                    let row = match self.store.job(id).await? {
                        Some(row) => row,
                        None => self
                            .store
                            .archived_job(id)
                            .await?
                            .ok_or_else(|| StoreError::NotFound(format!("job {id}")))?,
                    };
                    return Ok(self.restore(row).view());
                }
            },
        };
        let mut job = Job::submitted(id, owner, spec, queue, now, &self.envs);
        job.waiting.data_on = hints.data_on;
        job.waiting.avoid = hints.avoid;
        let view = job.view();
        let event = self.watched().then(|| Arc::new(job.event()));
        self.metrics.submitted(&job.queue);
        match st {
            Some(st) => st.insert_job(job),
            None => self.inbox.lock().expect("inbox lock").push(job),
        }
        self.wake();
        if let Some(e) = event {
            self.announce(e);
        }
        Ok(view)
    }

    /// Stores the pending reasons of jobs the scheduler does not see (held jobs, arrays) that
    /// changed, then sets them in memory; such a job has no place in a queue.
    pub async fn set_reasons(&self, st: &mut State, reasons: Vec<(berth_model::JobId, berth_model::PendingReason)>) {
        let changed: Vec<(berth_model::JobId, berth_model::PendingReason)> = reasons
            .into_iter()
            .filter(|(id, r)| st.job(*id).is_some_and(|j| j.waiting.reason.as_ref() != Some(r)))
            .collect();
        if changed.is_empty() {
            return;
        }
        let changes: Vec<berth_store::Change> = changed
            .iter()
            .map(|(id, r)| berth_store::Change::PendingReason { job_id: *id, reason: Some(r.clone()) })
            .collect();
        if let Err(e) = self.write(st, changes).await {
            tracing::warn!("pending reasons not stored: {e}");
            return;
        }
        for (id, r) in changed {
            if let Some(j) = st.job_mut(id) {
                j.waiting.reason = Some(r);
                j.waiting.position = None;
            }
        }
    }

    /// A job read back from the store after a restart, sharing its environment with the rest.
    pub fn restore(&self, row: berth_store::JobRow) -> Job {
        Job::from_row(row, &self.envs)
    }

    /// Listens to job changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<JobEvent>> {
        self.events.subscribe()
    }

    /// Whether anyone listens (events are only made then).
    pub fn watched(&self) -> bool {
        self.events.receiver_count() > 0
    }

    /// Sends a stored change to the listeners.
    pub fn announce(&self, event: Arc<JobEvent>) {
        let _ = self.events.send(event);
    }

    /// Sends a change once it is stored: now, or with the open batch.
    pub fn publish(&self, st: &mut State, event: Arc<JobEvent>) {
        match st.batch_mut() {
            Some(b) => b.hold_event(event),
            None => self.announce(event),
        }
    }
}
