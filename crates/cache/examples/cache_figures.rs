//! Prints the Maglev and eviction figures of docs/perf.md:
//! `cargo run --release -p berth-cache --example cache_figures`.
//!
//! - Maglev for 16…1000 nodes, with M = 65537, M = prime ≥ 100 × N and the default (prime ≥
//!   max(65537, 1000 × N)): max/mean slots per node with all up and with one down, max/mean of
//!   10⁷ real keys per node, share of slots moved when one node goes down (vs its own share and
//!   the ideal 1/N), moved back when it comes back, moved when a brand-new node joins as a
//!   later member (`seq`, the manager's way) and as part of the first generation (a full
//!   Maglev rebuild), and build times, also for a table whose every member joined one by one.
//! - Hit ratio of LRU, FIFO, S3-FIFO and SIEVE on shuffled multi-epoch reads of a dataset
//!   larger than the cache.

use std::time::{Duration, Instant};

use berth_cache::maglev::{Maglev, Member, MemberState, key_hash, next_prime, table_size_for};
use berth_cache::sim::{Fifo, Lru, Policy, S3Fifo, SieveSim, hit_ratio, shuffled_epochs};

fn members(n: usize) -> Vec<Member> {
    (0..n).map(|i| Member::up(format!("http://10.{}.{}.1:7171", i / 250, i % 250))).collect()
}

/// The same members, each joined one by one after the first (what a manager that saw the nodes
/// register one at a time pushes).
fn one_by_one(ms: Vec<Member>) -> Vec<Member> {
    ms.into_iter().enumerate().map(|(i, m)| m.with_seq(i as u64)).collect()
}

fn down(mut ms: Vec<Member>, i: usize) -> Vec<Member> {
    ms[i].state = MemberState::Down;
    ms
}

fn moved(a: &Maglev, b: &Maglev) -> f64 {
    a.slot_owners().zip(b.slot_owners()).filter(|(x, y)| x != y).count() as f64 / a.table_size() as f64
}

/// max/mean slots over the up members.
fn imbalance(t: &Maglev) -> f64 {
    let s = t.slots_per_member();
    let up: Vec<usize> = (0..s.len()).filter(|&i| t.members()[i].is_up()).map(|i| s[i]).collect();
    *up.iter().max().unwrap() as f64 / (t.table_size() as f64 / up.len() as f64)
}

/// The best of 2 builds.
fn timed(f: impl Fn() -> Maglev) -> (Maglev, Duration) {
    let t0 = Instant::now();
    let a = f();
    let d1 = t0.elapsed();
    let t1 = Instant::now();
    let _ = f();
    (a, d1.min(t1.elapsed()))
}

fn main() {
    let only_default = std::env::args().any(|a| a == "--default-only");
    if !only_default {
        maglev_table("M = 65537", |_| 65_537);
        maglev_table("M = first prime ≥ max(65537, 100 × N)", |n| next_prime((100 * n).max(65_537)));
    }
    maglev_table("M = table_size_for(N) (the default: prime ≥ max(65537, 1000 × N))", table_size_for);
    if !only_default {
        eviction();
    }
}

fn maglev_table(title: &str, size: fn(usize) -> usize) {
    println!("## Maglev, {title}\n");
    println!(
        "| nodes | M | max/mean slots | max/mean slots, one down | max/mean of 1e7 keys | moved when one goes down | its share | moved back when it returns | moved when a new node joins (later seq) | moved when it joins the first generation | ideal 1/N | max/mean, joined one by one | build | build, one down | build, joined one by one |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in [16, 64, 100, 256, 500, 1000] {
        let m = size(n);
        let (t, build) = timed(|| Maglev::with_table_size(members(n), m));
        let slots = t.slots_per_member();
        let max_slots = *slots.iter().max().unwrap() as f64 / (m as f64 / n as f64);
        let mut keys = vec![0u64; n];
        let nkeys = 10_000_000u64;
        for k in 0..nkeys {
            keys[t.owner_index(key_hash("imagenet", format!("train/{k:08}.jpg").as_bytes())).unwrap()] += 1;
        }
        let max_keys = *keys.iter().max().unwrap() as f64 / (nkeys as f64 / n as f64);
        // means over several leaving nodes
        let leavers = [0, n / 3, n / 2, n - 1];
        let (mut gone, mut share, mut back, mut bal, mut build_down) = (0.0, 0.0, 0.0, 0.0f64, Duration::ZERO);
        for &g in &leavers {
            let (u, d) = timed(|| Maglev::with_table_size(down(members(n), g), m));
            build_down = build_down.max(d);
            gone += moved(&t, &u);
            share += t.slot_owners().filter(|o| *o == t.members()[g].name).count() as f64 / m as f64;
            bal = bal.max(imbalance(&u));
            back += moved(&u, &Maglev::with_table_size(members(n), m));
        }
        let k = leavers.len() as f64;
        // a brand-new member: with a later seq it takes its share; in the first generation
        // the table is rebuilt over n + 1 names
        let mut later = members(n + 1);
        later[n].seq = 1;
        let joined = moved(&t, &Maglev::with_table_size(later, m));
        let rebuilt = moved(&t, &Maglev::with_table_size(members(n + 1), m));
        let (seq_t, seq_build) = timed(|| Maglev::with_table_size(one_by_one(members(n)), m));
        println!(
            "| {n} | {m} | {max_slots:.4} | {bal:.4} | {max_keys:.3} | {:.4} | {:.4} | {:.4} | {joined:.4} | {rebuilt:.4} | {:.4} | {:.4} | {:.1} ms | {:.1} ms | {:.1} ms |",
            gone / k,
            share / k,
            back / k,
            1.0 / n as f64,
            imbalance(&seq_t),
            build.as_secs_f64() * 1e3,
            build_down.as_secs_f64() * 1e3,
            seq_build.as_secs_f64() * 1e3
        );
    }
    println!();
}

fn eviction() {
    println!("## Eviction: shuffled epochs over a dataset larger than the cache\n");
    println!("| dataset / cache | epochs | LRU | FIFO | S3-FIFO | SIEVE |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let objects = 100_000u64;
    for ratio in [1.25f64, 1.5, 2.0, 4.0] {
        let cap = (objects as f64 / ratio) as usize;
        let trace = shuffled_epochs(objects, 10, 7);
        let r = |p: &mut dyn Policy| hit_ratio(p, &trace);
        println!(
            "| {ratio} | 10 | {:.3} | {:.3} | {:.3} | {:.3} |",
            r(&mut Lru::new(cap)),
            r(&mut Fifo::new(cap)),
            r(&mut S3Fifo::new(cap)),
            r(&mut SieveSim::new(cap))
        );
    }
}
