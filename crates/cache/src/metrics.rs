//! `/metrics` in the Prometheus text format: per-bucket counters from the store plus the
//! node's request counters. Written by hand: a dozen families do not need a metrics crate.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::BucketStats;

/// Node-wide counters the HTTP layer bumps (relaxed atomics: they are statistics).
#[derive(Debug, Default)]
pub struct NodeCounters {
    pub forwarded: AtomicU64,
    pub forward_errors: AtomicU64,
    pub auth_failures: AtomicU64,
    /// Requests the fast path answered without hyper (`server/fast.rs`); not on `/metrics`,
    /// whose text stays as it was: for tests and debugging.
    pub fast_path: AtomicU64,
}

impl NodeCounters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The memory tier of small objects (see `hot`).
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStats {
    pub used: u64,
    pub limit: u64,
    pub hits: u64,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Renders the exposition text.
pub fn render(buckets: &[BucketStats], used: u64, capacity: u64, memory: MemoryStats, node: &NodeCounters) -> String {
    let mut s = String::new();
    type Field = fn(&BucketStats) -> u64;
    let families: [(&str, &str, &str, Field); 8] = [
        ("berth_cache_hits_total", "counter", "GETs answered from this node's disk", |b| b.hits),
        ("berth_cache_misses_total", "counter", "GETs of objects this node does not hold", |b| b.misses),
        ("berth_cache_evictions_total", "counter", "objects evicted", |b| b.evictions),
        ("berth_cache_evicted_bytes_total", "counter", "bytes evicted", |b| b.evicted_bytes),
        ("berth_cache_puts_total", "counter", "objects stored", |b| b.puts),
        ("berth_cache_put_bytes_total", "counter", "bytes stored", |b| b.put_bytes),
        ("berth_cache_objects", "gauge", "objects held", |b| b.objects),
        ("berth_cache_bytes", "gauge", "bytes of object data held", |b| b.bytes),
    ];
    for (name, kind, help, f) in families {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for b in buckets {
            let _ = writeln!(s, "{name}{{bucket=\"{}\"}} {}", escape(&b.bucket), f(b));
        }
    }
    let _ = writeln!(s, "# HELP berth_cache_quota_bytes bucket quota\n# TYPE berth_cache_quota_bytes gauge");
    for b in buckets.iter().filter(|b| b.quota.is_some()) {
        let _ = writeln!(s, "berth_cache_quota_bytes{{bucket=\"{}\"}} {}", escape(&b.bucket), b.quota.unwrap_or(0));
    }
    let node_gauges = [
        ("berth_cache_used_bytes", "gauge", "bytes of object data on this node", used),
        ("berth_cache_capacity_bytes", "gauge", "capacity of this node", capacity),
        ("berth_cache_memory_bytes", "gauge", "bytes of small objects also kept in memory", memory.used),
        ("berth_cache_memory_limit_bytes", "gauge", "bound of the memory tier (--memory)", memory.limit),
        ("berth_cache_memory_hits_total", "counter", "GETs answered from memory (also counted as hits)", memory.hits),
        (
            "berth_cache_forwarded_total",
            "counter",
            "requests forwarded to the key's owner",
            node.forwarded.load(Ordering::Relaxed),
        ),
        (
            "berth_cache_forward_errors_total",
            "counter",
            "forwards whose owner did not answer (served as misses)",
            node.forward_errors.load(Ordering::Relaxed),
        ),
        (
            "berth_cache_auth_failures_total",
            "counter",
            "requests refused for a missing or bad token",
            node.auth_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, v) in node_gauges {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_per_bucket_series() {
        let b = BucketStats {
            bucket: "ds\"1".into(),
            objects: 2,
            bytes: 10,
            quota: Some(100),
            hits: 3,
            misses: 4,
            evictions: 5,
            evicted_bytes: 6,
            puts: 7,
            put_bytes: 8,
        };
        let t = render(&[b], 10, 1000, MemoryStats { used: 4, limit: 8, hits: 9 }, &NodeCounters::default());
        for line in [
            "berth_cache_hits_total{bucket=\"ds\\\"1\"} 3",
            "berth_cache_memory_bytes 4",
            "berth_cache_memory_limit_bytes 8",
            "berth_cache_memory_hits_total 9",
            "berth_cache_misses_total{bucket=\"ds\\\"1\"} 4",
            "berth_cache_evicted_bytes_total{bucket=\"ds\\\"1\"} 6",
            "berth_cache_quota_bytes{bucket=\"ds\\\"1\"} 100",
            "berth_cache_capacity_bytes 1000",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line} in\n{t}");
        }
    }
}
