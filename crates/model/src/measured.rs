//! What kernels and jobs *used*, as measured on the nodes (beside what they were *given*, the
//! binding): CPU time, memory now and at its peak, GPU busy time. Agents read it from the
//! kernels' cgroups and from NVML and send it with their heartbeats; the manager keeps the
//! totals of every kernel that ended, like Slurm's `TotalCPU` and `MaxRSS`.
//!
//! Every figure is optional: a machine without cgroups (an agent that is not root) or without
//! NVML cannot tell, and "unknown" must never read as "zero".

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One kernel's figures, cumulative since it started (`memory_bytes`: now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelUsage {
    /// CPU time of all its processes (user + system), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Memory charged to it now (its cgroup's, page cache and tmpfs included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// The most memory charged to it at any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    /// Busy time of its GPUs, summed over them (a GPU busy half the time for 10 s adds 5).
    /// Device-level utilisation (NVML): on a GPU shared with other kernels it counts theirs too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<f64>,
    /// Its GPUs' mean busy fraction at the last sample (0 to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
}

impl KernelUsage {
    /// Whether any figure is known.
    pub fn is_known(&self) -> bool {
        self.cpu_seconds.is_some() || self.memory_peak_bytes.is_some() || self.gpu_seconds.is_some()
    }

    /// A later reading of the same kernel over an earlier one: counters never go back (a
    /// final reading of a kernel whose cgroup is gone may know less than the last sample).
    pub fn merge_later(self, later: KernelUsage) -> KernelUsage {
        let max_f = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let peak = [self.memory_peak_bytes, later.memory_peak_bytes, self.memory_bytes, later.memory_bytes]
            .into_iter()
            .flatten()
            .max();
        KernelUsage {
            cpu_seconds: max_f(self.cpu_seconds, later.cpu_seconds),
            memory_bytes: later.memory_bytes.or(self.memory_bytes),
            memory_peak_bytes: peak,
            gpu_seconds: max_f(self.gpu_seconds, later.gpu_seconds),
            gpu_utilization: later.gpu_utilization.or(self.gpu_utilization),
        }
    }

    /// The figures of several kernels of one job together: times and memory add up (each
    /// kernel's peak counted, as `seff` counts MaxRSS per task), utilisation is their mean.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a KernelUsage>) -> KernelUsage {
        let mut out = KernelUsage::default();
        let mut util = (0.0, 0u32);
        for u in all {
            let add_f = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            let add_u = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (a, b) => a.or(b),
            };
            out.cpu_seconds = add_f(out.cpu_seconds, u.cpu_seconds);
            out.memory_bytes = add_u(out.memory_bytes, u.memory_bytes);
            out.memory_peak_bytes = add_u(out.memory_peak_bytes, u.memory_peak_bytes);
            out.gpu_seconds = add_f(out.gpu_seconds, u.gpu_seconds);
            if let Some(g) = u.gpu_utilization {
                util = (util.0 + g, util.1 + 1);
            }
        }
        out.gpu_utilization = (util.1 > 0).then(|| util.0 / f64::from(util.1));
        out
    }
}

/// A job's usage as `berth show`, `ps` and `eff` print it: its kernels' figures together, and
/// while it runs, the rate at which it uses CPU now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobUsage {
    #[serde(flatten)]
    pub total: KernelUsage,
    /// CPUs busy now (100 = one CPU), from the last two samples; only while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
}

/// How well a job used what it was given, the way Slurm's `seff` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Efficiency {
    /// CPU time used ÷ (CPUs allocated × wall time), 0 to 1 (more with CPUs beyond the
    /// binding, which cgroups do not allow).
    pub cpu: Option<f64>,
    /// Peak memory ÷ memory allocated.
    pub memory: Option<f64>,
    /// GPU busy time ÷ (GPUs allocated × wall time).
    pub gpu: Option<f64>,
}

impl Efficiency {
    /// `used` over what `cpus`, `mem_bytes` and `gpus` (all kernels together) give in `wall_secs`.
    pub fn of(used: &KernelUsage, cpus: f64, mem_bytes: u64, gpus: f64, wall_secs: f64) -> Efficiency {
        let per = |v: Option<f64>, given: f64| v.filter(|_| given > 0.0 && wall_secs > 0.0).map(|v| v / given);
        Efficiency {
            cpu: per(used.cpu_seconds, cpus * wall_secs),
            memory: used.memory_peak_bytes.filter(|_| mem_bytes > 0).map(|p| p as f64 / mem_bytes as f64),
            gpu: per(used.gpu_seconds, gpus * wall_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_reading_never_goes_back_and_unknown_stays_unknown() {
        let sample = KernelUsage {
            cpu_seconds: Some(5.0),
            memory_bytes: Some(300),
            memory_peak_bytes: Some(250),
            ..Default::default()
        };
        let last = KernelUsage { cpu_seconds: Some(6.0), memory_peak_bytes: Some(200), ..Default::default() };
        let m = sample.merge_later(last);
        assert_eq!(m.cpu_seconds, Some(6.0));
        assert_eq!(m.memory_peak_bytes, Some(300), "the peak covers what a sample saw");
        assert_eq!(m.gpu_seconds, None);
        assert!(!KernelUsage::default().is_known());
    }

    #[test]
    fn kernels_add_up_and_efficiency_is_used_over_given() {
        let a = KernelUsage { cpu_seconds: Some(4.0), memory_peak_bytes: Some(100), ..Default::default() };
        let b = KernelUsage { cpu_seconds: Some(2.0), gpu_utilization: Some(0.5), ..Default::default() };
        let s = KernelUsage::sum([&a, &b]);
        assert_eq!((s.cpu_seconds, s.memory_peak_bytes, s.gpu_utilization), (Some(6.0), Some(100), Some(0.5)));
        let e = Efficiency::of(&s, 2.0, 400, 0.0, 3.0);
        assert_eq!((e.cpu, e.memory, e.gpu), (Some(1.0), Some(0.25), None));
    }
}
