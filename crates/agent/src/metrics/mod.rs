//! The agent's Prometheus `/metrics` (`berth agent --metrics-listen ADDR`, `berth up
//! --metrics-listen ADDR`): kernels by state, each running kernel's CPU time and memory
//! (current and peak) from its cgroup (`usage`), and each GPU's utilisation, memory and
//! temperature from NVML (`gpu`).
//!
//! The kernel table has one owner task and no lock (`kernels.rs`); it publishes a copy of
//! what a scrape needs to a [`Board`] after every change, and a scrape reads the cgroups of
//! the kernels on it. Kernel series carry the job id (as `job_id`: Prometheus keeps `job` for
//! the scrape job and would rename ours): they are bounded by the kernels that run on this
//! node, and a per-job figure is what they are for.

mod gpu;
pub(crate) mod usage;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use berth_model::protocol::KernelKey;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

pub use gpu::{GpuSample, sample as sample_gpus};
pub use usage::{CgroupReader, KernelUsage};

/// The content type of the exposition `prometheus-client` writes (OpenMetrics text).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A kernel as a scrape sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    pub key: KernelKey,
    /// `waiting` (its start waits for stopping kernels), `running`, `stopping`, or `finished`
    /// (ended, kept until the manager says `Forget`).
    pub state: &'static str,
    /// Its main process while it runs (containers: Docker's `State.Pid`); 0 when unknown.
    pub pid: u32,
}

/// The kernels published by the kernel table (cheap to clone).
#[derive(Debug, Clone)]
pub struct Board {
    node: Arc<str>,
    kernels: Arc<Mutex<Vec<KernelRow>>>,
}

impl Board {
    pub fn new(node: &str) -> Board {
        Board { node: node.into(), kernels: Default::default() }
    }

    pub fn publish(&self, rows: Vec<KernelRow>) {
        *self.kernels.lock().expect("board lock") = rows;
    }

    fn rows(&self) -> Vec<KernelRow> {
        self.kernels.lock().expect("board lock").clone()
    }
}

/// Binds `addr` and serves `GET /metrics` there until the process ends.
pub async fn serve(addr: SocketAddr, board: Board) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let board = board.clone();
            async move {
                // cgroup files and NVML calls block: off the async threads.
                let text = tokio::task::spawn_blocking(move || scrape(&board)).await.unwrap_or_default();
                ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text)
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("metrics server failed: {e}");
        }
    });
    tracing::info!(%local, "agent metrics on http://{local}/metrics");
    Ok(local)
}

/// Reads what the kernels and GPUs use now and renders it.
fn scrape(board: &Board) -> String {
    let rows = board.rows();
    let usage: Vec<(KernelRow, KernelUsage)> = rows
        .iter()
        .filter(|r| r.state == "running" || r.state == "stopping")
        .filter(|r| r.pid > 0)
        .filter_map(|r| Some((r.clone(), usage::of_pid(r.pid)?)))
        .collect();
    render(&board.node, &rows, &usage, &gpu::sample())
}

type Labels = Vec<(&'static str, String)>;

/// The exposition text of the given figures (pure, for tests).
pub fn render(node: &str, rows: &[KernelRow], usage: &[(KernelRow, KernelUsage)], gpus: &[GpuSample]) -> String {
    let mut r = Registry::default();
    let node_l = || ("node", node.to_string());
    r.register(
        "berth_agent_build",
        "The berth version this agent runs",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION").to_string()), node_l()]),
    );
    let by_state = Family::<Labels, Gauge>::default();
    for state in ["waiting", "running", "stopping", "finished"] {
        let _ = by_state.get_or_create(&vec![node_l(), ("state", state.to_string())]);
    }
    for k in rows {
        by_state.get_or_create(&vec![node_l(), ("state", k.state.to_string())]).inc();
    }
    r.register("berth_agent_kernels", "Kernels on this node, by state", by_state);

    let cpu = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let mem = Family::<Labels, Gauge>::default();
    let peak = Family::<Labels, Gauge>::default();
    for (k, u) in usage {
        let l = vec![
            node_l(),
            ("job_id", k.key.job_id.to_string()),
            ("kernel", format!("{}.{}.{}", k.key.job_id, k.key.attempt, k.key.index)),
        ];
        if let Some(s) = u.cpu_seconds {
            cpu.get_or_create(&l).set(s);
        }
        if let Some(b) = u.memory_bytes {
            mem.get_or_create(&l).set(b as i64);
        }
        if let Some(b) = u.memory_peak_bytes {
            peak.get_or_create(&l).set(b as i64);
        }
    }
    // CPU time is a counter per kernel but kernels come and go: a gauge of the running total
    // (rate() still works on it while the kernel runs).
    r.register_with_unit("berth_kernel_cpu", "CPU time a running kernel used", Unit::Seconds, cpu);
    r.register_with_unit("berth_kernel_memory", "Memory a running kernel uses now", Unit::Bytes, mem);
    r.register_with_unit("berth_kernel_memory_peak", "Most memory a running kernel used", Unit::Bytes, peak);

    let util = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let used = Family::<Labels, Gauge>::default();
    let total = Family::<Labels, Gauge>::default();
    let temp = Family::<Labels, Gauge>::default();
    for g in gpus {
        let l = vec![node_l(), ("gpu", g.index.to_string()), ("uuid", g.uuid.clone())];
        util.get_or_create(&l).set(g.utilization);
        used.get_or_create(&l).set(g.memory_used_bytes as i64);
        total.get_or_create(&l).set(g.memory_total_bytes as i64);
        if let Some(t) = g.temperature_celsius {
            temp.get_or_create(&l).set(i64::from(t));
        }
    }
    r.register_with_unit("berth_gpu_utilization", "GPU busy fraction (NVML)", Unit::Other("ratio".into()), util);
    r.register_with_unit("berth_gpu_memory_used", "GPU memory in use (NVML)", Unit::Bytes, used);
    r.register_with_unit("berth_gpu_memory_total", "GPU memory (NVML)", Unit::Bytes, total);
    r.register_with_unit("berth_gpu_temperature", "GPU temperature (NVML)", Unit::Celsius, temp);

    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_kernels_usage_and_gpus() {
        let key = KernelKey { job_id: 7, attempt: 0, index: 1 };
        let row = KernelRow { key, state: "running", pid: 42 };
        let u = KernelUsage {
            cpu_seconds: Some(6.5),
            memory_bytes: Some(1 << 20),
            memory_peak_bytes: Some(2 << 20),
            ..Default::default()
        };
        let gpu = GpuSample {
            index: 0,
            uuid: "GPU-1".into(),
            utilization: 0.25,
            memory_used_bytes: 10,
            memory_total_bytes: 100,
            temperature_celsius: Some(60),
        };
        let text = render("n1", std::slice::from_ref(&row), &[(row.clone(), u)], &[gpu]);
        for line in [
            "berth_agent_kernels{node=\"n1\",state=\"running\"} 1",
            "berth_agent_kernels{node=\"n1\",state=\"finished\"} 0",
            "berth_kernel_cpu_seconds{node=\"n1\",job_id=\"7\",kernel=\"7.0.1\"} 6.5",
            "berth_kernel_memory_peak_bytes{node=\"n1\",job_id=\"7\",kernel=\"7.0.1\"} 2097152",
            "berth_gpu_utilization_ratio{node=\"n1\",gpu=\"0\",uuid=\"GPU-1\"} 0.25",
            "berth_gpu_temperature_celsius{node=\"n1\",gpu=\"0\",uuid=\"GPU-1\"} 60",
            "berth_agent_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
    }
}
