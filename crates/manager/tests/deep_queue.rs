//! A queue deeper than what a pass reads: the manager keeps its pending jobs as a set across
//! passes (`berth_sched::schedule_set`), so a pass behind a blocked head reads only that head;
//! every job still shows its place and reason, in the list and alone, and they follow the
//! queue as it moves.

mod common;

use berth_model::Topology;
use common::*;

/// (id, position, reason message) of every pending job in the list, in id order.
async fn places(c: &Client) -> Vec<(i64, i64, String)> {
    let (_, list) = c.get("/v1/jobs?state=PENDING").await;
    let mut out: Vec<(i64, i64, String)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let message = j["pending_reason"]["message"].as_str().unwrap_or_default().to_string();
            (j["id"].as_i64().unwrap(), j["position"].as_i64().unwrap_or(-1), message)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn jobs_the_pass_never_reads_still_show_their_place_and_follow_the_queue() {
    let e = start().await;
    strict_fifo(&e.admin).await;
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 8, 32 << 30, 0), vec![]).await;
    let running = e.admin.submit_ok(&spec(8.0, 0.0)).await;
    let first = a.expect_start().await;
    let head = e.admin.submit_ok(&spec(8.0, 0.0)).await;
    let mut behind = Vec::new();
    for _ in 0..20 {
        behind.push(e.admin.submit_ok(&spec(1.0, 0.0)).await);
    }
    let want = |behind: &[i64], head_pos: i64| {
        let mut w = vec![(head, head_pos, String::new())];
        for (k, id) in behind.iter().enumerate() {
            w.push((*id, head_pos + 1 + k as i64, format!("priority: waiting behind the job at position {head_pos}")));
        }
        w
    };
    let got = eventually("every job placed", || async {
        let p = places(&e.admin).await;
        (p.len() == 21 && p.iter().skip(1).all(|(_, _, m)| m.starts_with("priority"))).then_some(p)
    })
    .await;
    let strip_head = |mut p: Vec<(i64, i64, String)>| {
        p[0].2.clear();
        p
    };
    assert_eq!(strip_head(got), want(&behind, 1), "the head waits for resources, the rest behind it in order");
    let deep = behind[15];
    let (_, one) = e.admin.get(&format!("/v1/jobs/{deep}")).await;
    assert_eq!(one["job"]["position"], 17, "a job alone shows its place too: {one}");
    assert_eq!(one["job"]["pending_reason"]["message"], "priority: waiting behind the job at position 1");

    // Cancelling jobs in the middle moves everyone behind them up.
    for id in [behind[0], behind[1]] {
        assert_eq!(e.admin.post(&format!("/v1/jobs/{id}/cancel"), serde_json::json!({})).await.0, 200);
    }
    let got = eventually("the queue closed up", || async {
        let p = places(&e.admin).await;
        (p.len() == 19 && p.last().is_some_and(|l| l.1 == 19)).then_some(p)
    })
    .await;
    behind.drain(..2);
    assert_eq!(strip_head(got), want(&behind, 1));
    drop(first);
    let _ = running;
}
