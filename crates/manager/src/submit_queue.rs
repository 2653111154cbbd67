//! Group commit of submissions: the jobs that concurrent submits store go into one
//! transaction ([`Store::insert_jobs`]) instead of one each. On PostgreSQL every submit was a
//! transaction of its own with its own WAL flush, and submits were what limited starts per
//! second under load (issue 42, docs/perf.md).
//!
//! A submit queues its job and waits for its answer. When no write is in flight it starts one
//! (and a second, up to [`WRITERS`], once [`SECOND_WRITER_AT`] jobs wait), as a task of its
//! own, so that a caller that goes away never stops a write others wait on. A writer takes
//! every job queued so far ([`MAX_BATCH`] at most), inserts them, answers each, and goes on
//! while jobs are queued: submits that arrive while writes are in flight are written together
//! in the next one. Two writers, so that one batch
//! is written while the other waits for its commit's flush (PostgreSQL: two connections; on
//! SQLite's single writer connection the second waits its turn, batching as one would). A job
//! is answered only once its transaction has committed. When a batch fails (one job of it
//! cannot be stored, the store is fenced, ...) nothing of it was written, and its jobs are
//! inserted again one at a time so that each gets its own answer: a bad submit never fails
//! its neighbours. Within a batch the ids ascend in queue order; two batches in flight get
//! theirs in the order the store numbers them, as concurrent submits always did.

use std::sync::{Arc, Mutex};

use berth_model::{JobId, JobSpec, UnixId};
use berth_store::{NewJob, Store, StoreError};
use jiff::Timestamp;
use tokio::sync::{Notify, oneshot};

/// The most jobs one transaction inserts (the rest wait for the next).
const MAX_BATCH: usize = 256;
/// The most writes in flight at once.
const WRITERS: usize = 2;
/// How many jobs must be queued, with a write in flight, for another writer to start.
const SECOND_WRITER_AT: usize = 4;

/// What a queued submit gets back: its id and its spec, once committed.
type Answer = Result<(JobId, JobSpec), StoreError>;

pub(crate) struct SubmitQueue {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Jobs committed after their submit went away (its request dropped): nobody put them in
    /// memory, so [`SubmitQueue::take_orphans`] hands them to the next lock of the state.
    orphans: Mutex<Vec<JobId>>,
    /// Wakes the scheduling loop (which takes the state lock) when a job is orphaned.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Queued>,
    /// Writer tasks running: each takes what is queued before it ends.
    writers: usize,
}

struct Queued {
    user_id: i64,
    spec: JobSpec,
    submitter: Option<UnixId>,
    at: Timestamp,
    answer: oneshot::Sender<Answer>,
}

impl SubmitQueue {
    pub fn new(store: Arc<dyn Store>, wake: Arc<Notify>) -> SubmitQueue {
        let shared = Shared { queue: Mutex::default(), orphans: Mutex::default(), wake };
        SubmitQueue { store, shared: Arc::new(shared) }
    }

    /// Stores a PENDING job as [`Store::insert_job`] does, in the next group commit: its id,
    /// and its spec handed back.
    pub async fn insert(
        &self,
        user_id: i64,
        spec: JobSpec,
        submitter: Option<UnixId>,
        at: Timestamp,
    ) -> Result<(JobId, JobSpec), StoreError> {
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut q = self.shared.queue.lock().expect("submit queue lock");
            q.jobs.push(Queued { user_id, spec, submitter, at, answer });
            // A second writer only for a queue worth a batch of its own: a lone submit waits
            // for the writer in flight, which takes it next, so small batches do not double
            // the transactions (a commit costs PostgreSQL far more than a row: docs/perf.md).
            let start = q.writers == 0 || (q.writers < WRITERS && q.jobs.len() >= SECOND_WRITER_AT);
            q.writers += usize::from(start);
            start
        };
        if start {
            tokio::spawn(write(self.store.clone(), self.shared.clone()));
        }
        // The writer answers every job it takes; only a writer that panicked drops one.
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Connect(
                "the job was not stored: the manager's writer of submits stopped (see its log)".into(),
            ))
        })
    }

    /// The jobs committed for submits that went away before their answer (see
    /// `Shared::orphans`); usually none.
    pub fn take_orphans(&self) -> Vec<JobId> {
        std::mem::take(&mut *self.shared.orphans.lock().expect("orphans lock"))
    }

    /// Hands `id` to the next [`SubmitQueue::take_orphans`] again (it could not be read now).
    pub fn orphaned(&self, id: JobId) {
        self.shared.orphans.lock().expect("orphans lock").push(id);
    }
}

/// The writer: commits what is queued, batch after batch, until the queue is empty.
async fn write(store: Arc<dyn Store>, shared: Arc<Shared>) {
    let mut running = Running { shared: &shared, done: false };
    loop {
        let batch: Vec<Queued> = {
            let mut q = shared.queue.lock().expect("submit queue lock");
            if q.jobs.is_empty() {
                // Under the lock a submit takes to queue: it sees either this writer still
                // running (and is taken above) or one fewer (and starts one).
                q.writers -= 1;
                running.done = true;
                return;
            }
            let n = q.jobs.len().min(MAX_BATCH);
            q.jobs.drain(..n).collect()
        };
        let orphans = commit(&*store, batch).await;
        if !orphans.is_empty() {
            shared.orphans.lock().expect("orphans lock").extend(orphans);
            shared.wake.notify_one();
        }
    }
}

/// Stores `batch` in one transaction, or, when that fails, one job at a time; answers each
/// job. The ids of the jobs stored whose submit went away before its answer.
async fn commit(store: &dyn Store, batch: Vec<Queued>) -> Vec<JobId> {
    let together = {
        let jobs: Vec<NewJob<'_>> = batch
            .iter()
            .map(|j| NewJob { user_id: j.user_id, spec: &j.spec, submitter: j.submitter, at: j.at })
            .collect();
        match store.insert_jobs(&jobs).await {
            Ok(ids) => Ok(ids),
            // A job alone gets its own error as it is.
            Err(e) if jobs.len() == 1 => Err(Some(e)),
            Err(e) => {
                tracing::debug!("a group commit of {} submits failed ({e}): storing them one at a time", jobs.len());
                Err(None)
            }
        }
    };
    let mut orphans = Vec::new();
    match together {
        Ok(ids) => {
            for (j, id) in batch.into_iter().zip(ids) {
                if j.answer.send(Ok((id, j.spec))).is_err() {
                    orphans.push(id);
                }
            }
        }
        Err(Some(e)) => {
            if let Some(j) = batch.into_iter().next() {
                let _ = j.answer.send(Err(e));
            }
        }
        Err(None) => {
            for j in batch {
                let r = store.insert_job(j.user_id, &j.spec, j.submitter, j.at).await;
                let stored = r.as_ref().ok().copied();
                if j.answer.send(r.map(|id| (id, j.spec))).is_err() {
                    orphans.extend(stored);
                }
            }
        }
    }
    orphans
}

/// Counts a writer out if it ends without saying so (a panic), and drops what is queued
/// (those submits get an error instead of perhaps waiting for ever).
struct Running<'a> {
    shared: &'a Shared,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.writers -= 1;
            q.jobs.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::Context;

    use berth_model::{ArrayTask, JobState};
    use berth_store::SqliteStore;
    use futures_util::future::join_all;

    use super::*;

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>, i64) {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
        let u = s.create_user("ann", "user", Timestamp::now()).await.unwrap();
        (dir, Arc::new(s), u.id)
    }

    /// Twenty submits at once (the test's runtime has one thread, so all are queued before
    /// the writer runs: one group commit), the eighth an array task that is already stored:
    /// it alone fails, the others are stored with ids in the order they were queued.
    #[tokio::test]
    async fn a_bad_submit_among_concurrent_ones_fails_alone() {
        let (_dir, store, user) = store().await;
        let q = SubmitQueue::new(store.clone(), Arc::new(Notify::new()));
        let mut task = JobSpec::command(["task"]);
        task.array_task = Some(ArrayTask { array_id: 1, index: 0, min: 0, max: 1, count: 2 });
        store.insert_job(user, &task, None, Timestamp::now()).await.unwrap();
        let specs: Vec<JobSpec> =
            (0..20).map(|i| if i == 7 { task.clone() } else { JobSpec::command([format!("job-{i}")]) }).collect();
        let answers = join_all(specs.iter().map(|s| q.insert(user, s.clone(), None, Timestamp::now()))).await;
        let mut last = 0;
        for (i, a) in answers.into_iter().enumerate() {
            if i == 7 {
                assert!(matches!(a, Err(StoreError::Duplicate(_))), "{a:?}");
                continue;
            }
            let (id, spec) = a.unwrap();
            assert!(id > last, "ids in queue order");
            last = id;
            assert_eq!(spec, specs[i], "its own spec handed back");
            let row = store.job(id).await.unwrap().unwrap();
            assert_eq!((row.spec, row.state), (specs[i].clone(), JobState::Pending));
        }
        assert_eq!(store.job_count().await.unwrap(), 20, "the stored task and 19 new jobs");
    }

    /// A lone submit behind a write in flight waits for that writer instead of starting a
    /// second transaction of its own; a second writer starts once a batch's worth waits.
    #[tokio::test]
    async fn a_second_writer_starts_only_for_a_queue_worth_a_batch() {
        let (_dir, store, user) = store().await;
        let q = SubmitQueue::new(store.clone(), Arc::new(Notify::new()));
        let waker = futures_util::task::noop_waker();
        let writers = || q.shared.queue.lock().unwrap().writers;
        let mut submits: Vec<_> = (0..SECOND_WRITER_AT)
            .map(|i| Box::pin(q.insert(user, JobSpec::command([format!("job-{i}")]), None, Timestamp::now())))
            .collect();
        // The test's runtime has one thread: the writers spawned here run only once it awaits.
        for (i, s) in submits.iter_mut().enumerate() {
            assert!(s.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            let expected = if i + 1 < SECOND_WRITER_AT { 1 } else { 2 };
            assert_eq!(writers(), expected, "writers after {} queued submits", i + 1);
        }
        for s in submits {
            s.await.unwrap();
        }
        assert_eq!(writers(), 0, "both writers ended with the queue empty");
        assert_eq!(store.job_count().await.unwrap(), SECOND_WRITER_AT as u64);
    }

    /// A submit whose request went away while its job was being written (hyper drops the
    /// handler of a closed connection): the job is stored all the same (the transaction is
    /// the writer's, shared with other submits), so the next lock of the state takes it in
    /// as a pending job, and the scheduler is woken for it.
    #[tokio::test]
    async fn a_job_stored_after_its_submit_went_away_is_still_scheduled() {
        let (_dir, store, user) = store().await;
        let wake = Arc::new(Notify::new());
        let jobs = crate::jobs::Jobs::new(
            store.clone(),
            crate::clock::Clock::system(),
            wake.clone(),
            1000,
            Arc::new(crate::metrics::Metrics::new()),
        );
        let owner = crate::state::Owner { user_id: user, name: "ann".into(), submitter: None };
        {
            let spec = JobSpec::command(["gone"]);
            let mut gone = pin!(jobs.submit(None, owner, spec, "default".into(), None, Vec::new()));
            let waker = futures_util::task::noop_waker();
            // Queued, and the writer started; then the request is dropped.
            assert!(gone.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        }
        wake.notified().await;
        let st = jobs.lock().await;
        let stored = store.jobs(&berth_store::JobFilter::default()).await.unwrap();
        assert_eq!(stored.len(), 1);
        let job = st.job(stored[0].id).expect("the stored job is in memory");
        assert_eq!((job.state, &job.spec.command), (JobState::Pending, &stored[0].spec.command));
        assert!(st.pending().get(stored[0].id).is_some(), "and waits to be scheduled");
    }
}
