//! Measured usage (issue 16): a fake agent's heartbeat samples show in a running job's view
//! with its CPU rate, its kernel's totals at the end are stored and survive in the job's
//! detail, list and `GET /v1/usage`, and samples of runs the manager does not want are dropped.

mod common;

use berth_model::KernelUsage;
use berth_model::protocol::{AgentMessage, KernelEvent, KernelSample};
use berth_model::{JobId, Topology};
use common::*;

fn used(cpu: f64, mem: u64) -> KernelUsage {
    KernelUsage { cpu_seconds: Some(cpu), memory_bytes: Some(mem), memory_peak_bytes: Some(mem), ..Default::default() }
}

fn heartbeat(usage: Vec<KernelSample>) -> AgentMessage {
    AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage, gpus: Vec::new() }
}

#[tokio::test]
async fn samples_show_live_and_totals_are_kept_after_the_end() {
    let e = start_manual().await;
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 4, 16 << 30, 0), vec![]).await;
    let id: JobId = e.admin.submit_ok(&spec(2.0, 0.0)).await;
    let key = start_key(&a.expect_start().await);
    a.send(AgentMessage::Kernel { key, event: KernelEvent::Started { pid: 42, at: jiff::Timestamp::now() } }).await;
    e.admin.wait_state(id, "RUNNING").await;

    a.send(heartbeat(vec![KernelSample { key, usage: used(1.0, 100 << 20) }])).await;
    // A sample for a kernel of another attempt (a late report of an earlier run) is dropped.
    let stale = berth_model::protocol::KernelKey { attempt: key.attempt + 1, ..key };
    a.send(heartbeat(vec![KernelSample { key: stale, usage: used(99.0, 1) }])).await;
    let first = eventually("the first sample", || async {
        let j = e.admin.job(id).await;
        (!j["job"]["usage"].is_null()).then_some(j)
    })
    .await;
    assert_eq!(first["job"]["usage"]["cpu_seconds"], 1.0, "{first}");
    assert!(first["job"]["usage"]["cpu_percent"].is_null(), "one sample gives no rate: {first}");

    e.clock.advance(std::time::Duration::from_millis(500));
    a.send(heartbeat(vec![KernelSample { key, usage: used(2.0, 120 << 20) }])).await;
    let live = eventually("a CPU rate", || async {
        let (_, list) = e.admin.get("/v1/jobs").await;
        let j = list.as_array()?.iter().find(|j| j["id"] == id)?.clone();
        j["usage"]["cpu_percent"].as_f64().map(|p| (p, j))
    })
    .await;
    // 1 CPU-second in the 0.5 s the clock moved between the samples.
    assert_eq!(live.0, 200.0, "{live:?}");
    assert_eq!(live.1["usage"]["memory_bytes"], 120 << 20);

    let end = KernelEvent::Finished {
        outcome: berth_model::protocol::KernelOutcome::Succeeded,
        exit_code: Some(0),
        message: String::new(),
        at: jiff::Timestamp::now(),
        usage: Some(KernelUsage { cpu_seconds: Some(2.25), memory_peak_bytes: Some(130 << 20), ..Default::default() }),
        signal: None,
    };
    a.send(AgentMessage::Kernel { key, event: end }).await;
    let d = e.admin.wait_state(id, "SUCCEEDED").await;
    let u = &d["job"]["usage"];
    assert_eq!((u["cpu_seconds"].as_f64(), u["memory_peak_bytes"].as_u64()), (Some(2.25), Some(130 << 20)), "{d}");
    assert!(u["memory_bytes"].is_null() && u["cpu_percent"].is_null(), "an ended job uses nothing now: {d}");
    assert_eq!(d["kernels"][0]["usage"]["cpu_seconds"], 2.25);

    let (s, lines) = e.admin.get("/v1/usage?since=1h").await;
    assert_eq!(s, 200);
    let line = &lines.as_array().unwrap()[0];
    let used_h = line["cpu_hours_used"].as_f64().unwrap();
    assert!((used_h - 2.25 / 3600.0).abs() < 1e-9, "{line}");
    assert!(line["cpu_hours"].as_f64().unwrap() > 0.0, "{line}");
}
