//! One scheduling pass: per queue, order the pending jobs (`order.rs`) and walk them, each
//! through the gates of `gates.rs` (quota, image, mounts, placement on the pass's working
//! ledgers, preemption, the head-of-line policy), recording each job's verdict; then the jobs
//! over quota that may borrow take what idle capacity is left.
//!
//! The walk stops early, leaving the rest of the queue untried ([`Untried`]): behind a job
//! that holds the line (strict, skip-after), and once `backfill_window` jobs were tried after
//! the first one that could not start. Jobs the walk never reaches cost an id each, so a
//! pass over a deep, blocked queue costs about as much as over a short one.

use std::collections::BTreeMap;

use berth_model::{JobId, PendingKind, PendingReason};

use crate::gates::{Running as Runs, Verdict, Walk};
use crate::ledger::NodeLedger;
use crate::order::{Order, Source};
use crate::orderings::Running;
use crate::pending_set::PendingSet;
use crate::pool::Pool;
use crate::quota::Book;
use crate::running_set::RunningSet;
use crate::words::Words;
use crate::{Ordering, PassInput, PassOutput, PendingJob, QueueConfig, RunningJob, Start, Untried, Waiting};

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
    // The pass over a set made of the input's jobs, the running jobs read from the input; the
    // untried jobs behind where a walk stopped are then listed.
    let set: PendingSet = input.pending.iter().cloned().collect();
    let mut out = run_pass(input, &set, None, Words::All);
    for run in &mut out.untried {
        if let Some(rest) = run.rest.take() {
            run.jobs.extend(set.rest_ids(&rest));
        }
    }
    out
}

/// [`schedule`] over the caller's persistent [`PendingSet`] and [`RunningSet`] instead of
/// `input.pending` and `input.running` (which must be empty): the same decisions, but a
/// queue's walk reads only the jobs it tries, the untried jobs behind where it stopped come
/// back as an [`crate::UntriedRest`] (expanded with [`PendingSet::rest_ids`]) rather than
/// listed, and backfill walks the running jobs' ends as kept rather than sorting them. The
/// pass after one job ends then costs the same with a thousand pending jobs or a million.
pub fn schedule_set(input: &PassInput, pending: &PendingSet, running: &RunningSet) -> PassOutput {
    set_pass(input, pending, running, Words::All)
}

/// [`schedule_set`] for a caller that reads no reason's message (`berth sim`): the same
/// starts, preemptions, positions, blocked counts, expected starts and reason kinds, but
/// every message is left empty, so the pass writes no text for the hundreds of jobs a deep
/// queue's walk tries.
pub fn schedule_set_kinds(input: &PassInput, pending: &PendingSet, running: &RunningSet) -> PassOutput {
    set_pass(input, pending, running, Words::KindsOnly)
}

fn set_pass(input: &PassInput, pending: &PendingSet, running: &RunningSet, words: Words) -> PassOutput {
    debug_assert!(input.pending.is_empty(), "the pending jobs come from the set");
    debug_assert!(input.running.is_empty(), "the running jobs come from the set");
    run_pass(input, pending, Some(running), words)
}

/// The pass over the set's queues; `kept`: the caller's running set, else `input.running`.
fn run_pass<'a>(
    input: &PassInput<'a>,
    pending: &'a PendingSet,
    kept: Option<&'a RunningSet>,
    words: Words,
) -> PassOutput {
    let mut by_queue: BTreeMap<&str, Source> =
        pending.queues.iter().map(|(name, q)| (&**name, Source { set: pending, name, q })).collect();
    let mut running: BTreeMap<&str, Vec<&RunningJob>> = BTreeMap::new();
    if kept.is_none() {
        for r in input.running {
            running.entry(r.queue.as_str()).or_default().push(r);
        }
        for list in running.values_mut() {
            // Same output whatever the input order (ids are unique: an unstable sort is one
            // order).
            list.sort_unstable_by_key(|r| r.id);
        }
    }
    let mut out = PassOutput::default();
    // Quotas span queues: a project's jobs in two queues share its limits.
    let mut book = Book::new(input.quotas);
    for q in input.queues {
        let Some(jobs) = by_queue.remove(q.name.as_str()) else { continue };
        assert!(
            pending.indexes(q.ordering),
            "the pending set does not index ordering {} of queue {}: make it with PendingSet::new",
            q.ordering,
            q.name
        );
        let mut nodes: Vec<&NodeLedger> = input.nodes.iter().filter(|l| l.queue() == q.name).collect();
        nodes.sort_by(|a, b| a.name().cmp(b.name()));
        // A kept queue is listed (in id order already) only where the walk reads the list.
        if let Some(list) = kept.and_then(|set| set.list(q)) {
            running.insert(q.name.as_str(), list);
        }
        let running = running.get(q.name.as_str()).map_or(&[][..], Vec::as_slice);
        let walk = Walk::new(input, q, Runs { list: running, kept }, nodes, jobs, words);
        run_queue(q, walk, words, &mut book, &mut out);
    }
    for (name, jobs) in by_queue {
        let reason = words.reason(PendingKind::Queue, || format!("queue `{name}` does not exist"));
        // By band, then id: fifo.
        let order = Order::new(Ordering::Fifo, &[], jobs, Running::List(&[]), input.fair_share, [0; 3], None);
        untried(&order, 1, reason, None, &mut out);
    }
    out
}

/// Records the job in hand (if any) and every job the order has left as untried, from
/// `first_position` on.
fn untried(order: &Order, first_position: u32, reason: PendingReason, current: Option<JobId>, out: &mut PassOutput) {
    let jobs: Vec<JobId> = current.into_iter().collect();
    out.untried.push(Untried { first_position, reason, jobs, rest: Some(order.rest()) });
}

fn wait(job: &PendingJob, position: u32, reason: PendingReason, blocked_passes: u32) -> Waiting {
    Waiting { job: job.id, position, reason, blocked_passes, expected_start: None }
}

/// Walks one queue: every job the walk reaches gets the verdict of its gates (`gates.rs`),
/// recorded here; then the jobs that may borrow get their round.
fn run_queue(q: &QueueConfig, mut walk: Walk, words: Words, book: &mut Book, out: &mut PassOutput) {
    if walk.pool.ready() == 0 {
        let reason = words.reason(PendingKind::NoNodes, || format!("no ready node in queue {}", q.name));
        untried(&walk.order, 1, reason, None, out);
        return;
    }
    let mut borrowers: Vec<(&PendingJob, u32)> = Vec::new();
    let mut pos = 0u32;
    while let Some(job) = walk.order.next() {
        pos += 1;
        match walk.judge(job, pos, book) {
            Verdict::Start(bindings) => out.starts.push(Start { job: job.id, bindings }),
            Verdict::Wait { reason, blocked, expected_start } => {
                let passes = if blocked { job.blocked_passes.saturating_add(1) } else { job.blocked_passes };
                out.waiting.push(Waiting { expected_start, ..wait(job, pos, reason, passes) });
            }
            Verdict::Preempt { victims, reason } => {
                out.preemptions.extend(victims);
                out.waiting.push(wait(job, pos, reason, job.blocked_passes));
            }
            Verdict::Borrow => borrowers.push((job, pos)),
            Verdict::Stop(reason) => {
                untried(&walk.order, pos, reason, Some(job.id), out);
                break;
            }
        }
    }
    let held_back = walk.held_back();
    borrow(borrowers, held_back, &mut walk.pool, book, words, out);
}

/// The second round: jobs that can start only by borrowing beyond their quota take what idle
/// capacity is left. They never preempt, never pass a blocked head or a backfill reservation,
/// and their starts are marked borrowed (preempted first later).
fn borrow(
    borrowers: Vec<(&PendingJob, u32)>,
    held_back: bool,
    pool: &mut Pool,
    book: &mut Book,
    words: Words,
    out: &mut PassOutput,
) {
    let borrow_wait = |why: String| PendingReason::new(PendingKind::Quota, why);
    for (job, pos) in borrowers {
        let admitted = book.admits(job);
        let why = match admitted {
            Err(over) => over.to_string(),
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
        let reason = match words {
            Words::All => borrow_wait(why),
            Words::KindsOnly => borrow_wait(String::new()),
        };
        out.waiting.push(wait(job, pos, reason, job.blocked_passes));
    }
}
