//! An endpoint's recent traffic: requests, errors and latencies per second over the last
//! minute, for `berth serve show` (rate, p50, p99) and the autoscaler (requests per second).
//! Latencies go into log-spaced buckets (each 10% wider than the one before), so a
//! percentile is exact to within 10% at any load, in fixed memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::metrics::{EndpointSeries, Metrics};

/// Seconds kept.
const WINDOW: usize = 60;
/// Latency buckets: 0.1 ms × 1.1^i, up to about 10 minutes.
const BUCKETS: usize = 168;
const BASE_MS: f64 = 0.1;
const GROWTH: f64 = 1.1;

#[derive(Clone)]
struct Second {
    /// Seconds since `Stats::start` this slot holds.
    at: u64,
    requests: u64,
    errors: u64,
    latency: Vec<u32>,
}

impl Second {
    fn empty(at: u64) -> Second {
        Second { at, requests: 0, errors: 0, latency: vec![0; BUCKETS] }
    }
}

/// What the router records of one endpoint's requests, apart from the serving lock (issue 42:
/// that lock was taken four times a request): the last minute's [`Stats`] under a lock of
/// their own, the last arrival without any, and the endpoint's metric series.
pub struct Traffic {
    start: Instant,
    stats: Mutex<Stats>,
    /// Nanoseconds from `start` to the last arrival, plus one (0: none yet).
    arrived: AtomicU64,
    series: OnceLock<EndpointSeries>,
}

impl Traffic {
    pub fn new(now: Instant) -> Traffic {
        Traffic { start: now, stats: Mutex::new(Stats::new(now)), arrived: AtomicU64::new(0), series: OnceLock::new() }
    }

    /// What the last `secs` seconds looked like ([`Stats::summary`]).
    pub fn summary(&self, now: Instant, secs: u64) -> Summary {
        self.stats().summary(now, secs)
    }

    /// The last minute's requests; private, so that no caller holds the guard while calling
    /// another method of this (a temporary guard lives to the end of its statement).
    fn stats(&self) -> MutexGuard<'_, Stats> {
        // Plain counters: a panic elsewhere leaves nothing half-done.
        self.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request arrived (counts for idleness even before it is answered).
    pub fn arrived(&self, now: Instant) {
        let at = now.saturating_duration_since(self.start).as_nanos() as u64 + 1;
        self.arrived.fetch_max(at, Ordering::Relaxed);
    }

    /// A request to endpoint `name` was answered `status` after `latency`: the statistics
    /// and the metrics (`metrics` makes the series at the first answer).
    pub fn record(&self, metrics: &Metrics, name: &str, now: Instant, latency: Duration, status: u16) {
        self.series.get_or_init(|| metrics.endpoint(name)).request(status, latency);
        self.stats().record(now, latency, status >= 500);
    }

    /// When the last request ended.
    pub fn last_request(&self) -> Option<Instant> {
        let arrived = match self.arrived.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.start + Duration::from_nanos(n - 1)),
        };
        self.stats().last_request().max(arrived)
    }
}

/// The last minute of one endpoint's requests.
pub struct Stats {
    start: Instant,
    slots: Vec<Second>,
    last_request: Option<Instant>,
}

/// What the last `secs` seconds looked like.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    pub rate: f64,
    pub error_rate: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

fn bucket(latency: Duration) -> usize {
    let ms = latency.as_secs_f64() * 1000.0;
    if ms <= BASE_MS {
        return 0;
    }
    ((ms / BASE_MS).ln() / GROWTH.ln()).ceil().min((BUCKETS - 1) as f64) as usize
}

/// The upper edge of bucket `i`, in milliseconds.
fn edge_ms(i: usize) -> f64 {
    BASE_MS * GROWTH.powi(i as i32)
}

impl Stats {
    pub fn new(now: Instant) -> Stats {
        Stats { start: now, slots: vec![Second::empty(u64::MAX); WINDOW], last_request: None }
    }

    fn slot(&mut self, now: Instant) -> &mut Second {
        let at = now.saturating_duration_since(self.start).as_secs();
        let s = &mut self.slots[(at % WINDOW as u64) as usize];
        if s.at != at {
            *s = Second::empty(at);
        }
        s
    }

    /// A request answered (`error`: a 5xx or no answer) after `latency`.
    pub fn record(&mut self, now: Instant, latency: Duration, error: bool) {
        let s = self.slot(now);
        s.requests += 1;
        s.errors += u64::from(error);
        s.latency[bucket(latency)] += 1;
        self.last_request = Some(now);
    }

    /// When the last request arrived or ended.
    pub fn last_request(&self) -> Option<Instant> {
        self.last_request
    }

    /// The last `secs` whole seconds (the current one included).
    pub fn summary(&self, now: Instant, secs: u64) -> Summary {
        let at = now.saturating_duration_since(self.start).as_secs();
        let secs = secs.clamp(1, WINDOW as u64);
        let from = at.saturating_sub(secs - 1);
        let mut requests = 0;
        let mut errors = 0;
        let mut hist = vec![0u64; BUCKETS];
        for s in self.slots.iter().filter(|s| s.at != u64::MAX && s.at >= from && s.at <= at) {
            requests += s.requests;
            errors += s.errors;
            for (h, l) in hist.iter_mut().zip(&s.latency) {
                *h += u64::from(*l);
            }
        }
        // The current second is partly over: count the time actually covered.
        let covered = (now.saturating_duration_since(self.start).as_secs_f64()).min(secs as f64).max(1.0);
        let quantile = |q: f64| -> Option<f64> {
            if requests == 0 {
                return None;
            }
            let rank = (q * requests as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            hist.iter().enumerate().find_map(|(i, n)| {
                seen += n;
                (seen >= rank).then(|| edge_ms(i))
            })
        };
        Summary {
            rate: requests as f64 / covered,
            error_rate: errors as f64 / covered,
            p50_ms: quantile(0.5),
            p99_ms: quantile(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_percentiles_cover_the_window() {
        let t0 = Instant::now();
        let mut s = Stats::new(t0);
        for i in 0..100u64 {
            let at = t0 + Duration::from_millis(i * 100);
            s.record(at, Duration::from_millis(if i < 98 { 10 } else { 500 }), i == 99);
        }
        let now = t0 + Duration::from_secs(10);
        let sum = s.summary(now, 60);
        assert!((sum.rate - 10.0).abs() < 0.5, "{sum:?}");
        assert!((sum.error_rate - 0.1).abs() < 0.01, "{sum:?}");
        let p50 = sum.p50_ms.unwrap();
        assert!((10.0..=11.0).contains(&p50), "{p50}");
        let p99 = sum.p99_ms.unwrap();
        assert!((500.0..=550.0).contains(&p99), "{p99}");
        // A minute later, nothing is left.
        assert_eq!(s.summary(now + Duration::from_secs(61), 60).p50_ms, None);
    }

    #[test]
    fn an_arrival_counts_for_idleness_before_its_answer() {
        let t0 = Instant::now();
        let t = Traffic::new(t0);
        assert_eq!(t.last_request(), None);
        t.arrived(t0 + Duration::from_secs(5));
        assert_eq!(t.last_request(), Some(t0 + Duration::from_secs(5)));
        // An answer that ends later counts; an older arrival does not move it back.
        t.record(&Metrics::new(), "e", t0 + Duration::from_secs(7), Duration::from_secs(2), 200);
        t.arrived(t0 + Duration::from_secs(6));
        assert_eq!(t.last_request(), Some(t0 + Duration::from_secs(7)));
        let p50 = t.summary(t0 + Duration::from_secs(7), 60).p50_ms.unwrap();
        assert!((2000.0..2200.0).contains(&p50), "{p50}");
    }

    #[test]
    fn the_controllers_load_reading_of_rate_and_idleness_in_one_statement_does_not_deadlock() {
        // The controller reads both in one struct literal, under the serving lock: a stats
        // guard living to the end of that statement once locked the same mutex twice.
        let t0 = Instant::now();
        let t = Traffic::new(t0);
        t.record(&Metrics::new(), "e", t0, Duration::from_millis(1), 200);
        let (rate, last) = (t.summary(t0, 10).rate, t.last_request());
        assert!(rate > 0.0 && last == Some(t0));
    }

    #[test]
    fn buckets_grow_by_ten_percent() {
        assert_eq!(bucket(Duration::ZERO), 0);
        for ms in [0.5, 3.0, 42.0, 1234.0] {
            let i = bucket(Duration::from_secs_f64(ms / 1000.0));
            assert!(edge_ms(i) >= ms && edge_ms(i) < ms * 1.11, "{ms} -> {}", edge_ms(i));
        }
        assert_eq!(bucket(Duration::from_secs(3600)), BUCKETS - 1);
    }
}
