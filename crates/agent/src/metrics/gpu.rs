//! Per-GPU utilisation, memory and temperature from NVML, for `/metrics`.
//!
//! NVML is loaded once, at the first scrape; a machine without it (or without NVIDIA GPUs,
//! or with `--fake-gpus`) reports no GPU series and logs why once.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

/// One GPU's figures at a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    /// Busy fraction over NVML's last sample period, 0..1.
    pub utilization: f64,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub temperature_celsius: Option<u32>,
}

fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| match Nvml::init() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::info!("no GPU metrics: nvml is not available ({e})");
            None
        }
    })
    .as_ref()
}

/// Samples every GPU NVML sees; empty without NVML. Blocking (NVML calls the driver).
pub fn sample() -> Vec<GpuSample> {
    let Some(nvml) = nvml() else { return Vec::new() };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let dev = nvml.device_by_index(index).ok()?;
            let util = dev.utilization_rates().ok();
            let mem = dev.memory_info().ok();
            Some(GpuSample {
                index,
                uuid: dev.uuid().unwrap_or_default(),
                utilization: util.map_or(0.0, |u| f64::from(u.gpu) / 100.0),
                memory_used_bytes: mem.as_ref().map_or(0, |m| m.used),
                memory_total_bytes: mem.as_ref().map_or(0, |m| m.total),
                temperature_celsius: dev.temperature(TemperatureSensor::Gpu).ok(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine with NVIDIA GPUs every one is sampled with sane figures.
    #[test]
    fn samples_every_nvidia_gpu() {
        let count = match Nvml::init().and_then(|n| n.device_count()) {
            Ok(n) if n > 0 => n,
            Ok(_) => return eprintln!("SKIPPED: no NVIDIA GPU: nvml sees no devices"),
            Err(e) => return eprintln!("SKIPPED: no NVIDIA GPU: nvml is not available ({e})"),
        };
        let gpus = sample();
        assert_eq!(gpus.len() as u32, count);
        for g in gpus {
            assert!((0.0..=1.0).contains(&g.utilization), "{g:?}");
            assert!(g.memory_total_bytes > 0 && g.memory_used_bytes <= g.memory_total_bytes, "{g:?}");
            assert!(g.uuid.starts_with("GPU-"), "{g:?}");
        }
    }
}
