//! `/metrics` in the OpenMetrics text format (`prometheus-client`, as the manager and the
//! agents): per-bucket counters from the store plus the node's request counters.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::BucketStats;

/// The `Content-Type` of [`render`]'s text (the manager's and the agents' too).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

/// A bucket's name as a label value, escaped as the text format wants (`"`, `\\`, newline):
/// names are checked at creation (`a-z 0-9 . _ -`), but `buckets.json` is a file an operator
/// may edit, and the encoder writes values as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BucketName(String);

impl EncodeLabelValue for BucketName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

type ByBucket = [(&'static str, BucketName); 1];

fn by_bucket(b: &BucketStats) -> ByBucket {
    [("bucket", BucketName(b.bucket.clone()))]
}

/// A level as a gauge's value (which is signed).
fn level(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Renders the exposition text (OpenMetrics, as the manager's and the agents' `/metrics`):
/// the store's and the node's counters, copied into a registry made for this scrape.
pub fn render(buckets: &[BucketStats], used: u64, capacity: u64, memory: MemoryStats, node: &NodeCounters) -> String {
    let mut r = Registry::default();
    type Field = fn(&BucketStats) -> u64;
    // counters are named without `_total`, which the encoder adds
    let counters: [(&str, &str, Field); 6] = [
        ("berth_cache_hits", "GETs answered from this node's disk", |b| b.hits),
        ("berth_cache_misses", "GETs of objects this node does not hold", |b| b.misses),
        ("berth_cache_evictions", "objects evicted", |b| b.evictions),
        ("berth_cache_evicted_bytes", "bytes evicted", |b| b.evicted_bytes),
        ("berth_cache_puts", "objects stored", |b| b.puts),
        ("berth_cache_put_bytes", "bytes stored", |b| b.put_bytes),
    ];
    for (name, help, f) in counters {
        let family = Family::<ByBucket, Counter>::default();
        for b in buckets {
            family.get_or_create(&by_bucket(b)).inc_by(f(b));
        }
        r.register(name, help, family);
    }
    let gauges: [(&str, &str, Field); 2] = [
        ("berth_cache_objects", "objects held", |b| b.objects),
        ("berth_cache_bytes", "bytes of object data held", |b| b.bytes),
    ];
    for (name, help, f) in gauges {
        let family = Family::<ByBucket, Gauge>::default();
        for b in buckets {
            family.get_or_create(&by_bucket(b)).set(level(f(b)));
        }
        r.register(name, help, family);
    }
    let quota = Family::<ByBucket, Gauge>::default();
    for b in buckets {
        if let Some(q) = b.quota {
            quota.get_or_create(&by_bucket(b)).set(level(q));
        }
    }
    r.register("berth_cache_quota_bytes", "bucket quota", quota);
    let node_gauges = [
        ("berth_cache_used_bytes", "bytes of object data on this node", used),
        ("berth_cache_capacity_bytes", "capacity of this node", capacity),
        ("berth_cache_memory_bytes", "bytes of small objects also kept in memory", memory.used),
        ("berth_cache_memory_limit_bytes", "bound of the memory tier (--memory)", memory.limit),
    ];
    for (name, help, v) in node_gauges {
        let g = Gauge::<i64, AtomicI64>::default();
        g.set(level(v));
        r.register(name, help, g);
    }
    let node_counters = [
        ("berth_cache_memory_hits", "GETs answered from memory (also counted as hits)", memory.hits),
        ("berth_cache_forwarded", "requests forwarded to the key's owner", node.forwarded.load(Ordering::Relaxed)),
        (
            "berth_cache_forward_errors",
            "forwards whose owner did not answer (served as misses)",
            node.forward_errors.load(Ordering::Relaxed),
        ),
        (
            "berth_cache_auth_failures",
            "requests refused for a missing or bad token",
            node.auth_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, v) in node_counters {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        r.register(name, help, c);
    }
    let mut s = String::with_capacity(4096);
    // writing to a String cannot fail
    let _ = encode_registry(&mut s, &r);
    let _ = encode_eof(&mut s);
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
            "berth_cache_forwarded_total 0",
            "# TYPE berth_cache_hits counter",
            "# TYPE berth_cache_bytes gauge",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line} in\n{t}");
        }
        assert!(t.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF:\n{t}");
        let none = render(&[], 0, 0, MemoryStats::default(), &NodeCounters::default());
        assert!(!none.contains("bucket="), "no bucket, no per-bucket series:\n{none}");
    }
}
