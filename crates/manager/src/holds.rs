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
//! The jobs named live in memory while unfinished; an ended one is read from the store once
//! and remembered (`State::ended_targets`), since an ended job no longer changes.

use std::collections::HashMap;

use berth_model::{EndCause, JobId, JobSpec, JobState, PendingKind, PendingReason};
use berth_sched::depend::{self, Judgement, Target};
use jiff::Timestamp;

use crate::error::ApiError;
use crate::identity::User;
use crate::lifecycle::Move;
use crate::manager::Manager;
use crate::state::State;

/// The (owner, name) a `singleton` job shares with the jobs it waits for.
type Name = (i64, String);

fn singleton_name(st: &State, id: JobId) -> Option<Name> {
    let j = st.jobs.get(&id)?;
    j.spec.dependency.as_ref().filter(|d| d.has_singleton())?;
    Some((j.owner.user_id, j.spec.name.clone().unwrap_or_default()))
}

/// Judges every held job at `now`: frees those that may now be scheduled, records the
/// others' reasons (one store batch), and cancels those whose dependency can never be met.
pub async fn release(m: &Manager, st: &mut State, now: Timestamp) {
    if st.held.is_empty() {
        st.ended_targets.clear();
        return;
    }
    let now_ms = now.as_millisecond();
    let ids: Vec<JobId> = st.held.iter().copied().collect();
    learn_ended(m, st, &ids).await;
    let mut busy = running_names(st, &ids);
    let mut reasons = Vec::new();
    let mut never = Vec::new();
    let mut arrays = Vec::new();
    for id in ids {
        let Some(job) = st.jobs.get(&id) else { continue };
        let verdict = match (job.spec.begin_at, &job.spec.dependency) {
            (Some(at), _) if at > now => Judgement::Waits(PendingReason::new(
                PendingKind::BeginTime,
                format!("begins at {}", at.strftime("%Y-%m-%d %H:%M:%S UTC")),
            )),
            (_, Some(dep)) => {
                let name = singleton_name(st, id);
                let other = name.as_ref().and_then(|n| busy.get(n)).copied();
                depend::judge(dep, |t| target(st, t), other, now_ms)
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
                st.held.remove(&id);
                st.sync_sets(id);
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

/// Reads from the store the jobs that `ids` depend on which have left memory (ended) and
/// are not known yet.
async fn learn_ended(m: &Manager, st: &mut State, ids: &[JobId]) {
    let mut wanted: Vec<JobId> = ids
        .iter()
        .filter_map(|id| st.jobs.get(id)?.spec.dependency.as_ref())
        .flat_map(|d| d.jobs())
        .filter(|t| !st.jobs.contains_key(t) && !st.ended_targets.contains_key(t))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    for t in wanted {
        match m.store.job(t).await {
            Ok(Some(row)) if row.state.is_terminal() => {
                let started_at = row.started_at.map(|s| s.as_millisecond());
                st.ended_targets.insert(t, Some(Target { state: row.state, started_at }));
            }
            // Not ended per the store either: it is being moved (judged again next pass).
            Ok(Some(_)) => {}
            // Gone from the records (retention): remembered as such.
            Ok(None) => {
                st.ended_targets.insert(t, None);
            }
            Err(e) => tracing::warn!(job = t, "cannot read a job others depend on: {e}"),
        }
    }
}

/// What is known of job `t`: live in memory, or ended.
fn target(st: &State, t: JobId) -> Option<Target> {
    if let Some(j) = st.jobs.get(&t) {
        let started_at = j.attempt.started_at.map(|s| s.as_millisecond());
        return Some(Target { state: j.state, started_at });
    }
    st.ended_targets.get(&t).copied().flatten()
}

/// For the held `singleton` jobs: the job of each (owner, name) that has started and not
/// ended, or that an earlier pass freed and still waits in its queue.
fn running_names(st: &State, held: &[JobId]) -> HashMap<Name, (JobId, JobState)> {
    let mut wanted: HashMap<Name, (JobId, JobState)> = HashMap::new();
    let names: Vec<Name> = held.iter().filter_map(|id| singleton_name(st, *id)).collect();
    if names.is_empty() {
        return wanted;
    }
    for j in st.jobs.values() {
        let free_singleton =
            j.state == JobState::Pending && !st.held.contains(&j.id) && singleton_name(st, j.id).is_some();
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
/// `user` (a job they may not see answers like one that does not exist), and it is not
/// already impossible (an `afterok` on a failed job), as Slurm refuses such a submit.
pub async fn check_at_submit(m: &Manager, user: &User, spec: &JobSpec) -> Result<(), ApiError> {
    let Some(dep) = &spec.dependency else { return Ok(()) };
    let mut known: HashMap<JobId, Target> = HashMap::new();
    for t in dep.jobs() {
        let live = {
            let st = m.jobs.lock().await;
            st.jobs.get(&t).map(|j| (j.owner.user_id, j.spec.clone(), target(&st, t)))
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
        known.insert(t, tgt);
    }
    let now = Timestamp::now().as_millisecond();
    if let Judgement::Never(why) = depend::judge(dep, |t| known.get(&t).copied(), None, now) {
        return Err(ApiError::bad_request(format!(
            "dependency `{dep}` can never be satisfied: {why}; submit without it, or depend on another job"
        )));
    }
    Ok(())
}

fn no_such(dep: &berth_model::Dependency, t: JobId) -> ApiError {
    ApiError::bad_request(format!(
        "dependency `{dep}`: no job {t} (or it is not yours to see): check the id with `berth ps -a`"
    ))
}
