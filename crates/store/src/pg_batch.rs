//! PostgreSQL's [`crate::Store::apply`] for more than one change: the batch is cut into
//! groups ([`groups`]), and each group is written with one multi-row statement per kind of
//! change (`UNNEST` of bound arrays), so a scheduling pass that starts 5,000 jobs costs a few
//! round trips instead of 20,000 (each one a wait for the manager on a loaded machine, with the
//! transaction open: docs/perf.md, issue 42). The semantics are `apply_each`'s: every
//! transition is a compare-and-set on its `from` state, a change that misses its row fails the
//! whole batch with the error the one-at-a-time loop would have given (the caller's
//! transaction, fence check included, rolls everything back).

use std::collections::{HashMap, HashSet};

use berth_model::{JobId, JobState};
use sqlx::{PgConnection, Row};

use super::shared_jobs::stop_columns;
use crate::rows::{to_json, ts};
use crate::{Change, Result, StoreError};

/// Applies `changes` in order inside the caller's transaction.
pub(super) async fn apply_changes(c: &mut PgConnection, changes: &[Change]) -> Result<()> {
    if changes.len() < 2 {
        return super::shared_store::apply_each(c, changes).await;
    }
    for group in groups(changes) {
        let mut failed: Vec<(usize, StoreError)> = Vec::new();
        let of = |kind: Kind| group.iter().copied().filter(move |&i| Kind::of(&changes[i]) == kind);
        kernel_exits(c, changes, of(Kind::KernelExit).collect(), &mut failed).await?;
        transitions(c, changes, of(Kind::Transition).collect(), &mut failed).await?;
        stops(c, changes, of(Kind::Stop).collect(), &mut failed).await?;
        set_kernels(c, changes, of(Kind::SetKernels).collect()).await?;
        holds(c, changes, of(Kind::Hold).collect(), &mut failed).await?;
        pending_reasons(c, changes, of(Kind::PendingReason).collect(), &mut failed).await?;
        usage(c, changes, of(Kind::Usage).collect()).await?;
        // The first failure in the batch's order is the one the one-at-a-time loop stops at:
        // every change before it succeeded on the same rows here as there.
        if let Some((_, e)) = failed.into_iter().min_by_key(|(i, _)| *i) {
            return Err(e);
        }
    }
    Ok(())
}

/// A kind of change, in the order a group writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    KernelExit,
    Transition,
    Stop,
    SetKernels,
    Hold,
    PendingReason,
    Usage,
}

impl Kind {
    fn of(c: &Change) -> Kind {
        match c {
            Change::KernelExit { .. } => Kind::KernelExit,
            Change::Transition { .. } => Kind::Transition,
            Change::Stop { .. } => Kind::Stop,
            Change::SetKernels { .. } => Kind::SetKernels,
            Change::Hold { .. } => Kind::Hold,
            Change::PendingReason { .. } => Kind::PendingReason,
            Change::Usage(_) => Kind::Usage,
        }
    }
}

/// The rows a change writes: a job's (and its kernels'), or a usage figure's.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Key<'a> {
    Job(JobId),
    Usage(&'a str, &'a str),
}

fn key(c: &Change) -> Key<'_> {
    match c {
        Change::KernelExit { job_id, .. }
        | Change::Transition { job_id, .. }
        | Change::Stop { job_id, .. }
        | Change::SetKernels { job_id, .. }
        | Change::Hold { job_id, .. }
        | Change::PendingReason { job_id, .. } => Key::Job(*job_id),
        Change::Usage(u) => Key::Usage(&u.kind, &u.name),
    }
}

/// Cuts `changes` into consecutive groups (indices, in order) that can each be written kind by
/// kind in [`Kind`]'s order with the same outcome as in the batch's order. Changes to different
/// rows commute, so a group only has to keep each row's own changes in order: a change joins
/// the group when every change already in it for the same rows is of an earlier kind, else it
/// opens the next group. (A kind never appears twice for one row in a group, so one multi-row
/// statement per kind never updates a row twice.)
fn groups(changes: &[Change]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut latest: HashMap<Key<'_>, Kind> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        let kind = Kind::of(c);
        let k = key(c);
        // A usage figure is replaced whole, never read: a later one in the group just wins
        // ([`usage`] keeps the last). A report batch charges its user once per ended job.
        let replaces = kind == Kind::Usage && latest.get(&k) == Some(&Kind::Usage);
        if out.is_empty() || (!replaces && latest.get(&k).is_some_and(|&was| was >= kind)) {
            out.push(Vec::new());
            latest.clear();
        }
        latest.insert(k, kind);
        out.last_mut().expect("pushed above").push(i);
    }
    out
}

/// The ids a multi-row statement's `RETURNING` gave.
fn returned_ids(rows: &[sqlx::postgres::PgRow]) -> Result<HashSet<i64>> {
    rows.iter().map(|r| Ok(r.try_get::<i64, _>(0)?)).collect()
}

/// Compare-and-set moves, and their history rows, in one statement; the jobs it did not move
/// are explained as `apply_each` would (`InvalidTransition`, `NotFound`, `Conflict`).
async fn transitions(
    c: &mut PgConnection,
    changes: &[Change],
    idx: Vec<usize>,
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    let mut cols = TransitionColumns::default();
    for &i in &idx {
        let Change::Transition { job_id, from, to, at, reason, exit_code, end_signal, end } = &changes[i] else {
            continue;
        };
        if !from.can_become(*to) {
            failed.push((i, StoreError::InvalidTransition { job_id: *job_id, from: *from, to: *to }));
            continue;
        }
        let requeue = *to == JobState::Pending && *from != JobState::Pending;
        let terminal = to.is_terminal();
        cols.id.push(*job_id);
        cols.from.push(from.as_str());
        cols.to.push(to.as_str());
        cols.at.push(ts(*at));
        cols.reason.push(reason.as_str());
        cols.requeue.push(requeue);
        cols.running.push(*to == JobState::Running && !requeue);
        cols.terminal.push(terminal);
        cols.exit.push(exit_code.filter(|_| terminal).map(i64::from));
        cols.signal.push(end_signal.filter(|_| terminal).map(i64::from));
        cols.end.push(end.filter(|_| terminal).map(|e| e.as_str()));
        cols.clear_pending.push(*from == JobState::Pending && *to != JobState::Pending);
        cols.ord.push(i as i64);
    }
    if cols.id.is_empty() {
        return Ok(());
    }
    const MOVE: &str = "WITH t AS (SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bigint[], \
         $5::text[], $6::bool[], $7::bool[], $8::bool[], $9::bigint[], $10::text[], $11::bool[], $12::bigint[], \
         $13::bigint[]) \
         AS t(id, from_s, to_s, at, reason, requeue, running, terminal, exit_code, end_cause, clear_pending, ord, \
         end_signal)), \
         moved AS (UPDATE jobs j SET state = t.to_s, reason = t.reason, \
         started_at = CASE WHEN t.requeue THEN NULL WHEN t.running THEN COALESCE(j.started_at, t.at) \
             ELSE j.started_at END, \
         ended_at = CASE WHEN t.terminal THEN t.at ELSE j.ended_at END, \
         exit_code = COALESCE(t.exit_code, j.exit_code), \
         end_signal = COALESCE(t.end_signal, j.end_signal), \
         attempt = CASE WHEN t.requeue THEN j.attempt + 1 ELSE j.attempt END, \
         pending_reason = CASE WHEN t.clear_pending THEN NULL ELSE j.pending_reason END, \
         end_cause = COALESCE(t.end_cause, j.end_cause), \
         cancelled_by = CASE WHEN t.requeue THEN NULL ELSE j.cancelled_by END, \
         preempted_by = CASE WHEN t.requeue THEN NULL ELSE j.preempted_by END, \
         preempt_action = CASE WHEN t.requeue THEN NULL ELSE j.preempt_action END, \
         idle_stop_secs = CASE WHEN t.requeue THEN NULL ELSE j.idle_stop_secs END, \
         scaled_down_to = CASE WHEN t.requeue THEN NULL ELSE j.scaled_down_to END \
         FROM t WHERE j.id = t.id AND j.state = t.from_s \
         RETURNING t.id, t.at, t.from_s, t.to_s, t.reason, t.ord) \
         INSERT INTO transitions (job_id, at, from_state, to_state, reason) \
         SELECT id, at, from_s, to_s, reason FROM moved ORDER BY ord RETURNING job_id";
    let rows = sqlx::query(MOVE)
        .bind(&cols.id)
        .bind(&cols.from)
        .bind(&cols.to)
        .bind(&cols.at)
        .bind(&cols.reason)
        .bind(&cols.requeue)
        .bind(&cols.running)
        .bind(&cols.terminal)
        .bind(&cols.exit)
        .bind(&cols.end)
        .bind(&cols.clear_pending)
        .bind(&cols.ord)
        .bind(&cols.signal)
        .fetch_all(&mut *c)
        .await?;
    if rows.len() == cols.id.len() {
        return Ok(());
    }
    let moved = returned_ids(&rows)?;
    let missed: Vec<i64> = cols.id.iter().copied().filter(|id| !moved.contains(id)).collect();
    let states: HashMap<i64, String> = sqlx::query("SELECT id, state FROM jobs WHERE id = ANY($1)")
        .bind(&missed)
        .fetch_all(&mut *c)
        .await?
        .iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("state")?)))
        .collect::<Result<_>>()?;
    for (n, &id) in cols.id.iter().enumerate() {
        if moved.contains(&id) {
            continue;
        }
        let i = cols.ord[n] as usize;
        let Change::Transition { from, .. } = &changes[i] else { continue };
        let e = match states.get(&id) {
            Some(actual) => StoreError::Conflict { job_id: id, expected: *from, actual: actual.clone() },
            None => StoreError::NotFound(format!("job {id}")),
        };
        failed.push((i, e));
    }
    Ok(())
}

/// The bound arrays of [`transitions`]' statement, one element per move.
#[derive(Default)]
struct TransitionColumns<'a> {
    id: Vec<i64>,
    from: Vec<&'a str>,
    to: Vec<&'a str>,
    at: Vec<i64>,
    reason: Vec<&'a str>,
    requeue: Vec<bool>,
    running: Vec<bool>,
    terminal: Vec<bool>,
    exit: Vec<Option<i64>>,
    signal: Vec<Option<i64>>,
    end: Vec<Option<&'a str>>,
    clear_pending: Vec<bool>,
    ord: Vec<i64>,
}

/// Holds and releases, one statement each (rare: a user's request, never a pass's batch).
async fn holds(
    c: &mut PgConnection,
    changes: &[Change],
    idx: Vec<usize>,
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    for i in idx {
        if let Err(e) = super::shared_store::apply_each(c, &changes[i..=i]).await {
            failed.push((i, e));
        }
    }
    Ok(())
}

/// Who asked each job to stop; a job that is not there is `NotFound`.
async fn stops(
    c: &mut PgConnection,
    changes: &[Change],
    idx: Vec<usize>,
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    let (mut id, mut by, mut for_job, mut action, mut idle, mut scaled) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for &i in &idx {
        let Change::Stop { job_id, cause } = &changes[i] else { continue };
        let (b, f, a, s, d) = stop_columns(cause);
        id.push(*job_id);
        by.push(b);
        for_job.push(f);
        action.push(a);
        idle.push(s);
        scaled.push(d);
    }
    let rows = sqlx::query(
        "UPDATE jobs j SET cancelled_by = t.by, preempted_by = t.for_job, preempt_action = t.action, \
         idle_stop_secs = t.idle, scaled_down_to = t.scaled \
         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[]) \
         AS t(id, by, for_job, action, idle, scaled) WHERE j.id = t.id RETURNING j.id",
    )
    .bind(&id)
    .bind(&by)
    .bind(&for_job)
    .bind(&action)
    .bind(&idle)
    .bind(&scaled)
    .fetch_all(&mut *c)
    .await?;
    missing_jobs(&rows, &idx, &id, failed)
}

/// `NotFound` for each job of `ids` (change `idx[n]`) that `rows` did not return.
fn missing_jobs(
    rows: &[sqlx::postgres::PgRow],
    idx: &[usize],
    ids: &[i64],
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    if rows.len() == ids.len() {
        return Ok(());
    }
    let hit = returned_ids(rows)?;
    for (n, id) in ids.iter().enumerate() {
        if !hit.contains(id) {
            failed.push((idx[n], StoreError::NotFound(format!("job {id}"))));
        }
    }
    Ok(())
}

/// Each attempt's kernels (replacing earlier ones) and its job's node list, in two statements.
async fn set_kernels(c: &mut PgConnection, changes: &[Change], idx: Vec<usize>) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    let (mut job, mut attempt, mut nodes) = (vec![], vec![], vec![]);
    let (mut k_job, mut k_attempt, mut k_idx, mut k_node, mut k_binding) = (vec![], vec![], vec![], vec![], vec![]);
    for &i in &idx {
        let Change::SetKernels { job_id, attempt: a, bindings } = &changes[i] else { continue };
        let mut names: Vec<&str> = bindings.iter().map(|b| b.node.as_str()).collect();
        names.dedup();
        job.push(*job_id);
        attempt.push(i64::from(*a));
        nodes.push(names.join(","));
        for (n, b) in bindings.iter().enumerate() {
            k_job.push(*job_id);
            k_attempt.push(i64::from(*a));
            k_idx.push(n as i64);
            k_node.push(b.node.as_str());
            k_binding.push(to_json(b));
        }
    }
    sqlx::query(
        "WITH gone AS (DELETE FROM kernels k USING UNNEST($1::bigint[], $2::bigint[]) AS t(id, attempt) \
         WHERE k.job_id = t.id AND k.attempt = t.attempt) \
         UPDATE jobs j SET nodes = t.nodes FROM UNNEST($1::bigint[], $3::text[]) AS t(id, nodes) WHERE j.id = t.id",
    )
    .bind(&job)
    .bind(&attempt)
    .bind(&nodes)
    .execute(&mut *c)
    .await?;
    if !k_job.is_empty() {
        sqlx::query(
            "INSERT INTO kernels (job_id, attempt, idx, node, binding) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])",
        )
        .bind(&k_job)
        .bind(&k_attempt)
        .bind(&k_idx)
        .bind(&k_node)
        .bind(&k_binding)
        .execute(&mut *c)
        .await?;
    }
    Ok(())
}

/// Kernels' ends, then what they used added to their jobs (see `sql_jobs.rs`'s `kernel_exit`
/// for the sums; a group holds one end per job, so the per-row formulas are the same).
async fn kernel_exits(
    c: &mut PgConnection,
    changes: &[Change],
    idx: Vec<usize>,
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    let (mut job, mut attempt, mut index, mut exit) = (vec![], vec![], vec![], vec![]);
    let (mut cpu, mut peak, mut gpu, mut ord) = (vec![], vec![], vec![], vec![]);
    let mut known = vec![];
    for &i in &idx {
        let Change::KernelExit { job_id, attempt: a, index: k, exit_code, usage } = &changes[i] else { continue };
        let u = usage.unwrap_or_default();
        job.push(*job_id);
        attempt.push(i64::from(*a));
        index.push(i64::from(*k));
        exit.push(exit_code.map(i64::from));
        cpu.push(u.cpu_seconds);
        peak.push(u.memory_peak_bytes.map(|b| b.min(i64::MAX as u64) as i64));
        gpu.push(u.gpu_seconds);
        ord.push(i as i64);
        known.push(u.is_known());
    }
    let rows = sqlx::query(
        "UPDATE kernels k SET exit_code = t.exit, cpu_seconds = t.cpu, memory_peak_bytes = t.peak, \
         gpu_seconds = t.gpu FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::float8[], \
         $6::bigint[], $7::float8[], $8::bigint[]) AS t(id, attempt, idx, exit, cpu, peak, gpu, ord) \
         WHERE k.job_id = t.id AND k.attempt = t.attempt AND k.idx = t.idx RETURNING t.ord",
    )
    .bind(&job)
    .bind(&attempt)
    .bind(&index)
    .bind(&exit)
    .bind(&cpu)
    .bind(&peak)
    .bind(&gpu)
    .bind(&ord)
    .fetch_all(&mut *c)
    .await?;
    if rows.len() != ord.len() {
        let hit = returned_ids(&rows)?;
        for n in (0..ord.len()).filter(|&n| !hit.contains(&ord[n])) {
            let what = format!("kernel {} of job {} attempt {}", index[n], job[n], attempt[n]);
            failed.push((ord[n] as usize, StoreError::NotFound(what)));
        }
    }
    let keep = |v: &[_]| -> Vec<_> { v.iter().zip(&known).filter(|(_, k)| **k).map(|(x, _)| *x).collect() };
    let (job, attempt): (Vec<i64>, Vec<i64>) = (keep(&job), keep(&attempt));
    if job.is_empty() {
        return Ok(());
    }
    let cpu: Vec<Option<f64>> = cpu.iter().zip(&known).filter(|(_, k)| **k).map(|(x, _)| *x).collect();
    let peak: Vec<Option<i64>> = peak.iter().zip(&known).filter(|(_, k)| **k).map(|(x, _)| *x).collect();
    let gpu: Vec<Option<f64>> = gpu.iter().zip(&known).filter(|(_, k)| **k).map(|(x, _)| *x).collect();
    sqlx::query(
        "UPDATE jobs j SET used_cpu_seconds = CASE WHEN t.cpu IS NULL THEN j.used_cpu_seconds \
             ELSE COALESCE(j.used_cpu_seconds, 0) + t.cpu END, \
         used_memory_peak_bytes = CASE WHEN t.peak IS NULL THEN j.used_memory_peak_bytes \
             ELSE GREATEST(COALESCE(j.used_memory_peak_bytes, 0), (SELECT SUM(memory_peak_bytes) \
             FROM kernels WHERE job_id = t.id AND attempt = t.attempt)) END, \
         used_gpu_seconds = CASE WHEN t.gpu IS NULL THEN j.used_gpu_seconds \
             ELSE COALESCE(j.used_gpu_seconds, 0) + t.gpu END \
         FROM UNNEST($1::bigint[], $2::bigint[], $3::float8[], $4::bigint[], $5::float8[]) \
         AS t(id, attempt, cpu, peak, gpu) WHERE j.id = t.id",
    )
    .bind(&job)
    .bind(&attempt)
    .bind(&cpu)
    .bind(&peak)
    .bind(&gpu)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// Pending reasons; a job that is not there is `NotFound`.
async fn pending_reasons(
    c: &mut PgConnection,
    changes: &[Change],
    idx: Vec<usize>,
    failed: &mut Vec<(usize, StoreError)>,
) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    let (mut id, mut reason) = (vec![], vec![]);
    for &i in &idx {
        let Change::PendingReason { job_id, reason: r } = &changes[i] else { continue };
        id.push(*job_id);
        reason.push(r.as_ref().map(to_json));
    }
    let rows = sqlx::query(
        "UPDATE jobs j SET pending_reason = t.reason FROM UNNEST($1::bigint[], $2::text[]) AS t(id, reason) \
         WHERE j.id = t.id RETURNING j.id",
    )
    .bind(&id)
    .bind(&reason)
    .fetch_all(&mut *c)
    .await?;
    missing_jobs(&rows, &idx, &id, failed)
}

/// Usage figures, inserted or replaced: of several for one figure in a group, the last.
async fn usage(c: &mut PgConnection, changes: &[Change], idx: Vec<usize>) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    let mut last: HashMap<(&str, &str), usize> = HashMap::new();
    for &i in &idx {
        if let Change::Usage(u) = &changes[i] {
            last.insert((u.kind.as_str(), u.name.as_str()), i);
        }
    }
    let mut kept: Vec<usize> = last.into_values().collect();
    kept.sort_unstable();
    let (mut kind, mut name, mut value, mut at) = (vec![], vec![], vec![], vec![]);
    for &i in &kept {
        let Change::Usage(u) = &changes[i] else { continue };
        kind.push(u.kind.as_str());
        name.push(u.name.as_str());
        value.push(u.value);
        at.push(ts(u.at));
    }
    sqlx::query(
        "INSERT INTO usage (kind, name, value, at) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::float8[], $4::bigint[]) \
         ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, at = excluded.at",
    )
    .bind(&kind)
    .bind(&name)
    .bind(&value)
    .bind(&at)
    .execute(&mut *c)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::JobState::*;
    use jiff::Timestamp;

    fn tr(job_id: JobId, from: JobState, to: JobState) -> Change {
        Change::Transition {
            job_id,
            from,
            to,
            at: Timestamp::UNIX_EPOCH,
            reason: String::new(),
            exit_code: None,
            end: None,
            end_signal: None,
        }
    }

    fn kernels(job_id: JobId) -> Change {
        Change::SetKernels { job_id, attempt: 0, bindings: vec![] }
    }

    fn exit(job_id: JobId) -> Change {
        Change::KernelExit { job_id, attempt: 0, index: 0, exit_code: Some(0), usage: None }
    }

    #[test]
    fn a_pass_of_many_starts_is_one_group_and_a_rows_later_change_opens_the_next() {
        let pass: Vec<Change> = (1..=100).flat_map(|id| [tr(id, Pending, Scheduled), kernels(id)]).collect();
        assert_eq!(groups(&pass).len(), 1, "each job's transition comes before its kernels in a group");
        // finished: the kernel's end, then the job's; then the same job again
        let batch =
            vec![exit(1), tr(1, Running, Succeeded), tr(2, Scheduled, Running), exit(2), tr(2, Running, Failed)];
        assert_eq!(groups(&batch), vec![vec![0, 1, 2], vec![3, 4]]);
        // a usage figure set again is replaced (the writer keeps the last): no new group
        let u = |v: f64| {
            Change::Usage(crate::UsageRow {
                kind: "user".into(),
                name: "a".into(),
                value: v,
                at: Timestamp::UNIX_EPOCH,
            })
        };
        let ends: Vec<Change> = (1..=100).flat_map(|id| [exit(id), tr(id, Running, Succeeded), u(id as f64)]).collect();
        assert_eq!(groups(&ends).len(), 1, "a report batch charging one user per ended job is one group");
    }
}
