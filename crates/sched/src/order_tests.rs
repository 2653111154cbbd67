//! Unit tests of the orderings and the fair-share factor.

use std::collections::BTreeSet;

use super::*;
use crate::order::{Order, Source};
use crate::orderings::Running;
use crate::pending_set::PendingSet;
use crate::{FairShare, RunningJob, decay_usage, fair_share_factor};
use berth_model::ResourceRequest;

fn job(id: JobId, user: &str, project: &str, prio: i32, gpu_milli: u64) -> PendingJob {
    let request = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli };
    PendingJob {
        priority: prio,
        user: user.into(),
        project: project.into(),
        ..crate::test_support::pending(id, request)
    }
}

/// The ids of `jobs` walked over a [`PendingSet`] by the ordering's cursor (`orderings/`);
/// `start`: which of them start (DRF charges them).
fn from_set(
    ordering: Ordering,
    jobs: &[PendingJob],
    running: &[&RunningJob],
    fs: &FairShare,
    totals: [u64; 3],
    cutoff: Option<Millis>,
    start: impl Fn(JobId) -> bool,
) -> Vec<JobId> {
    let set: PendingSet = jobs.iter().cloned().collect();
    from(&set, ordering, running, fs, totals, cutoff, start)
}

fn from(
    set: &PendingSet,
    ordering: Ordering,
    running: &[&RunningJob],
    fs: &FairShare,
    totals: [u64; 3],
    cutoff: Option<Millis>,
    start: impl Fn(JobId) -> bool,
) -> Vec<JobId> {
    let Some((name, q)) = set.queues.iter().next() else { return Vec::new() };
    let source = Source { set, name, q };
    let las = &crate::DEFAULT_LAS_THRESHOLDS;
    let mut o = Order::new(ordering, las, source, Running::List(running), fs, totals, cutoff);
    let mut out = Vec::new();
    while let Some(j) = o.next() {
        out.push(j.id);
        if start(j.id) {
            o.started(j);
        }
    }
    out
}

/// The naive order (the oracle) of `jobs`, checked against the set's.
fn both(
    ordering: Ordering,
    jobs: &[PendingJob],
    running: &[&RunningJob],
    fs: &FairShare,
    totals: [u64; 3],
    start: impl Fn(JobId) -> bool + Copy,
) -> Vec<JobId> {
    let refs: Vec<&PendingJob> = jobs.iter().collect();
    let naive = walk(ordering, &crate::DEFAULT_LAS_THRESHOLDS, &refs, running, fs, totals, None, start);
    assert_eq!(
        naive,
        from_set(ordering, jobs, running, fs, totals, None, start),
        "{ordering:?}: the set's order differs"
    );
    naive
}

#[test]
fn decay_halves_per_half_life() {
    assert_eq!(decay_usage(100.0, 0, 1000), 100.0);
    assert_eq!(decay_usage(100.0, 1000, 1000), 50.0);
    assert_eq!(decay_usage(100.0, 2000, 1000), 25.0);
    assert_eq!(decay_usage(100.0, 500, 0), 100.0, "no half-life: no decay");
    assert_eq!(decay_usage(100.0, -5, 1000), 100.0, "time never runs backwards");
    assert!((decay_usage(100.0, 500, 1000) - 70.710678).abs() < 1e-5);
}

#[test]
fn factor_is_two_to_the_minus_usage_over_shares() {
    assert_eq!(fair_share_factor(0.0, 0.5), 1.0);
    assert_eq!(fair_share_factor(0.5, 0.5), 0.5);
    assert_eq!(fair_share_factor(1.0, 0.5), 0.25);
    assert_eq!(fair_share_factor(0.3, 0.0), 0.0, "no share: last");
    assert_eq!(fair_share_factor(f64::NAN, 0.5), 1.0, "garbage usage counts as none");
}

#[test]
fn factors_weigh_projects_then_users() {
    let mut fs = FairShare::default();
    fs.project_weights.insert("big".into(), 3.0);
    fs.usage_by_project.insert("big".into(), 60.0);
    fs.usage_by_project.insert("small".into(), 40.0);
    fs.usage_by_user.insert("a".into(), 10.0);
    fs.usage_by_user.insert("b".into(), 30.0);
    let pairs: BTreeSet<(&str, &str)> = [("big", "a"), ("big", "b"), ("small", "c")].into_iter().collect();
    let f = fair_share_factors(&pairs, &fs);
    // big: S = 3/4, U = 0.6 -> 2^-0.8; small: S = 1/4, U = 0.4 -> 2^-1.6.
    let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
    assert!(close(f[&("big", "a")].0, (-0.8f64).exp2()));
    assert!(close(f[&("small", "c")].0, (-1.6f64).exp2()));
    // Within big: a has 1/4 of the usage, b 3/4, each a 1/2 share.
    assert!(close(f[&("big", "a")].1, (-0.5f64).exp2()));
    assert!(close(f[&("big", "b")].1, (-1.5f64).exp2()));
    assert_eq!(f[&("small", "c")].1, 1.0);
}

#[test]
fn fifo_lifo_and_bands() {
    let jobs = [job(1, "a", "a", 0, 0), job(2, "a", "a", 5, 0), job(3, "a", "a", 0, 0), job(4, "a", "a", 5, 0)];
    let fs = FairShare::default();
    assert_eq!(both(Ordering::Fifo, &jobs, &[], &fs, [1, 1, 1], |_| false), [2, 4, 1, 3]);
    assert_eq!(both(Ordering::Lifo, &jobs, &[], &fs, [1, 1, 1], |_| false), [4, 2, 3, 1]);
}

#[test]
fn drf_alternates_by_dominant_share() {
    // a asks for GPUs (dominant: gpu 1/4 each), b for CPUs only (dominant: cpu 1/16 each).
    let jobs: Vec<PendingJob> = vec![
        job(1, "a", "a", 0, 1000),
        job(2, "a", "a", 0, 1000),
        job(3, "a", "a", 0, 1000),
        job(4, "b", "b", 0, 0),
        job(5, "b", "b", 0, 0),
        job(6, "b", "b", 0, 0),
    ];
    let fs = FairShare::default();
    let totals = [16_000, 64 << 30, 4000];
    // Both start at 0: job 1 (lowest id); a is at 1/4, so b runs until it passes 1/4
    // (b: 1/16, 2/16, 3/16 after 4, 5, 6), then a again.
    assert_eq!(both(Ordering::Drf, &jobs, &[], &fs, totals, |_| true), [1, 4, 5, 6, 2, 3]);
    // Nothing starts: shares stay 0 and ties go by job id, which is FIFO.
    assert_eq!(both(Ordering::Drf, &jobs, &[], &fs, totals, |_| false), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn fair_share_puts_the_lighter_project_first() {
    let jobs = [job(1, "a", "heavy", 0, 0), job(2, "b", "light", 0, 0), job(3, "a", "heavy", 1, 0)];
    let mut fs = FairShare::default();
    fs.usage_by_project.insert("heavy".into(), 100.0);
    assert_eq!(both(Ordering::FairShare, &jobs, &[], &fs, [1, 1, 1], |_| false), [3, 2, 1]);
}

mod set_vs_list {
    //! The set's cursors (`orderings/`) against the naive sorts (the oracle), on random queues.
    use proptest::prelude::*;

    use super::*;
    use berth_model::{Binding, GpuShare};

    fn running(id: JobId, user: &str, project: &str, cpu_milli: u64, gpus: u32) -> RunningJob {
        let gpus = (0..gpus).map(|index| GpuShare { uuid: String::new(), index, milli: 1000 }).collect();
        RunningJob {
            id,
            queue: "default".into(),
            priority: 0,
            user: user.into(),
            project: project.into(),
            bindings: vec![Binding { node: "n".into(), cpu_milli, mem_bytes: 1 << 30, gpus, ..Binding::default() }],
            started_at: 0,
            time_limit_ms: None,
            estimate_ms: None,
            attained: 0,
            submitted_at: 0,
            preemptible: false,
            borrowed: false,
        }
    }

    proptest! {
        #[test]
        fn same_order(
            specs in prop::collection::vec((0i32..3, 0usize..4, 0usize..3, 0u64..3), 0..40),
            removed in prop::collection::vec(any::<bool>(), 40),
            starts in prop::collection::vec(any::<bool>(), 80),
            usage in prop::collection::vec(0u8..4, 7),
            held in prop::collection::vec((0usize..5, 0usize..3, 0u64..4, 0u32..3), 0..5),
            ordering in 0..Ordering::ALL.len(),
            // Per job: estimate (minutes, 0: none), submit hour, attained device-hours.
            extra in prop::collection::vec((0i64..4, 0i64..6, 0u64..12), 40),
            cutoff in prop::option::of(0i64..6),
        ) {
            let users = ["ann", "bob", "cy", "dee", "eve"];
            let projects = ["p", "q", "r"];
            let mut set = PendingSet::new();
            let mut jobs = Vec::new();
            for (k, &(prio, u, p, gpus)) in specs.iter().enumerate() {
                let (est, hour, attained) = extra[k];
                let j = PendingJob {
                    estimate_ms: (est > 0).then_some(est * 600_000),
                    time_limit_ms: (est % 2 == 1).then_some(3_600_000),
                    submitted_at: hour * 3_600_000,
                    attained: attained * 3_600,
                    ..job(k as JobId + 1, users[u], projects[p], prio, gpus * 500)
                };
                set.insert(j.clone());
                // Some leave again (started or cancelled): the set's indexes must forget them.
                if removed[k] {
                    set.remove(j.id);
                } else {
                    jobs.push(j);
                }
            }
            let mut fs = FairShare::default();
            for (k, &x) in usage.iter().enumerate() {
                let x = x as f64 * 10.0;
                match k {
                    0..4 => fs.usage_by_user.insert(users[k].into(), x),
                    _ => fs.usage_by_project.insert(projects[k - 4].into(), x),
                };
            }
            let run: Vec<RunningJob> = held
                .iter()
                .enumerate()
                .map(|(k, &(u, p, c, g))| running(1000 + k as JobId, users[u], projects[p], c * 1000, g))
                .collect();
            let run: Vec<&RunningJob> = run.iter().collect();
            let ordering = Ordering::ALL[ordering];
            let totals = [16_000, 64 << 30, 4000];
            let start = |id: JobId| starts[id as usize % starts.len()];
            let refs: Vec<&PendingJob> = jobs.iter().collect();
            let cutoff_ms = cutoff.map(|h| h * 3_600_000);
            let las = &crate::DEFAULT_LAS_THRESHOLDS;
            let full = walk(ordering, las, &refs, &run, &fs, totals, cutoff_ms, start);
            let from_set = from(&set, ordering, &run, &fs, totals, cutoff_ms, start);
            prop_assert_eq!(&full, &from_set);
            // Every job comes once; under a wait bound the jobs past it come first, oldest
            // first, so the oldest waiting job is always at the head.
            let mut once = full.clone();
            once.sort_unstable();
            once.dedup();
            prop_assert_eq!(once.len(), jobs.len());
            if let Some(h) = cutoff {
                let mut aged: Vec<&PendingJob> = jobs.iter().filter(|j| j.submitted_at <= h * 3_600_000).collect();
                aged.sort_by_key(|j| (j.submitted_at, j.id));
                let ids: Vec<JobId> = aged.iter().map(|j| j.id).collect();
                prop_assert_eq!(&full[..ids.len()], &ids[..]);
            }
        }
    }
}
