//! One scheduling pass: per queue, order the pending jobs (`order.rs`), walk them placing each
//! on the pass's working ledgers (`pool.rs`), and when one cannot start, try preemption
//! (`preempt.rs`) and then apply the head-of-line policy (strict, skip-after-N, or EASY
//! backfill in `backfill.rs`).
//!
//! The walk stops early, leaving the rest of the queue untried ([`Untried`]): behind a job
//! that holds the line (strict, skip-after), and once `backfill_window` jobs were tried after
//! the first one that could not start. Jobs the walk never reaches cost an id each, so a
//! pass over a deep, blocked queue costs about as much as over a short one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_model::{Binding, JobId, PendingKind, PendingReason};

use crate::backfill::{Holding, Reservation, reserve};
use crate::ledger::NodeLedger;
use crate::order::Order;
use crate::pool::{self, Pool};
use crate::quota::Book;
use crate::{
    HeadOfLine, Millis, PassInput, PassOutput, PendingJob, Preempt, QueueConfig, RunningJob, Start, Untried, Waiting,
    preempt,
};

/// Blocked jobs that may try for a reservation in one queue and pass: each try walks the
/// running jobs' ends, and a job that gets none (its nodes are down) should not make every
/// later blocked job pay for the walk again.
const MAX_RESERVATION_TRIES: u32 = 4;

/// How borrowed work is reclaimed in a queue without preemption: requeued, at once.
const BORROW_RECLAIM: crate::Preemption =
    crate::Preemption { action: crate::PreemptAction::Requeue, min_runtime_ms: 0 };

/// Runs one pass. Pure: the caller's ledgers are not touched; commit the returned starts with
/// [`NodeLedger::allocate`] and store each waiting job's reason, position and `blocked_passes`.
///
/// Queues are handled in the order configured (a repeated name counts once), then jobs of
/// unknown queues by queue name. Within a queue, starts come in placement order and waiting
/// jobs in position order; preemptions in the order they were decided.
///
/// Victims stay in `PassInput::running` until their resources are released; until then the
/// next pass names them again (the same decision), which the caller treats as in progress.
pub fn schedule(input: &PassInput) -> PassOutput {
    // Jobs of one queue mostly follow each other: the last queue's list is checked first, by
    // pointer when the caller shares the name.
    let mut groups: Vec<(&Arc<str>, Vec<&PendingJob>)> = Vec::new();
    let mut last = 0;
    for job in input.pending {
        let same = |name: &Arc<str>| Arc::ptr_eq(name, &job.queue) || **name == *job.queue;
        if !groups.get(last).is_some_and(|(name, _)| same(name)) {
            last = groups.iter().position(|(name, _)| same(name)).unwrap_or_else(|| {
                groups.push((&job.queue, Vec::new()));
                groups.len() - 1
            });
        }
        groups[last].1.push(job);
    }
    let mut by_queue: BTreeMap<&str, Vec<&PendingJob>> = groups.into_iter().map(|(name, l)| (&**name, l)).collect();
    let mut running: BTreeMap<&str, Vec<&RunningJob>> = BTreeMap::new();
    for r in input.running {
        running.entry(r.queue.as_str()).or_default().push(r);
    }
    for list in running.values_mut() {
        // Same output whatever the input order.
        list.sort_by_key(|r| r.id);
    }
    let mut out = PassOutput::default();
    // Quotas span queues: a project's jobs in two queues share its limits.
    let mut book = Book::new(input.quotas);
    for q in input.queues {
        let Some(jobs) = by_queue.remove(q.name.as_str()) else { continue };
        let mut nodes: Vec<&NodeLedger> = input.nodes.iter().filter(|l| l.queue() == q.name).collect();
        nodes.sort_by(|a, b| a.name().cmp(b.name()));
        let none = Vec::new();
        let run = QueueRun { input, q, running: running.get(q.name.as_str()).unwrap_or(&none) };
        run.run(nodes, jobs, &mut book, &mut out);
    }
    for (name, jobs) in by_queue {
        let reason = PendingReason::new(PendingKind::Queue, format!("queue `{name}` does not exist"));
        let mut jobs = jobs;
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        out.untried.push(Untried { first_position: 1, reason, jobs: jobs.iter().map(|j| j.id).collect() });
    }
    out
}

/// Where the walk of a queue stopped: the position of the first job it did not try, why the
/// rest wait, and the job in hand when it stopped (not yet counted as untried).
struct Stop<'a> {
    first_position: u32,
    reason: PendingReason,
    current: Option<&'a PendingJob>,
}

/// Records the job in hand and every job the order has left as untried.
fn untried(order: &mut Order, stop: Stop, out: &mut PassOutput) {
    let mut jobs: Vec<JobId> = stop.current.map(|j| j.id).into_iter().collect();
    order.rest_ids(&mut jobs);
    out.untried.push(Untried { first_position: stop.first_position, reason: stop.reason, jobs });
}

fn wait(job: &PendingJob, position: u32, reason: PendingReason, blocked_passes: u32) -> Waiting {
    Waiting { job: job.id, position, reason, blocked_passes, expected_start: None }
}

struct QueueRun<'i, 'a> {
    input: &'i PassInput<'a>,
    q: &'i QueueConfig,
    /// This queue's running jobs, by id.
    running: &'i Vec<&'a RunningJob>,
}

impl<'i, 'a> QueueRun<'i, 'a> {
    fn limit(&self, job: &PendingJob) -> Millis {
        job.time_limit_ms.unwrap_or(self.q.default_time_limit_ms)
    }

    /// When each binding on the queue's nodes is released: running jobs at the end of their
    /// limit (or now, when past it), jobs started in this pass at `now + limit`.
    fn holdings<'b>(&self, started: &'b [(Millis, JobId, Vec<Binding>)]) -> Vec<Holding<'b>>
    where
        'i: 'b,
        'a: 'b,
    {
        let now = self.input.now;
        let default_of = |name: &str| {
            self.input
                .queues
                .iter()
                .find(|q| q.name == name)
                .map_or(self.q.default_time_limit_ms, |q| q.default_time_limit_ms)
        };
        let mut out = Vec::new();
        for r in self.input.running {
            let limit = r.time_limit_ms.unwrap_or_else(|| default_of(&r.queue));
            let end = r.started_at.saturating_add(limit).max(now);
            out.extend(r.bindings.iter().map(|binding| Holding { end, job: r.id, binding }));
        }
        for (end, job, bindings) in started {
            out.extend(bindings.iter().map(|binding| Holding { end: *end, job: *job, binding }));
        }
        out
    }

    fn run(&self, nodes: Vec<&NodeLedger>, jobs: Vec<&PendingJob>, book: &mut Book, out: &mut PassOutput) {
        let (q, now) = (self.q, self.input.now);
        let totals = [
            nodes.iter().map(|l| l.cpus_total() as u64 * 1000).sum(),
            nodes.iter().map(|l| l.mem_total()).sum(),
            nodes.iter().map(|l| l.topology().gpus.len() as u64 * 1000).sum(),
        ];
        let mut pool = Pool::new(nodes, q.scoring, &jobs);
        let mut order = Order::new(q.ordering, jobs, self.running, self.input.fair_share, totals);
        let mut pos = 0u32;
        if pool.ready() == 0 {
            let reason = PendingReason::new(PendingKind::NoNodes, format!("no ready node in queue {}", q.name));
            untried(&mut order, Stop { first_position: 1, reason, current: None }, out);
            return;
        }
        // The job that holds the rest of the queue back (strict, skip-after), with its position.
        let mut blocker: Option<(JobId, u32)> = None;
        // Where the walk stopped, once it did.
        let mut stop: Option<Stop> = None;
        // The position of the first job that could not start and let later ones be tried, and
        // how many were tried since (bounded by the window).
        let mut first_blocked: Option<u32> = None;
        let mut tried_past = 0u32;
        let mut reservation: Option<Reservation> = None;
        // The queue position of the reservation's job (named by position, as above).
        let mut reserved_pos = 0u32;
        let mut tries = 0u32;
        // Jobs started in this pass (end, id, bindings), for backfill's timeline.
        let mut started: Vec<(Millis, JobId, Vec<Binding>)> = Vec::new();
        let backfill = q.head_of_line == HeadOfLine::Backfill;
        // Without preemption, only borrowed work can be reclaimed: none running, no plan to make
        // (the walk of the running jobs cost every blocked job of a deep queue).
        let any_borrowed = self.running.iter().any(|r| r.borrowed);
        let mut victims: BTreeSet<JobId> = BTreeSet::new();
        let mut borrowers: Vec<(&PendingJob, u32)> = Vec::new();
        // Shapes (with their end) that the reservation refused since the pool last changed.
        let mut delaying: Vec<(pool::ShapeKey, Millis)> = Vec::new();
        while let Some(job) = order.next() {
            pos += 1;
            if let Some((_, at)) = blocker {
                // By position, never by id: the job ahead may be another user's private job
                // (the reason is shown to this job's owner).
                let text = format!("priority: waiting behind the job at position {at}");
                let reason = PendingReason::new(PendingKind::Priority, text);
                stop = Some(Stop { first_position: pos, reason, current: Some(job) });
                break;
            }
            // Over quota: it waits for its own user's or project's jobs, never holds others.
            match book.admits(job) {
                Ok(false) => {}
                // Borrowing takes only what is left once every job within its quota had its
                // turn in this pass (else a requeued borrower would take back the room it was
                // preempted for): it is tried after the queue's other jobs.
                Ok(true) => {
                    borrowers.push((job, pos));
                    continue;
                }
                Err(text) => {
                    out.waiting.push(wait(job, pos, PendingReason::new(PendingKind::Quota, text), job.blocked_passes));
                    continue;
                }
            }

            // A job whose image no node has waits without holding the queue back: loading
            // the image somewhere, not the jobs behind it, is what lets it start.
            if let Some(image) = &job.image
                && !pool.any_has_image(image)
            {
                let reason = PendingReason::new(PendingKind::Image, format!("image: {image} not on any node"));
                out.waiting.push(wait(job, pos, reason, job.blocked_passes));
                continue;
            }
            // Likewise a job whose host mounts no such node allows: an admin's allow-list,
            // not the jobs behind it, is what lets it start.
            if !job.mounts.is_empty()
                && let Some(text) = pool.mounts_refused(job)
            {
                out.waiting.push(wait(job, pos, PendingReason::new(PendingKind::Mount, text), job.blocked_passes));
                continue;
            }
            if let Some(at) = first_blocked {
                if tried_past >= q.backfill_window {
                    let n = q.backfill_window;
                    let s = if n == 1 { "" } else { "s" };
                    let text = format!(
                        "priority: beyond the backfill window: the queue tries {n} job{s} past the first that \
                         cannot start (position {at})"
                    );
                    let reason = PendingReason::new(PendingKind::Priority, text);
                    stop = Some(Stop { first_position: pos, reason, current: Some(job) });
                    break;
                }
                tried_past += 1;
            }
            let end = now.saturating_add(self.limit(job));
            let delays = |reserved_pos: u32| {
                let text = format!("backfill: would delay the reserved start of the job at position {reserved_pos}");
                wait(job, pos, PendingReason::new(PendingKind::Backfill, text), job.blocked_passes)
            };
            // Nothing changed since a job of this shape ending no later was refused: this one
            // is refused the same way, without placing it twice.
            if reservation.is_some()
                && !pool::narrow(job)
                && delaying.iter().any(|&(shape, until)| shape == pool::shape(job) && end >= until)
            {
                out.waiting.push(delays(reserved_pos));
                continue;
            }
            let why = match pool.place(job) {
                Ok(mut chosen) => {
                    if let Some(r) = reservation.as_mut()
                        && !r.admits(&pool, &chosen, end)
                    {
                        // Placed where it would delay the reservation: try away from its nodes.
                        pool.uncommit(&chosen);
                        chosen = pool.find(job, &r.nodes);
                        if chosen.len() < job.kernel_count() as usize {
                            if !pool::narrow(job) {
                                delaying.push((pool::shape(job), end));
                            }
                            out.waiting.push(delays(reserved_pos));
                            continue;
                        }
                        pool.commit(&chosen);
                    }
                    delaying.clear();
                    order.started(job);
                    book.started(job);
                    let bindings: Vec<Binding> = chosen.into_iter().map(|(_, b)| b).collect();
                    if backfill {
                        started.push((end, job.id, bindings.clone()));
                    }
                    out.starts.push(Start { job: job.id, bindings });
                    continue;
                }
                Err(why) => why,
            };
            // Borrowed work of other projects is preempted first, even in a queue without
            // preemption (then requeued at once); a borrowing job never preempts.
            let policy = q.preemption.or(Some(BORROW_RECLAIM).filter(|_| any_borrowed));
            if let Some(policy) = policy
                && let Some(plan) = preempt::plan(
                    &pool,
                    job,
                    self.running,
                    &victims,
                    preempt::Rules { policy, by_priority: q.preemption.is_some(), now },
                )
            {
                let mut names = Vec::new();
                for &v in &plan.victims {
                    let prio = self.running.iter().find(|r| r.id == v).map_or(0, |r| r.priority);
                    names.push(format!("{v} (priority {prio})"));
                    victims.insert(v);
                    out.preemptions.push(Preempt { victim: v, for_job: job.id, action: policy.action });
                }
                for &i in &plan.nodes {
                    pool.hold(i);
                }
                delaying.clear();
                let s = if names.len() == 1 { "" } else { "s" };
                let text = format!("preempting: stopping job{s} {} to free {}", names.join(", "), plan.frees);
                out.waiting.push(wait(job, pos, PendingReason::new(PendingKind::Preempting, text), job.blocked_passes));
                continue;
            }
            let resources = |text: String| PendingReason::new(PendingKind::Resources, text);
            match q.head_of_line {
                HeadOfLine::Strict => {
                    blocker = Some((job.id, pos));
                    out.waiting.push(wait(
                        job,
                        pos,
                        resources(format!("resources: {why}")),
                        job.blocked_passes.saturating_add(1),
                    ));
                }
                // `SkipAfter(n)`: the job holds the line for n passes, then steps aside and
                // only waits for itself, so one huge job cannot stall a queue forever.
                HeadOfLine::SkipAfter(n) => {
                    first_blocked.get_or_insert(pos);
                    let blocks = job.blocked_passes < n;
                    if blocks {
                        blocker = Some((job.id, pos));
                    }
                    let passes = if blocks { job.blocked_passes.saturating_add(1) } else { job.blocked_passes };
                    out.waiting.push(wait(job, pos, resources(format!("resources: {why}")), passes));
                }
                HeadOfLine::Backfill => {
                    first_blocked.get_or_insert(pos);
                    if reservation.is_some() || tries >= MAX_RESERVATION_TRIES {
                        out.waiting.push(wait(job, pos, resources(format!("resources: {why}")), job.blocked_passes));
                        continue;
                    }
                    tries += 1;
                    reservation = reserve(&pool, job, self.holdings(&started), now);
                    reserved_pos = pos;
                    let mut w = match &reservation {
                        Some(r) => {
                            let text = format!("resources: {why}; {}", r.describe(&pool, now));
                            let mut w = wait(job, pos, resources(text), job.blocked_passes.saturating_add(1));
                            w.expected_start = Some(r.start);
                            w
                        }
                        None => {
                            let text = format!(
                                "resources: {why}; no reservation: it does not fit even when every running job has ended"
                            );
                            wait(job, pos, resources(text), job.blocked_passes)
                        }
                    };
                    w.position = pos;
                    out.waiting.push(w);
                }
            }
        }
        if let Some(stop) = stop {
            untried(&mut order, stop, out);
        }
        self.borrow(borrowers, blocker.is_some() || reservation.is_some(), &mut pool, book, out);
    }

    /// The second round: jobs that can start only by borrowing beyond their quota take what
    /// idle capacity is left. They never preempt, never pass a blocked head or a backfill
    /// reservation, and their starts are marked borrowed (preempted first later).
    fn borrow(
        &self,
        borrowers: Vec<(&PendingJob, u32)>,
        held_back: bool,
        pool: &mut Pool,
        book: &mut Book,
        out: &mut PassOutput,
    ) {
        let borrow_wait = |why: String| PendingReason::new(PendingKind::Quota, why);
        for (job, pos) in borrowers {
            let admitted = book.admits(job);
            let why = match admitted {
                Err(text) => text,
                Ok(_) if held_back => {
                    "quota: over its quota, may only borrow idle capacity, and the queue is held back".into()
                }
                Ok(borrowing) => match pool.place(job) {
                    Ok(chosen) => {
                        book.started(job);
                        if borrowing {
                            out.borrowed.push(job.id);
                        }
                        out.starts.push(Start { job: job.id, bindings: chosen.into_iter().map(|(_, b)| b).collect() });
                        continue;
                    }
                    Err(why) => format!("quota: over its quota, borrowing waits for idle capacity ({why})"),
                },
            };
            out.waiting.push(wait(job, pos, borrow_wait(why), job.blocked_passes));
        }
    }
}
