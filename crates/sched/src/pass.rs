//! One scheduling pass: per queue, order the pending jobs (priority, then FIFO), walk them
//! placing each on working copies of the ledgers, and apply the head-of-line policy.

use std::collections::BTreeMap;

use berth_model::{JobId, PendingKind, PendingReason};

use crate::ledger::NodeLedger;
use crate::place::{Scoring, place};
use crate::{HeadOfLine, PassInput, PassOutput, PendingJob, QueueConfig, Start, Waiting};

/// Runs one pass. Pure: the caller's ledgers are not touched; commit the returned starts with
/// [`NodeLedger::allocate`] and store each waiting job's reason, position and `blocked_passes`.
///
/// Queues are handled in the order configured (a repeated name counts once), then jobs of
/// unknown queues by queue name. Within a queue, starts come in placement order and waiting
/// jobs in position order.
pub fn schedule(input: &PassInput) -> PassOutput {
    let mut by_queue: BTreeMap<&str, Vec<&PendingJob>> = BTreeMap::new();
    for job in input.pending {
        by_queue.entry(job.queue.as_str()).or_default().push(job);
    }
    for jobs in by_queue.values_mut() {
        // Priority bands (higher first), then submit order; job ids are unique, so the order
        // does not depend on the order of the input.
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
    }
    let mut out = PassOutput::default();
    for q in input.queues {
        let Some(jobs) = by_queue.remove(q.name.as_str()) else { continue };
        let mut nodes: Vec<NodeLedger> = input.nodes.iter().filter(|l| l.queue() == q.name).cloned().collect();
        nodes.sort_by(|a, b| a.name().cmp(b.name()));
        run_queue(q, &mut nodes, &jobs, &mut out);
    }
    for (name, jobs) in by_queue {
        let reason = PendingReason::new(PendingKind::Queue, format!("queue `{name}` does not exist"));
        wait_all(&jobs, reason, &mut out);
    }
    out
}

/// Every job waits for the same reason, keeping its `blocked_passes`.
fn wait_all(jobs: &[&PendingJob], reason: PendingReason, out: &mut PassOutput) {
    for (pos, job) in jobs.iter().enumerate() {
        out.waiting.push(Waiting {
            expected_start: None,
            job: job.id,
            position: pos as u32 + 1,
            reason: reason.clone(),
            blocked_passes: job.blocked_passes,
        });
    }
}

fn run_queue(q: &QueueConfig, nodes: &mut [NodeLedger], jobs: &[&PendingJob], out: &mut PassOutput) {
    if !nodes.iter().any(NodeLedger::schedulable) {
        let reason = PendingReason::new(PendingKind::NoNodes, format!("no ready node in queue {}", q.name));
        wait_all(jobs, reason, out);
        return;
    }
    // The job that holds the rest of the queue back, with its position.
    let mut blocker: Option<(JobId, u32)> = None;
    for (pos, job) in jobs.iter().enumerate() {
        let position = pos as u32 + 1;
        if let Some((id, at)) = blocker {
            out.waiting.push(Waiting {
                expected_start: None,
                job: job.id,
                position,
                reason: PendingReason::new(
                    PendingKind::Priority,
                    format!("priority: waiting behind job {id} (position {at})"),
                ),
                blocked_passes: job.blocked_passes,
            });
            continue;
        }
        match place(nodes, job, Scoring::default()) {
            Ok(bindings) => out.starts.push(Start { job: job.id, bindings }),
            Err(why) => {
                // `SkipAfter(n)`: the job holds the line for n passes, then steps aside and
                // only waits for itself, so one huge job cannot stall a queue forever.
                let blocks = match q.head_of_line {
                    HeadOfLine::Strict => true,
                    HeadOfLine::SkipAfter(n) => job.blocked_passes < n,
                    // TODO(issue 3): EASY backfill with reservations; strict until then.
                    HeadOfLine::Backfill => true,
                };
                if blocks {
                    blocker = Some((job.id, position));
                }
                out.waiting.push(Waiting {
                    expected_start: None,
                    job: job.id,
                    position,
                    reason: PendingReason::new(PendingKind::Resources, format!("resources: {why}")),
                    blocked_passes: if blocks { job.blocked_passes.saturating_add(1) } else { job.blocked_passes },
                });
            }
        }
    }
}
