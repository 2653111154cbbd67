//! The scheduling loop: woken by events (submit, cancel, kernel end, node register) and by a
//! one-second safety timer, it runs `berth_sched::schedule` on the in-memory snapshot and
//! commits its starts (up to [`PASS_PART`] in one store batch) and every changed pending
//! reason of the pass; after each batch it applies that part to memory with
//! `berth_sched::apply` (`pass_target.rs`: ledgers, places and reasons) and sends its
//! `StartKernel`s (`kernel_start`), and stores and sends the preemptions.

use std::sync::Arc;
use std::time::Duration;

use berth_model::{JobState, PendingKind, PendingReason, StopCause};
use berth_sched::apply::{self, PassTarget};
use berth_sched::{FairShare, HeadOfLine, Ordering, PassInput, PassOutput, Preempt, RunningSet};
use berth_store::Change;
use jiff::Timestamp;

use crate::lifecycle::Move;
use crate::manager::Manager;
use crate::metrics::Commit;
use crate::state::State;

/// How often the usage of running jobs is added to their users' and projects' fair-share
/// usage (ended jobs are charged when they end).
pub const USAGE_FLUSH: Duration = Duration::from_secs(30);

/// Runs passes until shutdown.
pub async fn run(m: Arc<Manager>) {
    let mut shutdown = m.shutdown.clone();
    // By the manager's clock: a test that advances it past the interval gets a flush.
    let mut last_flush = m.clock.instant();
    loop {
        if m.clock.instant().saturating_duration_since(last_flush) >= USAGE_FLUSH {
            last_flush = m.clock.instant();
            account_running(&m).await;
        }
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            _ = m.jobs.woken() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => break,
        }
        // A manager that lost the leadership starts nothing (its writes would be fenced anyway).
        if !m.lease.may_act() {
            continue;
        }
        m.jobs.retry_deferred().await;
        // A pass is never interrupted half-way: shutdown waits for its store batch.
        pass(&m).await;
    }
}

/// Adds the usage of every job holding resources since it was last counted, in one batch
/// (plus the clock row that tells a restarted manager where counting stopped).
pub async fn account_running(m: &Manager) {
    let mut st = m.jobs.lock().await;
    let now = m.clock.now();
    let now_ms = now.as_millisecond();
    let accounts: Vec<(&str, std::borrow::Cow<'_, str>, f64)> = st
        .holding_jobs()
        .map(|j| {
            (
                j.owner.name.as_str(),
                j.account(),
                j.usage_rate() * (now_ms - j.attempt.accounted_ms).max(0) as f64 / 1000.0,
            )
        })
        .collect();
    let items: Vec<(&str, &str, f64)> = accounts.iter().map(|(u, a, x)| (*u, a.as_ref(), *x)).collect();
    let rows = st.usage().charge(&items, now_ms, m.fair_share.half_life_ms);
    let mut changes: Vec<Change> = rows.iter().cloned().map(Change::Usage).collect();
    changes.push(Change::Usage(berth_store::UsageRow {
        kind: crate::state::CLOCK.into(),
        name: "flush".into(),
        value: 0.0,
        at: now,
    }));
    let started = std::time::Instant::now();
    let stored = m.store.apply(&changes).await;
    m.metrics.commit(Commit::Usage, started.elapsed());
    m.store_health.observe_write(&stored);
    if let Err(e) = stored {
        tracing::warn!("usage not recorded: {e}");
        return;
    }
    st.set_usage(&rows);
    st.accounted_until(now_ms);
}

/// One scheduling pass. Returns how many jobs it started.
pub async fn pass(m: &Manager) -> usize {
    let mut st = m.jobs.lock().await;
    // Timed from the lock: what a pass costs, not how long it waited for a scrape or a batch.
    let began = std::time::Instant::now();
    // Held jobs whose begin time came or whose dependency is met join the set first.
    crate::holds::release(m, &mut st, m.clock.now()).await;
    if st.pending().is_empty() {
        return 0;
    }
    // The pending jobs are the set kept across passes: the pass reads only those it tries.
    st.new_pass();
    let queues = m.queues.all();
    let now = m.clock.now();
    let now_ms = now.as_millisecond();
    // Running jobs matter to backfill, preemption, the fair orderings and the reclaim of
    // borrowed work; a plain strict/skip FIFO queue without borrowing does not need them, so
    // the default pass stays free of that work.
    let quotas = m.quotas.pass_quotas(&st);
    let borrowing = quotas
        .users
        .values()
        .chain(quotas.projects.values())
        .any(|l| l.borrow_gpu_milli.is_some() || l.borrow_cpu_milli.is_some());
    let needs_running = borrowing
        || queues
            .iter()
            .any(|q| q.head_of_line == HeadOfLine::Backfill || q.preemption.is_some() || q.ordering != Ordering::Fifo);
    let no_running = RunningSet::new();
    let running = if needs_running { st.running() } else { &no_running };
    #[cfg(debug_assertions)]
    st.check_running(now_ms);
    let fair_share = if queues.iter().any(|q| q.ordering == Ordering::FairShare) {
        st.usage().fair_share(&m.fair_share.weights, now_ms, m.fair_share.half_life_ms)
    } else {
        FairShare::default()
    };
    let input = PassInput {
        queues: &queues,
        nodes: st.ledgers(),
        pending: &[],
        running: &[],
        fair_share: &fair_share,
        quotas: &quotas,
        now: now_ms,
    };
    let mut out = berth_sched::schedule_set(&input, st.pending(), running);
    crate::images::explain_waits(&st, &mut out);
    if !out.starts.is_empty() {
        let mut ports = crate::cluster_env::ports_in_use(&st);
        for s in &mut out.starts {
            crate::cluster_env::assign_port(&mut ports, s.job, &mut s.bindings);
        }
    }
    // Committed and sent a part at a time: the first jobs' `StartKernel`s go out while the
    // next part is written, instead of every start of a large pass waiting for all of them.
    // A part is acted on only once it is committed; the pass's reasons and preemptions go with
    // the last part.
    let mut started = 0;
    let mut starts = std::mem::take(&mut out.starts).into_iter().peekable();
    loop {
        let part: Vec<berth_sched::Start> = starts.by_ref().take(PASS_PART).collect();
        let last = starts.peek().is_none();
        let part = if last {
            PassOutput { starts: part, ..std::mem::take(&mut out) }
        } else {
            PassOutput { starts: part, borrowed: out.borrowed.clone(), ..PassOutput::default() }
        };
        let Some(n) = commit_part(m, &mut st, part, now).await else { break };
        started += n;
        if last {
            break;
        }
    }
    m.metrics.pass(began.elapsed());
    started
}

/// Most starts committed (and then sent) together by a pass.
const PASS_PART: usize = 1024;

/// Commits one part of a pass, then applies it to memory and sends its commands: how many jobs
/// it started, `None` when the store refused it (nothing of it was written, nor acted on).
async fn commit_part(m: &Manager, st: &mut State, out: PassOutput, now: Timestamp) -> Option<usize> {
    let changes = batch(st, &out, now);
    let committing = std::time::Instant::now();
    let stored = m.store.apply(&changes).await;
    if !changes.is_empty() {
        m.metrics.commit(Commit::Pass, committing.elapsed());
        m.store_health.observe_write(&stored);
    }
    if let Err(e) = stored {
        // Nothing was written, so nothing is acted on; the next pass tries again.
        tracing::warn!("scheduling pass not committed: {e}");
        return None;
    }

    // Stored: memory follows (the same code as `berth sim`'s), then the commands go out.
    let applied = apply::apply(st, out, now.as_millisecond());
    for c in &applied.clashes {
        tracing::warn!(job = c.job, node = %c.node, "cannot allocate: {}", c.error);
    }
    let watched = m.jobs.watched();
    for id in &applied.started {
        if let Some(job) = st.job(*id) {
            crate::kernel_start::send_start(m, st, job);
            if watched {
                m.jobs.announce(Arc::new(job.event()));
            }
            m.metrics.started(&job.queue, now.duration_since(job.submitted_at).unsigned_abs());
        }
    }
    preempt(m, st, &applied.preemptions).await;
    Some(applied.started.len())
}

/// The pass's store batch: each start's move to SCHEDULED with its kernels (of jobs still
/// pending, as `apply` will start), and each pending reason that needs writing.
fn batch(st: &State, out: &PassOutput, now: Timestamp) -> Vec<Change> {
    let mut changes = Vec::with_capacity(out.starts.len() * 2);
    for s in out.starts.iter().filter(|s| st.is_pending(s.job)) {
        let data_on = &st.job(s.job).expect("a pass starts jobs in memory").waiting.data_on;
        changes.extend(Move::scheduled(&s.bindings, data_on).record(s.job, JobState::Pending, now));
        let attempt = st.job(s.job).expect("a pass starts jobs in memory").attempt.number;
        changes.push(Change::SetKernels { job_id: s.job, attempt, bindings: s.bindings.clone() });
    }
    for w in &out.waiting {
        let Some(job) = st.job(w.job) else { continue };
        if needs_persisting(job.waiting.reason.as_ref(), &w.reason) {
            changes.push(Change::PendingReason { job_id: w.job, reason: Some(w.reason.clone()) });
        }
    }
    for (id, _, reason) in out.untried_jobs() {
        let Some(job) = st.job(id) else { continue };
        if needs_persisting(job.waiting.reason.as_ref(), reason) {
            changes.push(Change::PendingReason { job_id: id, reason: Some(reason.clone()) });
        }
    }
    changes
}

/// Carries out a pass's preemptions (those that stand, `berth_sched::apply::preemptions`):
/// each victim's move to TERMINATING (reason `preempted by job N (priority P)`) is stored,
/// then its kernels are told to stop; when they have stopped the job is requeued or cancelled
/// (`lifecycle`), and the preemptor starts in a later pass.
async fn preempt(m: &Manager, st: &mut State, list: &[Preempt]) {
    for p in list {
        let priority = st.job(p.for_job).map(|j| j.spec.priority).unwrap_or_default();
        let reason = format!("preempted by job {} (priority {priority})", p.for_job);
        let stops = m.jobs.stop_commands(st, p.victim, &reason);
        let cause = StopCause::Preempted { by_job: p.for_job, action: p.action };
        match m.jobs.transition(st, p.victim, Move::stop(cause, reason), vec![]).await {
            Ok(()) => {
                tracing::info!(victim = p.victim, for_job = p.for_job, "preempting");
                st.send_all(stops);
            }
            Err(e) => tracing::warn!(job = p.victim, "cannot record preemption: {e}"),
        }
    }
}

/// Whether a new pending reason must be written to the store. The live reason is served from
/// memory; the store copy only matters after a restart (when the first pass recomputes it).
/// `priority` reasons only say "behind the job at position N": they follow from the queue
/// order, name the position ahead (which changes for every waiting job each time the head starts) and would cost a
/// write per submitted job, so a job's first one is not written; a change of kind is, so a
/// stored reason never outlives the state it described.
fn needs_persisting(old: Option<&PendingReason>, new: &PendingReason) -> bool {
    match old {
        None => new.kind != PendingKind::Priority,
        Some(o) if o.kind == PendingKind::Priority && new.kind == PendingKind::Priority => false,
        Some(o) => o.kind != new.kind || o.message != new.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_reasons_are_never_written_for_new_jobs_and_kind_changes_always_are() {
        let p = |m: &str| PendingReason::new(PendingKind::Priority, m);
        let r = |m: &str| PendingReason::new(PendingKind::Resources, m);
        assert!(!needs_persisting(None, &p("behind 1")), "a submit must cost one write, not two");
        assert!(needs_persisting(None, &r("needs 1 GPU")));
        assert!(needs_persisting(Some(&r("needs 1 GPU")), &p("behind 3")));
        assert!(!needs_persisting(Some(&p("behind 1")), &p("behind 2")));
        assert!(needs_persisting(Some(&p("behind 1")), &r("needs 1 GPU")));
        assert!(needs_persisting(Some(&r("needs 1 GPU")), &r("needs 2 GPUs")));
        assert!(!needs_persisting(Some(&r("needs 1 GPU")), &r("needs 1 GPU")));
    }
}
