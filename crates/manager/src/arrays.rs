//! Job arrays (`--array`, docs/slurm.md): the array is one PENDING job, held out of the
//! scheduler (`holds.rs`), standing for its tasks. Once its begin time and dependency allow,
//! each pass makes the tasks whose turn has come as jobs of their own (`spec.array_task`, the
//! store's `array_id`/`array_index`), which the scheduler then places like any job. At most
//! the throttle (`%N`), and never more than [`MAX_AHEAD`], are made and unfinished at once, so
//! the part still to come stays one row however large the array. When every task was made and
//! has ended, the array ends with their outcome (`ArrayProgress::outcome`).
//!
//! A task made twice (the store's unique index) is taken as made: a retry never duplicates one.

use std::collections::HashMap;

use berth_model::api::TaskCancelled;
use berth_model::{ArraySpec, ArrayTask, EndCause, JobId, JobSpec, JobState, PendingKind, PendingReason};
use berth_store::{JobFilter, Store, StoreError};

use crate::array_progress::ArrayProgress;
use crate::jobs::Jobs;
use crate::lifecycle::Move;
use crate::manager::Manager;
use crate::state::State;

/// The most tasks of one array made and unfinished at once: enough to fill a large cluster,
/// few enough that a 100,000-task array stays compact until its tasks start.
pub const MAX_AHEAD: u64 = 1024;

/// The most tasks one pass makes, over all arrays (one store write each).
const MAX_PER_PASS: usize = 2000;

/// Makes the next tasks of each array in `ready` (held arrays whose conditions are met), sets
/// their reasons, and ends the arrays whose tasks have all ended.
pub async fn advance(m: &Manager, st: &mut State, ready: Vec<JobId>) {
    if ready.is_empty() {
        return;
    }
    let mut unfinished: HashMap<JobId, u64> = HashMap::new();
    for j in st.live_jobs() {
        if let Some(t) = j.spec.array_task {
            *unfinished.entry(t.array_id).or_default() += 1;
        }
    }
    let mut budget = MAX_PER_PASS;
    let mut reasons = Vec::new();
    for id in ready {
        let Some(job) = st.job(id) else { continue };
        let Some(array) = job.spec.array.clone() else { continue };
        if let Err(e) = load_progress(&*m.store, st, id, &array).await {
            tracing::warn!(job = id, "cannot read the tasks of array: {e}");
            continue;
        }
        let open = unfinished.get(&id).copied().unwrap_or(0);
        let limit = array.throttle.map_or(MAX_AHEAD, u64::from).min(MAX_AHEAD);
        let room = (limit.saturating_sub(open) as usize).min(budget);
        let progress = st.array_mut(id).expect("inserted above");
        let indices = progress.take(&array, room);
        budget -= indices.len();
        let made = make_tasks(m, st, id, &array, indices).await;
        let open = open + made;
        let progress = st.array(id).expect("inserted above");
        let total = array.count();
        if progress.all_made(&array) && open == 0 {
            let (state, why) = progress.outcome(total);
            let end = if state == JobState::Cancelled { EndCause::Cancelled } else { EndCause::Exited };
            st.forget_array(id);
            if let Err(e) = m.jobs.transition(st, id, Move::end(state, end, why), vec![]).await {
                tracing::warn!(job = id, "cannot end array: {e}");
            }
            continue;
        }
        let made_all = progress.made.len() as u64;
        let why = if progress.all_made(&array) {
            format!("array: all {total} tasks made, {open} unfinished")
        } else if array.throttle.is_some_and(|t| open >= u64::from(t)) {
            format!("array: {open} tasks unfinished, its throttle (%{})", array.throttle.unwrap_or_default())
        } else {
            format!("array: {made_all} of {total} tasks made, {open} unfinished")
        };
        reasons.push((id, PendingReason::new(PendingKind::ArrayTasks, why)));
    }
    m.jobs.set_reasons(st, reasons).await;
}

/// Reads array `id`'s progress from its tasks' rows unless it is in memory already.
pub(crate) async fn load_progress(
    store: &dyn Store,
    st: &mut State,
    id: JobId,
    array: &ArraySpec,
) -> Result<(), StoreError> {
    if st.array(id).is_none() {
        let rows = store.jobs(&JobFilter { array_id: Some(id), ..Default::default() }).await?;
        let tasks = rows.iter().filter_map(|r| Some((r.spec.array_task?.index, r.state)));
        st.track_array(id, ArrayProgress::from_tasks(array, tasks));
    }
    Ok(())
}

/// Cancels tasks `indices` of array `id` (unfinished, in `st`) on behalf of `by`, as Slurm's
/// `scancel 12_7` does: a made task like any job; one not made yet gets its job now, ended
/// CANCELLED at once, so that it is never made to run and the accounting shows it as `12_7`.
/// Tasks that already ended are left as they are. Each task's job and state, in `indices`'
/// order.
pub async fn cancel_tasks(
    jobs: &Jobs,
    st: &mut State,
    id: JobId,
    indices: &[u32],
    by: &str,
) -> Result<Vec<TaskCancelled>, StoreError> {
    let Some(array) = st.job(id).and_then(|j| j.spec.array.clone()) else {
        return Err(StoreError::NotFound(format!("job array {id}")));
    };
    load_progress(&*jobs.store, st, id, &array).await?;
    let rows = jobs.store.jobs(&JobFilter { array_id: Some(id), ..Default::default() }).await?;
    let made: HashMap<u32, (JobId, JobState)> =
        rows.iter().filter_map(|r| Some((r.spec.array_task?.index, (r.id, r.state)))).collect();
    let mut out = Vec::with_capacity(indices.len());
    for &index in indices {
        let (task, state) = match made.get(&index) {
            Some(&(task, state)) if state.is_terminal() || !st.has_job(task) => (task, state),
            Some(&(task, _)) => (task, jobs.cancel(st, task, by).await?.state()),
            None => {
                if let Some(p) = st.array_mut(id) {
                    p.made.insert(index);
                }
                let Some(job) = st.job(id) else { break };
                let (owner, queue) = (job.owner.clone(), job.queue.clone());
                let mut spec = task_base(job.full_spec(), &array, id);
                if let Some(t) = spec.array_task.as_mut() {
                    t.index = index;
                }
                let view = jobs.submit(Some(st), owner, spec, queue, None, Vec::new()).await?;
                jobs.transition(st, view.id, Move::cancel_pending(by), vec![]).await?;
                (view.id, JobState::Cancelled)
            }
        };
        out.push(TaskCancelled { index, id: task, state });
    }
    jobs.wake();
    Ok(out)
}

/// Makes the jobs of tasks `indices` of array `id` (stored one by one, each in the scheduler's
/// set at once): how many were made. A failure other than "already made" puts the rest back.
async fn make_tasks(m: &Manager, st: &mut State, id: JobId, array: &ArraySpec, indices: Vec<u32>) -> u64 {
    let Some(job) = st.job(id) else { return 0 };
    let (owner, queue) = (job.owner.clone(), job.queue.clone());
    let base = task_base(job.full_spec(), array, id);
    let mut made = 0;
    for (k, index) in indices.iter().enumerate() {
        let mut spec = base.clone();
        if let Some(t) = spec.array_task.as_mut() {
            t.index = *index;
        }
        match m.jobs.submit(Some(st), owner.clone(), spec, queue.clone(), None, Vec::new()).await {
            Ok(_) => made += 1,
            Err(StoreError::Duplicate(_)) => {}
            Err(e) => {
                tracing::warn!(job = id, index, "cannot make array task: {e}");
                if let Some(p) = st.array_mut(id) {
                    for i in &indices[k..] {
                        p.made.remove(i);
                    }
                    p.next = 0;
                }
                break;
            }
        }
    }
    made
}

/// A task's spec: the array's, as one task (index set per task), without what the array
/// itself waited for.
fn task_base(mut spec: JobSpec, array: &ArraySpec, array_id: JobId) -> JobSpec {
    // An array submitted held is released before it makes tasks: they start free.
    spec.hold = false;
    spec.array_task = Some(ArrayTask {
        array_id,
        index: 0,
        min: array.min().unwrap_or(0),
        max: array.max().unwrap_or(0),
        count: array.count(),
    });
    spec.array = None;
    spec.dependency = None;
    spec.begin_at = None;
    spec
}
