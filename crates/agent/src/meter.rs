//! Each running kernel's usage, sampled at every heartbeat: CPU time and memory from its
//! cgroup (see `metrics::usage`), and its GPUs' busy time from NVML, added up between samples
//! (NVML tells a device's utilisation now, not a counter). The kernel table keeps one meter
//! per kernel; its last figures complete the totals the runtime reads at the kernel's end
//! (which knows nothing of GPUs, and for containers nothing after their last sample).

use std::time::Instant;

use berth_model::{Binding, KernelUsage};

use crate::metrics::{CgroupReader, GpuSample};

#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// Found from the kernel's pid at the first sample (its cgroup does not move).
    reader: Option<CgroupReader>,
    usage: KernelUsage,
    /// When the GPUs were last sampled.
    gpu_at: Option<Instant>,
}

impl Meter {
    /// Samples the kernel (main process `pid`, devices in `binding`) with the node's GPU
    /// samples of this heartbeat, and returns its figures so far.
    pub fn sample(&mut self, pid: u32, binding: &Binding, gpus: &[GpuSample], now: Instant) -> KernelUsage {
        if self.reader.is_none() && pid > 0 {
            self.reader = CgroupReader::for_pid(pid);
        }
        if let Some(r) = &self.reader {
            self.usage = self.usage.merge_later(r.read());
        }
        let mine: Vec<f64> = binding
            .gpus
            .iter()
            .filter_map(|share| gpus.iter().find(|g| g.uuid == share.uuid))
            .map(|g| g.utilization)
            .collect();
        if !mine.is_empty() {
            let busy: f64 = mine.iter().sum();
            // Busy time since the last sample, at the utilisation seen now (the first sample
            // only starts the clock).
            let secs = self.gpu_at.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
            self.usage.gpu_seconds = Some(self.usage.gpu_seconds.unwrap_or(0.0) + busy * secs);
            self.usage.gpu_utilization = Some(busy / mine.len() as f64);
            self.gpu_at = Some(now);
        }
        self.usage
    }

    /// The kernel's totals: what the runtime read at its end (`last`), completed with what
    /// the samples saw; `None` when nothing is known.
    pub fn totals(&self, last: Option<KernelUsage>) -> Option<KernelUsage> {
        let mut all = match last {
            Some(l) => self.usage.merge_later(l),
            None => self.usage,
        };
        // A finished kernel uses nothing now.
        all.memory_bytes = None;
        all.gpu_utilization = None;
        Some(all).filter(|u| u.is_known())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::GpuShare;

    fn gpu(uuid: &str, utilization: f64) -> GpuSample {
        GpuSample {
            index: 0,
            uuid: uuid.into(),
            utilization,
            memory_used_bytes: 0,
            memory_total_bytes: 1,
            temperature_celsius: None,
        }
    }

    /// GPU busy time adds up only the kernel's own GPUs, between samples.
    #[test]
    fn gpu_time_is_integrated_over_the_kernels_devices() {
        let binding =
            Binding { gpus: vec![GpuShare { uuid: "GPU-a".into(), index: 0, milli: 1000 }], ..Default::default() };
        let mut m = Meter::default();
        let t0 = Instant::now();
        let gpus = [gpu("GPU-a", 0.5), gpu("GPU-b", 1.0)];
        let u = m.sample(0, &binding, &gpus, t0);
        assert_eq!((u.gpu_seconds, u.gpu_utilization), (Some(0.0), Some(0.5)));
        let u = m.sample(0, &binding, &gpus, t0 + std::time::Duration::from_secs(4));
        assert_eq!(u.gpu_seconds, Some(2.0));
        let t = m.totals(Some(KernelUsage { cpu_seconds: Some(3.0), ..Default::default() })).unwrap();
        assert_eq!((t.cpu_seconds, t.gpu_seconds, t.gpu_utilization), (Some(3.0), Some(2.0), None));
        assert_eq!(Meter::default().totals(None), None);
    }
}
