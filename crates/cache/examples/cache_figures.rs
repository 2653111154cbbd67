//! Prints the Maglev and eviction figures of docs/perf.md:
//! `cargo run --release -p berth-cache --example cache_figures`.
//!
//! - Maglev with M = 65537 for 16…1000 nodes: max/mean slots per node, max/mean of 10⁷ real
//!   keys per node, share of slots moved when one node leaves (vs the ideal 1/N), build time.
//! - Hit ratio of LRU, FIFO, S3-FIFO and SIEVE on shuffled multi-epoch reads of a dataset
//!   larger than the cache.

use std::time::Instant;

use berth_cache::maglev::{Maglev, Member, key_hash, table_size_for};
use berth_cache::sim::{Fifo, Lru, Policy, S3Fifo, SieveSim, hit_ratio, shuffled_epochs};

fn members(n: usize) -> Vec<Member> {
    (0..n).map(|i| Member { name: format!("http://10.{}.{}.1:7171", i / 250, i % 250), weight: 1 }).collect()
}

fn main() {
    maglev_table("M = 65537", |_| 65_537);
    maglev_table("M = table_size_for(N) (the default: prime ≥ max(65537, 1000 × N))", table_size_for);
    eviction();
}

fn maglev_table(title: &str, size: fn(usize) -> usize) {
    println!("## Maglev, {title}\n");
    println!("| nodes | max/mean slots | max/mean of 1e7 keys | moved when one leaves | ideal 1/N | build |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in [16, 64, 100, 256, 500, 1000] {
        let t0 = Instant::now();
        let m = size(n);
        let t = Maglev::with_table_size(members(n), m);
        let build = t0.elapsed();
        let slots = t.slots_per_member();
        let mean = m as f64 / n as f64;
        let max_slots = *slots.iter().max().unwrap() as f64 / mean;
        let mut keys = vec![0u64; n];
        let nkeys = 10_000_000u64;
        for k in 0..nkeys {
            keys[t.owner_index(key_hash("imagenet", format!("train/{k:08}.jpg").as_bytes())).unwrap()] += 1;
        }
        let max_keys = *keys.iter().max().unwrap() as f64 / (nkeys as f64 / n as f64);
        // the mean over several leaving nodes
        let leavers = [0, n / 3, n / 2, n - 1];
        let mut moved = 0.0;
        for &g in &leavers {
            let mut rest = members(n);
            rest.remove(g);
            let u = Maglev::with_table_size(rest, m);
            moved += t.slot_owners().zip(u.slot_owners()).filter(|(a, b)| a != b).count() as f64 / m as f64;
        }
        moved /= leavers.len() as f64;
        println!(
            "| {n} | {max_slots:.4} | {max_keys:.3} | {:.4} | {:.4} | {:.2} ms |",
            moved,
            1.0 / n as f64,
            build.as_secs_f64() * 1e3
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
