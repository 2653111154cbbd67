//! Throughput figures (ignored by default; run with `--ignored --nocapture`). They print
//! numbers and assert only correctness: wall-clock asserts are flaky on shared machines.

mod common;

use std::time::Instant;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelOutcome, ManagerMessage};
use berth_model::{JobSpec, Topology};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn thousand_trivial_jobs_through_one_two_cpu_node() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 2, 8 << 30, 0), vec![]).await;
    let n = 1000;
    let t0 = Instant::now();
    let mut sp = JobSpec::command(["true"]);
    sp.resources.mem_bytes = 1 << 20;
    for _ in 0..n {
        e.admin.submit_ok(&sp).await;
    }
    let submitted = t0.elapsed();
    let mut done = 0;
    while done < n {
        if let ManagerMessage::StartKernel { key, .. } = a.recv().await {
            let at = jiff::Timestamp::now();
            a.send(AgentMessage::Kernel { key, event: KernelEvent::Started { pid: 1, at } }).await;
            let event = KernelEvent::Finished {
                outcome: KernelOutcome::Succeeded,
                exit_code: Some(0),
                message: String::new(),
                at,
                usage: None,
                signal: None,
            };
            a.send(AgentMessage::Kernel { key, event }).await;
            done += 1;
        }
    }
    e.admin.wait_state(n as i64, "SUCCEEDED").await;
    println!("{n} jobs: submitted in {submitted:?}, all finished after {:?}", t0.elapsed());
    e.m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn concurrent_submits() {
    let e = start().await;
    let per = 500;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = e.admin.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                c.submit_ok(&JobSpec::command(["true"])).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let dt = t0.elapsed();
    println!("{} submits from 8 clients in {dt:?}: {:.0}/s", 8 * per, (8 * per) as f64 / dt.as_secs_f64());
    e.m.shutdown().await;
}
