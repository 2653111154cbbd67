//! Replays the start of the real traces vendored in `<repo>/traces/` (see its README) and
//! checks the replay's invariants. Never skipped: the traces ship with the repository.

use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use berth_sched::sim::{self, Cluster, JobOutcome, Metrics, Policy, SimOptions, Trace, Window};

const JOBS: usize = 3000;
/// SDSC's head is replayed shorter: `preempt` requeues jobs over and over on it, and each
/// requeue is another pass (3,000 jobs took over two minutes in CI).
const SDSC_JOBS: usize = 1500;

fn traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces")
}

fn check(name: &str, trace: &Trace, cluster: Cluster, policies: &[Policy]) {
    for &policy in policies {
        let (m, out): (Metrics, Vec<JobOutcome>) =
            sim::simulate_detailed(trace, &cluster, policy, &SimOptions::default()).unwrap();
        assert_eq!(m.jobs, trace.jobs.len());
        assert_eq!(m.unfinished, 0, "{name} {policy:?}: jobs left pending");
        assert_eq!(m.finished + m.skipped_too_big, m.jobs, "{name} {policy:?}");
        assert!(m.allocation > 0.0 && m.allocation <= 1.0 + 1e-9, "{name} {policy:?}: allocation {}", m.allocation);
        assert!(m.jain_slowdown > 0.0 && m.jain_slowdown <= 1.0 + 1e-9);
        for (o, j) in out.iter().zip(&trace.jobs) {
            if !o.finished {
                continue;
            }
            let (start, end) = (o.start_ms.unwrap(), o.end_ms.unwrap());
            assert!(start >= o.submit_ms, "{name} {policy:?}: line {} starts before its submit", j.line);
            assert!(end - o.submit_ms >= o.duration_ms, "{name} {policy:?}: line {}: JCT < duration", j.line);
        }
        assert!(m.jct_mean_s >= m.wait_mean_s);
        println!(
            "{name} {:10} jct mean {:.0}s wait mean {:.0}s alloc {:.3} jain {:.3}",
            m.policy, m.jct_mean_s, m.wait_mean_s, m.allocation, m.jain_slowdown
        );
    }
}

#[test]
fn philly_head_replays_sanely() {
    let path = traces_dir().join("philly.csv");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the vendored trace {}: {e}", path.display()));
    let mut trace = sim::parse_philly(text.as_bytes(), sim::PhillyOptions::default()).unwrap();
    assert_eq!(trace.jobs.len(), 82_247 - 69, "the 69 jobs before 2017-09-24 are dropped");
    assert!(trace.jobs.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms));
    trace.select(Window { limit: Some(JOBS), ..Window::default() });
    let cluster = Cluster { nodes: 32, gpus_per_node: 8, cpus_per_node: 64, mem_per_node: 512 << 30 };
    check("philly", &trace, cluster, &[Policy::Fifo, Policy::Backfill, Policy::Drf, Policy::FairShare]);
}

#[test]
fn sdsc_blue_head_replays_sanely() {
    let path = traces_dir().join("SDSC-BLUE-2000-4.2-cln.swf.gz");
    let file =
        std::fs::File::open(&path).unwrap_or_else(|e| panic!("cannot open the vendored trace {}: {e}", path.display()));
    let mut trace =
        sim::parse_swf(std::io::BufReader::new(MultiGzDecoder::new(file)), sim::SwfOptions::default()).unwrap();
    assert_eq!(trace.jobs.len(), 232_536, "jobs with run time > 0");
    assert!(trace.has_priorities);
    trace.select(Window { limit: Some(SDSC_JOBS), ..Window::default() });
    let cluster = Cluster { nodes: 144, gpus_per_node: 0, cpus_per_node: 8, mem_per_node: 4 << 30 };
    check("sdsc", &trace, cluster, &[Policy::Fifo, Policy::Backfill, Policy::FairShare, Policy::Preempt]);
}
