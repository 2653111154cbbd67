//! Unit tests of the orderings and the fair-share factor.

use std::collections::BTreeSet;

use super::*;
use crate::{FairShare, decay_usage};
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

fn ids(mut o: Order, start_all: bool) -> Vec<JobId> {
    let mut out = Vec::new();
    while let Some(j) = o.next() {
        out.push(j.id);
        if start_all {
            o.started(j);
        }
    }
    out
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
    let refs: Vec<&PendingJob> = jobs.iter().collect();
    let fs = FairShare::default();
    assert_eq!(ids(Order::new(Ordering::Fifo, refs.clone(), &[], &fs, [1, 1, 1]), false), [2, 4, 1, 3]);
    assert_eq!(ids(Order::new(Ordering::Lifo, refs, &[], &fs, [1, 1, 1]), false), [4, 2, 3, 1]);
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
    let refs: Vec<&PendingJob> = jobs.iter().collect();
    let fs = FairShare::default();
    let totals = [16_000, 64 << 30, 4000];
    // Both start at 0: job 1 (lowest id); a is at 1/4, so b runs until it passes 1/4
    // (b: 1/16, 2/16, 3/16 after 4, 5, 6), then a again.
    assert_eq!(ids(Order::new(Ordering::Drf, refs.clone(), &[], &fs, totals), true), [1, 4, 5, 6, 2, 3]);
    // Nothing starts: shares stay 0 and ties go by job id, which is FIFO.
    assert_eq!(ids(Order::new(Ordering::Drf, refs, &[], &fs, totals), false), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn fair_share_puts_the_lighter_project_first() {
    let jobs = [job(1, "a", "heavy", 0, 0), job(2, "b", "light", 0, 0), job(3, "a", "heavy", 1, 0)];
    let refs: Vec<&PendingJob> = jobs.iter().collect();
    let mut fs = FairShare::default();
    fs.usage_by_project.insert("heavy".into(), 100.0);
    assert_eq!(ids(Order::new(Ordering::FairShare, refs, &[], &fs, [1, 1, 1]), false), [3, 2, 1]);
}
