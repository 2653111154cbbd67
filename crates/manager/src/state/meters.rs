//! What running jobs use now, from the samples agents send with their heartbeats: the last
//! reading of each kernel of the current attempts, and the CPU rate between its last two.
//! Memory only and bounded by the kernels that run: a job's totals are stored when its kernels
//! end (`Change::KernelExit`), and a manager that restarts starts measuring again at the next
//! heartbeat.

use std::collections::BTreeMap;
use std::time::Instant;

use berth_model::protocol::KernelKey;
use berth_model::{JobId, JobUsage, KernelUsage};

#[derive(Debug, Clone, Copy)]
struct Reading {
    usage: KernelUsage,
    at: Instant,
    /// CPUs busy between the previous reading and this one (100 = one CPU).
    cpu_percent: Option<f64>,
}

/// The last reading per kernel, ordered by job so that a job's kernels are one range.
#[derive(Debug, Default)]
pub struct Meters {
    kernels: BTreeMap<KernelKey, Reading>,
}

impl Meters {
    /// A running kernel's sample.
    pub fn record(&mut self, key: KernelKey, usage: KernelUsage, now: Instant) {
        let cpu_percent = self.kernels.get(&key).and_then(|prev| {
            let secs = now.duration_since(prev.at).as_secs_f64();
            let used = usage.cpu_seconds? - prev.usage.cpu_seconds?;
            (secs > 0.0).then(|| (used / secs * 100.0).max(0.0))
        });
        self.kernels.insert(key, Reading { usage, at: now, cpu_percent });
    }

    /// A kernel ended with these totals: they count for its job until the job ends, and it
    /// uses nothing now.
    pub fn finished(&mut self, key: KernelKey, usage: Option<KernelUsage>, now: Instant) {
        let last = self.kernels.get(&key).map(|r| r.usage).unwrap_or_default();
        let mut usage = match usage {
            Some(u) => last.merge_later(u),
            None => last,
        };
        usage.memory_bytes = None;
        usage.gpu_utilization = None;
        self.kernels.insert(key, Reading { usage, at: now, cpu_percent: None });
    }

    /// One kernel's last reading, with its CPU rate.
    pub fn kernel(&self, key: KernelKey) -> Option<JobUsage> {
        self.kernels.get(&key).map(|r| JobUsage { total: r.usage, cpu_percent: r.cpu_percent })
    }

    /// An ended kernel's totals (see [`Meters::finished`]); `None` when nothing was measured.
    pub fn totals(&self, key: KernelKey) -> Option<KernelUsage> {
        self.kernels.get(&key).map(|r| r.usage).filter(KernelUsage::is_known)
    }

    /// Forgets one kernel (a report the manager does not want).
    pub fn forget_kernel(&mut self, key: KernelKey) {
        self.kernels.remove(&key);
    }

    /// Forgets a job's kernels (it ended or went back to the queue).
    pub fn forget_job(&mut self, job: JobId) {
        let keys: Vec<KernelKey> = self.job_range(job).map(|(k, _)| *k).collect();
        for k in keys {
            self.kernels.remove(&k);
        }
    }

    /// The job's usage so far (attempt `attempt`), with its CPU rate now; `None` before the
    /// first sample.
    pub fn job(&self, job: JobId, attempt: u32) -> Option<JobUsage> {
        let readings: Vec<&Reading> =
            self.job_range(job).filter(|(k, _)| k.attempt == attempt).map(|(_, r)| r).collect();
        if readings.is_empty() {
            return None;
        }
        let rates: Vec<f64> = readings.iter().filter_map(|r| r.cpu_percent).collect();
        Some(JobUsage {
            total: KernelUsage::sum(readings.iter().map(|r| &r.usage)),
            cpu_percent: (!rates.is_empty()).then(|| rates.iter().sum()),
        })
    }

    /// How many kernels are measured.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    fn job_range(&self, job: JobId) -> impl Iterator<Item = (&KernelKey, &Reading)> {
        let from = KernelKey { job_id: job, attempt: 0, index: 0 };
        self.kernels.range(from..).take_while(move |(k, _)| k.job_id == job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cpu(s: f64) -> KernelUsage {
        KernelUsage { cpu_seconds: Some(s), memory_bytes: Some(10), ..Default::default() }
    }

    #[test]
    fn the_rate_comes_from_two_samples_and_ended_kernels_keep_their_totals() {
        let mut m = Meters::default();
        let (a, b) = (KernelKey { job_id: 7, attempt: 1, index: 0 }, KernelKey { job_id: 7, attempt: 1, index: 1 });
        let t0 = Instant::now();
        m.record(a, cpu(1.0), t0);
        m.record(b, cpu(0.5), t0);
        assert_eq!(m.job(7, 1).unwrap().cpu_percent, None, "one sample gives no rate");
        m.record(a, cpu(3.0), t0 + Duration::from_secs(1));
        let j = m.job(7, 1).unwrap();
        assert_eq!((j.cpu_percent, j.total.cpu_seconds, j.total.memory_bytes), (Some(200.0), Some(3.5), Some(20)));
        m.finished(b, Some(KernelUsage { cpu_seconds: Some(0.75), ..Default::default() }), t0);
        let j = m.job(7, 1).unwrap();
        assert_eq!((j.total.cpu_seconds, j.total.memory_bytes), (Some(3.75), Some(10)));
        assert_eq!(m.job(7, 0), None, "another attempt's kernels do not count");
        m.record(KernelKey { job_id: 8, attempt: 0, index: 0 }, cpu(1.0), t0);
        m.forget_job(7);
        assert_eq!((m.job(7, 1), m.len()), (None, 1));
    }
}
