//! Property: with exact time limits and no new arrivals, a job that a pass reserved a start
//! for never starts later than that start, however many reservations the queue makes, unless
//! a job ahead of it in the queue started since (EASY's promise, kept by every reservation
//! of the walk against the jobs behind it; a job ahead still goes first when it can). The
//! queue's first reservation never moves later either; a later one may, when a reservation
//! ahead of it takes other nodes in a later pass (reservations are made again each pass,
//! and one queued behind another on shared nodes follows it). The same holds for skip-after,
//! which reserves the jobs past the wait bound (here: every job, the bound being 0).

mod support;

use std::collections::BTreeMap;

use berth_model::{JobId, ResourceRequest};
use berth_sched::{HeadOfLine, Millis, NodeLedger, PassInput, PendingJob, QueueConfig, RunningJob, schedule};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

fn pending(id: JobId, cpus: u32, nodes: u32, hours: i64) -> PendingJob {
    let spec = support::parse_job(id, &format!("cpus={cpus} nodes={nodes} limit={hours}h"));
    PendingJob { request: ResourceRequest { mem_bytes: GIB, ..spec.request }, ..spec }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_reserved_job_never_starts_later_than_its_reservation(
        nodes in prop::collection::vec(1u32..=8, 1..4),
        jobs in prop::collection::vec((1u32..=8, 1u32..=2, 1i64..=5), 1..12),
        reservations in 1u32..=4,
        head in 0usize..3,
    ) {
        let mut ledgers: Vec<NodeLedger> = nodes
            .iter()
            .enumerate()
            .map(|(i, &c)| NodeLedger::new(format!("n{i}"), "default", support::topology(c, 64 * GIB, 0, 1, false)))
            .collect();
        // Skip-after reserves only jobs past the bound: a bound of 0 puts every job there.
        let (head_of_line, reserve_after_ms) =
            [(HeadOfLine::Backfill, None), (HeadOfLine::SkipAfter(0), Some(0)), (HeadOfLine::SkipAfter(1), Some(0))][head];
        let queues =
            [QueueConfig { head_of_line, reservations, reserve_after_ms, ..QueueConfig::new("default") }];
        let mut waiting: Vec<PendingJob> = jobs
            .iter()
            .enumerate()
            .map(|(k, &(c, n, h))| pending(k as JobId + 1, c, n, h))
            .collect();
        let mut running: Vec<(RunningJob, Millis)> = Vec::new();
        // Per job: its latest reserved start, when it was made, and the jobs then ahead of it.
        let mut promised: BTreeMap<JobId, (Millis, Millis, Vec<JobId>)> = BTreeMap::new();
        let mut started_at: BTreeMap<JobId, Millis> = BTreeMap::new();
        let excused = |started_at: &BTreeMap<JobId, Millis>, made: Millis, ahead: &[JobId]| {
            ahead.iter().any(|a| started_at.get(a).is_some_and(|&t| t > made))
        };
        let mut now: Millis = 0;
        for _ in 0..200 {
            let run: Vec<RunningJob> = running.iter().map(|(r, _)| r.clone()).collect();
            let input = PassInput {
                queues: &queues,
                nodes: &ledgers,
                pending: &waiting,
                running: &run,
                fair_share: &berth_sched::NO_FAIR_SHARE,
                quotas: &berth_sched::NO_QUOTAS,
                now,
            };
            let out = schedule(&input);
            for s in &out.starts {
                started_at.insert(s.job, now);
            }
            for s in &out.starts {
                if let Some((t, made, ahead)) = promised.get(&s.job) {
                    prop_assert!(now <= *t || excused(&started_at, *made, ahead), "job {} starts at {now}, reserved for {t}", s.job);
                }
                let j = waiting.iter().find(|j| j.id == s.job).unwrap().clone();
                for b in &s.bindings {
                    let l = ledgers.iter_mut().find(|l| l.name() == b.node).unwrap();
                    l.allocate(b).unwrap();
                }
                let end = now + j.time_limit_ms.unwrap();
                running.push((support::running_job(&j, s.bindings.clone(), now, false), end));
            }
            waiting.retain(|j| !out.starts.iter().any(|s| s.job == j.id));
            // The latest promise counts; the first reservation's may only come forward.
            let first = out.waiting.iter().filter(|w| w.expected_start.is_some()).map(|w| w.job).min();
            for w in &out.waiting {
                match w.expected_start {
                    Some(t) => {
                        if let Some((before, made, ahead)) = promised.get(&w.job).filter(|_| Some(w.job) == first) {
                            prop_assert!(t <= *before || excused(&started_at, *made, ahead),
                                "job {}: reserved for {before}, then for {t}", w.job);
                        }
                        let ahead = waiting.iter().map(|j| j.id).filter(|&id| id < w.job).collect();
                        promised.insert(w.job, (t, now, ahead));
                    }
                    None => {
                        promised.remove(&w.job);
                    }
                }
            }
            let Some(next) = running.iter().map(|&(_, end)| end).min() else { break };
            now = next;
            for (r, _) in running.iter().filter(|&&(_, end)| end == now) {
                for b in &r.bindings {
                    ledgers.iter_mut().find(|l| l.name() == b.node).unwrap().release(b);
                }
            }
            running.retain(|&(_, end)| end != now);
        }
    }
}
