//! What measuring usage costs a node (issue 16): 100 kernels, each a `sleep` in cgroups of its
//! own (v1: memory and cpuacct; v2: one), as the agent's kernels are; per heartbeat that
//! measures, the agent reads each kernel's cgroup (`CgroupReader::read`) and sends the
//! samples as JSON. Benched: reading 100 kernels, finding their cgroups from their pids (once
//! per kernel), and encoding and decoding the heartbeat of 100 samples.
//! Needs root and a writable cgroup hierarchy (it says so and benches only the JSON
//! otherwise). Figures only; nothing here asserts a time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use berth_agent::metrics::CgroupReader;
use berth_model::KernelUsage;
use berth_model::protocol::{AgentMessage, KernelKey, KernelSample};
use criterion::{Criterion, criterion_group, criterion_main};

const KERNELS: usize = 100;

/// 100 sleeping processes, each moved into cgroups of its own under `berth-bench-<pid>`.
struct Kernels {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
}

impl Kernels {
    fn start() -> Option<Kernels> {
        let root = Path::new("/sys/fs/cgroup");
        let unified = root.join("cgroup.controllers").exists();
        let hierarchies: Vec<PathBuf> =
            if unified { vec![root.to_path_buf()] } else { vec![root.join("memory"), root.join("cpuacct")] };
        let base = format!("berth-bench-{}", std::process::id());
        let mut k = Kernels { children: Vec::new(), dirs: Vec::new() };
        for h in &hierarchies {
            let b = h.join(&base);
            std::fs::create_dir(&b).ok()?;
            k.dirs.push(b);
        }
        for i in 0..KERNELS {
            let child = Command::new("sleep").arg("600").spawn().ok()?;
            for h in &hierarchies {
                let d = h.join(&base).join(format!("k{i}"));
                std::fs::create_dir(&d).ok()?;
                std::fs::write(d.join("cgroup.procs"), child.id().to_string()).ok()?;
                k.dirs.insert(0, d);
            }
            k.children.push(child);
        }
        Some(k)
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Kernel dirs first (inserted at the front), then the bases.
        for d in &self.dirs {
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

fn heartbeat(n: usize) -> AgentMessage {
    let usage = (0..n)
        .map(|i| KernelSample {
            key: KernelKey { job_id: 100_000 + i as i64, attempt: 0, index: 0 },
            usage: KernelUsage {
                cpu_seconds: Some(1_234.567_891),
                memory_bytes: Some(3_456_789_012),
                memory_peak_bytes: Some(4_567_890_123),
                gpu_seconds: Some(987.654_321),
                gpu_utilization: Some(0.875),
            },
        })
        .collect();
    AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage, gpus: Vec::new() }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("usage");
    let is_root = unsafe { libc::geteuid() } == 0;
    match Kernels::start().filter(|_| is_root) {
        Some(k) => {
            let pids: Vec<u32> = k.children.iter().map(|c| c.id()).collect();
            let readers: Vec<CgroupReader> = pids.iter().filter_map(|p| CgroupReader::for_pid(*p)).collect();
            assert_eq!(readers.len(), KERNELS);
            assert!(readers[0].read().memory_bytes.is_some(), "the kernels' cgroups are read");
            g.bench_function("read_100_kernels", |b| {
                b.iter(|| readers.iter().map(|r| r.read()).filter(|u| u.is_known()).count())
            });
            g.bench_function("find_100_kernels_cgroups", |b| {
                b.iter(|| pids.iter().filter_map(|p| CgroupReader::for_pid(*p)).count())
            });
            drop(k);
        }
        None => eprintln!("SKIPPED: reading kernels' cgroups needs root and a writable cgroup hierarchy"),
    }
    let msg = heartbeat(KERNELS);
    let text = serde_json::to_string(&msg).unwrap();
    eprintln!("a heartbeat with {KERNELS} samples: {} bytes of JSON", text.len());
    g.bench_function("encode_heartbeat_100", |b| b.iter(|| serde_json::to_string(&msg).unwrap().len()));
    g.bench_function("decode_heartbeat_100", |b| b.iter(|| serde_json::from_str::<AgentMessage>(&text).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
