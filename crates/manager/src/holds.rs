//! Jobs held out of the scheduler until they may be scheduled: their begin time (`--begin`)
//! and their dependency (`--dependency`, judged by `berth_sched::depend`), as Slurm holds them.
//!
//! A held job is PENDING but not in the scheduler's pending set (`State::held`), so it takes
//! no place in its queue and holds no one back. Each pass first judges the held jobs
//! ([`release`]): those now free join the set and are scheduled in the same pass; the others
//! keep a reason (`dependency: waits for 12 (RUNNING)`). One whose dependency can never be met
//! is cancelled (`EndCause::Dependency`), or kept with that reason when the config file says
//! `kill_invalid_depend = false`.
//!
//! A job array is held for good: once free, it makes its tasks (`arrays.rs`) rather than
//! joining a queue itself.
//!
//! A job its owner or an admin held (Slurm's user and admin holds, `Waiting::hold`,
//! `job_requests.rs`) is among them too: it waits with reason `JobHeldUser`/`JobHeldAdmin`
//! whatever else it waits for, until released; a held array makes no tasks.
//!
//! The jobs named live in memory while unfinished; an ended one is read from the store once
//! and remembered (`State::ended_targets`), since an ended job no longer changes.
//!
//! One task of a job array (`afterok:12_7`) is its own job once the array has made it, found
//! by its `array_task`; until then it is PENDING (the array's progress, `State::arrays`, says
//! whether it was made), and once ended it is read from the store by the task's
//! `array_id`/`array_index`. A task its array will never make (the array ended first, e.g.
//! cancelled) ended CANCELLED, as a task cancelled before it was made did.

use std::collections::{HashMap, HashSet};

use berth_model::{ArraySpec, EndCause, JobId, JobRef, JobSpec, JobState, PendingKind, PendingReason};
use berth_sched::depend::{self, Judgement, Target};
use berth_store::JobFilter;
use jiff::Timestamp;

use crate::error::ApiError;
use crate::identity::User;
use crate::lifecycle::Move;
use crate::manager::Manager;
use crate::state::State;

/// The (owner, name) a `singleton` job shares with the jobs it waits for.
type Name = (i64, String);

fn singleton_name(st: &State, id: JobId) -> Option<Name> {
    let j = st.job(id)?;
    j.spec.dependency.as_ref().filter(|d| d.has_singleton())?;
    Some((j.owner.user_id, j.spec.name.clone().unwrap_or_default()))
}

/// Judges every held job at `now`: frees those that may now be scheduled, records the
/// others' reasons (one store batch), and cancels those whose dependency can never be met.
pub async fn release(m: &Manager, st: &mut State, now: Timestamp) {
    let ids = st.held();
    if ids.is_empty() {
        st.forget_ended_targets();
        return;
    }
    let now_ms = now.as_millisecond();
    let tasks = live_tasks(st, &ids);
    learn_ended(m, st, &ids, &tasks).await;
    let mut busy = running_names(st, &ids);
    let mut reasons = Vec::new();
    let mut never = Vec::new();
    let mut arrays = Vec::new();
    for id in ids {
        let Some(job) = st.job(id) else { continue };
        // Held (`berth hold`, `scontrol hold`): nothing else counts until it is released.
        if let Some(hold) = job.waiting.hold {
            reasons.push((id, hold.reason()));
            continue;
        }
        let verdict = match (job.spec.begin_at, &job.spec.dependency) {
            (Some(at), _) if at > now => Judgement::Waits(PendingReason::new(
                PendingKind::BeginTime,
                format!("begins at {}", at.strftime("%Y-%m-%d %H:%M:%S UTC")),
            )),
            (_, Some(dep)) => {
                let name = singleton_name(st, id);
                let other = name.as_ref().and_then(|n| busy.get(n)).copied();
                depend::judge(dep, |t| target(st, &tasks, t), other, now_ms)
            }
            (_, None) => Judgement::Met,
        };
        match verdict {
            // An array stays held: it makes its tasks instead (`arrays.rs`).
            Judgement::Met if job.spec.array.is_some() => arrays.push(id),
            Judgement::Met => {
                if let Some(n) = singleton_name(st, id) {
                    busy.insert(n, (id, JobState::Pending));
                }
                st.lift_hold(id);
            }
            Judgement::Waits(reason) => reasons.push((id, reason)),
            Judgement::Never(why) if m.kill_invalid_depend => never.push((id, why)),
            Judgement::Never(why) => reasons.push((
                id,
                PendingReason::new(PendingKind::DependencyNeverSatisfied, format!("dependency never satisfied: {why}")),
            )),
        }
    }
    m.jobs.set_reasons(st, reasons).await;
    crate::arrays::advance(m, st, arrays).await;
    for (id, why) in never {
        let mv = Move::end(JobState::Cancelled, EndCause::Dependency, format!("dependency never satisfied: {why}"));
        if let Err(e) = m.jobs.transition(st, id, mv, vec![]).await {
            tracing::warn!(job = id, "cannot cancel a job whose dependency can never be met: {e}");
        }
    }
}

/// The targets the dependencies of jobs `ids` name, each once.
fn targets_of(st: &State, ids: &[JobId]) -> Vec<JobRef> {
    let mut refs: Vec<JobRef> =
        ids.iter().filter_map(|id| st.job(*id)?.spec.dependency.as_ref()).flat_map(|d| d.targets()).collect();
    refs.sort_unstable();
    refs.dedup();
    refs
}

/// The jobs of the array tasks that the dependencies of `ids` name, for those made and
/// unfinished (in memory).
fn live_tasks(st: &State, ids: &[JobId]) -> HashMap<JobRef, JobId> {
    let wanted: HashSet<JobRef> = targets_of(st, ids).into_iter().filter(|r| r.task.is_some()).collect();
    if wanted.is_empty() {
        return HashMap::new();
    }
    st.live_jobs()
        .filter_map(|j| {
            let t = j.spec.array_task?;
            let r = JobRef::task(t.array_id, t.index);
            wanted.contains(&r).then_some((r, j.id))
        })
        .collect()
}

/// Reads from the store the jobs and tasks that `ids` depend on which have left memory
/// (ended) and are not known yet (`live`: the tasks' jobs in memory).
async fn learn_ended(m: &Manager, st: &mut State, ids: &[JobId], live: &HashMap<JobRef, JobId>) {
    for r in targets_of(st, ids) {
        if st.ended_target(&r).is_some() || live.contains_key(&r) {
            continue;
        }
        let Some(index) = r.task else {
            if st.has_job(r.job) {
                continue;
            }
            match m.store.job(r.job).await {
                Ok(Some(row)) if row.state.is_terminal() => {
                    let started_at = row.started_at.map(|s| s.as_millisecond());
                    st.learn_ended(r, Some(Target { state: row.state, started_at }));
                }
                // Not ended per the store either: it is being moved (judged again next pass).
                Ok(Some(_)) => {}
                // Gone from the records (retention): remembered as such.
                Ok(None) => {
                    st.learn_ended(r, None);
                }
                Err(e) => tracing::warn!(job = r.job, "cannot read a job others depend on: {e}"),
            }
            continue;
        };
        // The array is unfinished: a task it has not made yet is PENDING (no read needed).
        if let Some(array) = st.job(r.job).and_then(|j| j.spec.array.clone()) {
            if let Err(e) = crate::arrays::load_progress(&*m.store, st, r.job, &array).await {
                tracing::warn!(job = r.job, "cannot read the tasks of an array others depend on: {e}");
                continue;
            }
            if !st.array(r.job).is_some_and(|p| p.made.contains(&index)) {
                continue;
            }
        }
        match ended_task(m, r.job, index).await {
            Ok(Some(t)) => {
                st.learn_ended(r, t);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(job = r.job, index, "cannot read an array task others depend on: {e}"),
        }
    }
}

/// How task `index` of array `array` (not in memory) ended, from the store: `Some(None)` when
/// it never can (no such array on record, or not an array), `None` while it is not known to
/// have ended (being moved, or made in a moment).
async fn ended_task(m: &Manager, array: JobId, index: u32) -> Result<Option<Option<Target>>, berth_store::StoreError> {
    let filter = JobFilter { array_id: Some(array), array_index: Some(index), ..Default::default() };
    if let Some(row) = m.store.jobs(&filter).await?.into_iter().next() {
        let started_at = row.started_at.map(|s| s.as_millisecond());
        return Ok(row.state.is_terminal().then_some(Some(Target { state: row.state, started_at })));
    }
    Ok(match m.store.job(array).await? {
        Some(a) if a.spec.array.is_none() => Some(None),
        // The array ended without making it (cancelled): the task never ran, like a task
        // cancelled before it was made.
        Some(a) if a.state.is_terminal() => Some(Some(Target { state: JobState::Cancelled, started_at: None })),
        Some(_) => None,
        None => Some(None),
    })
}

/// What is known of `r`: live in memory (a task by its job, `tasks`), or ended; a task not
/// made yet (or for a moment not known) is PENDING, as Slurm shows it.
fn target(st: &State, tasks: &HashMap<JobRef, JobId>, r: JobRef) -> Option<Target> {
    let live = match r.task {
        None => st.job(r.job),
        Some(_) => tasks.get(&r).and_then(|id| st.job(*id)),
    };
    if let Some(j) = live {
        let started_at = j.attempt.started_at.map(|s| s.as_millisecond());
        return Some(Target { state: j.state, started_at });
    }
    match st.ended_target(&r) {
        Some(t) => t,
        None => r.task.map(|_| Target { state: JobState::Pending, started_at: None }),
    }
}

/// For the held `singleton` jobs: the job of each (owner, name) that has started and not
/// ended, or that an earlier pass freed and still waits in its queue.
fn running_names(st: &State, held: &[JobId]) -> HashMap<Name, (JobId, JobState)> {
    let mut wanted: HashMap<Name, (JobId, JobState)> = HashMap::new();
    let names: Vec<Name> = held.iter().filter_map(|id| singleton_name(st, *id)).collect();
    if names.is_empty() {
        return wanted;
    }
    for j in st.live_jobs() {
        let free_singleton = j.state == JobState::Pending && !st.is_held(j.id) && singleton_name(st, j.id).is_some();
        if j.state != JobState::Pending || free_singleton {
            let n = (j.owner.user_id, j.spec.name.clone().unwrap_or_default());
            if names.contains(&n) {
                wanted.entry(n).or_insert((j.id, j.state));
            }
        }
    }
    wanted
}

/// Checks a new job's dependency at submit: every job it names exists and is visible to
/// `user` (a job they may not see answers like one that does not exist), a task it names is
/// one of its array's, and it is not already impossible (an `afterok` on a failed job), as
/// Slurm refuses such a submit.
pub async fn check_at_submit(m: &Manager, user: &User, spec: &JobSpec) -> Result<(), ApiError> {
    let Some(dep) = &spec.dependency else { return Ok(()) };
    let mut known: HashMap<JobRef, Target> = HashMap::new();
    for r in dep.targets() {
        let t = r.job;
        let live = {
            let st = m.jobs.lock().await;
            st.job(t).map(|j| (j.owner.user_id, j.spec.clone(), target(&st, &HashMap::new(), JobRef::job(t))))
        };
        let (owner, tspec, tgt) = match live {
            Some((o, s, Some(tgt))) => (o, s, tgt),
            _ => match m.store.job(t).await.map_err(ApiError::from)? {
                Some(row) => {
                    let tgt = Target { state: row.state, started_at: row.started_at.map(|s| s.as_millisecond()) };
                    (row.user_id, std::sync::Arc::new(row.spec), tgt)
                }
                None => return Err(no_such(dep, t)),
            },
        };
        if !user.can_see(owner, &tspec) {
            return Err(no_such(dep, t));
        }
        let tgt = match r.task {
            None => tgt,
            Some(index) => task_at_submit(m, dep, r, tspec.array.as_ref(), index, tgt.state).await?,
        };
        known.insert(r, tgt);
    }
    let now = m.clock.now_ms();
    if let Judgement::Never(why) = depend::judge(dep, |t| known.get(&t).copied(), None, now) {
        return Err(ApiError::bad_request(format!(
            "dependency `{dep}` can never be satisfied: {why}; submit without it, or depend on another job"
        )));
    }
    Ok(())
}

/// What is known at submit of task `index` of array `r.job` (in state `array_state`), whose
/// spec has `array`: refused when it is no array or the index is not one of its tasks.
async fn task_at_submit(
    m: &Manager,
    dep: &berth_model::Dependency,
    r: JobRef,
    array: Option<&ArraySpec>,
    index: u32,
    array_state: JobState,
) -> Result<Target, ApiError> {
    let job = r.job;
    let Some(array) = array else {
        return Err(ApiError::bad_request(format!(
            "dependency `{dep}`: job {job} is not a job array, so it has no task {r}: depend on job {job} itself"
        )));
    };
    if !array.contains(index) {
        let indices = ArraySpec { throttle: None, ..array.clone() };
        return Err(ApiError::bad_request(format!(
            "dependency `{dep}`: task {r} is not in job array {job} ({indices}): name one of its tasks"
        )));
    }
    {
        let st = m.jobs.lock().await;
        let live = st.tasks_of(job).find(|j| j.spec.array_task.is_some_and(|t| t.index == index));
        if let Some(j) = live {
            return Ok(Target { state: j.state, started_at: j.attempt.started_at.map(|s| s.as_millisecond()) });
        }
    }
    let filter = JobFilter { array_id: Some(job), array_index: Some(index), ..Default::default() };
    Ok(match m.store.jobs(&filter).await.map_err(ApiError::from)?.into_iter().next() {
        Some(row) => Target { state: row.state, started_at: row.started_at.map(|s| s.as_millisecond()) },
        // Never made, and the array ended: it never will be.
        None if array_state.is_terminal() => Target { state: JobState::Cancelled, started_at: None },
        None => Target { state: JobState::Pending, started_at: None },
    })
}

fn no_such(dep: &berth_model::Dependency, t: JobId) -> ApiError {
    ApiError::bad_request(format!(
        "dependency `{dep}`: no job {t} (or it is not yours to see): check the id with `berth ps -a`"
    ))
}
