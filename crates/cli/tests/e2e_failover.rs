//! Several managers on one PostgreSQL store, each its own process in its own network
//! namespace (support/netns.rs, `Cluster::with_standbys`): the first leads, the others stand
//! by. The leader is SIGKILLed in the middle of a burst of submits, frozen past its lease,
//! cut off from the store; standbys are killed. What must hold each time: one leader at a
//! time, no submit that got an id lost or doubled, running jobs untouched (their kernels
//! leave their pid in a directory every namespace sees), new jobs started by the new leader,
//! and a deposed leader that never acts again.
//!
//! No duration is asserted; every wait has a generous deadline. Skipped (with a `SKIPPED:`
//! line) without root, `ip` or PostgreSQL (on CI a missing PostgreSQL fails).

mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use support::base_cmd;
use support::netns::{Cluster, wait_for};

/// `berth managers -o json` (which exits 1 while nobody leads).
fn managers(c: &Cluster) -> Value {
    let o = c.cli(&["managers", "-o", "json"]);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("berth managers: {e}: {}", String::from_utf8_lossy(&o.stderr)))
}

/// The index of the manager that leads now, once one does (asked through `berth managers`).
fn leader(c: &Cluster) -> usize {
    let mut found = None;
    wait_for("a leader", || {
        let v = managers(c);
        let urls: Vec<&str> = v.as_array().unwrap().iter().map(|m| m["url"].as_str().unwrap()).collect();
        let leaders: Vec<usize> = (0..urls.len()).filter(|&k| v[k]["role"] == "leader").collect();
        assert!(leaders.len() <= 1, "two managers lead at once: {v}");
        found = leaders.first().map(|&k| urls.iter().position(|u| *u == c.manager_url(k)).unwrap());
        found.is_some()
    });
    found.unwrap()
}

/// The leader's epoch (once one leads).
fn epoch(c: &Cluster) -> u64 {
    let k = leader(c);
    let v = managers(c);
    v.as_array().unwrap().iter().find(|m| m["url"] == c.manager_url(k)).unwrap()["epoch"].as_u64().unwrap()
}

/// A job that appends its pid to `<shared>/<tag>.pids` and then runs for ten minutes: each
/// start of it adds a line.
fn long_job(c: &Cluster, tag: &str) -> i64 {
    let file = c.path(&format!("{tag}.pids")).display().to_string();
    let id = c.submit(&["--", "sh", "-c", &format!("echo $$ >> {file}; exec sleep 600")]);
    c.wait_state(id, "RUNNING");
    wait_for("the long job's pid", || starts(c, tag) == 1);
    id
}

/// How often the long job `tag` started.
fn starts(c: &Cluster, tag: &str) -> usize {
    std::fs::read_to_string(c.path(&format!("{tag}.pids"))).unwrap_or_default().lines().count()
}

/// Every job's id, with how often `berth ps -a` lists it.
fn listed(c: &Cluster) -> BTreeMap<i64, usize> {
    let mut seen = BTreeMap::new();
    for j in c.json(&["ps", "-a"]).as_array().unwrap() {
        *seen.entry(j["id"].as_i64().unwrap()).or_insert(0) += 1;
    }
    seen
}

/// A job submitted now completes (the leader schedules, an agent runs it).
fn a_new_job_completes(c: &Cluster) {
    let id = c.submit(&["--", "true"]);
    c.wait_state(id, "SUCCEEDED");
}

#[test]
fn the_leader_killed_mid_burst_loses_no_submit_and_the_last_standing_leads() {
    let Some(mut c) = Cluster::with_standbys(2, 2, &[]) else { return };
    c.start_agent(1);
    c.start_agent(2);
    assert_eq!(leader(&c), 0, "the first manager leads");
    let long = long_job(&c, "long");

    // A burst of submits from another process, through every manager's URL; the leader dies
    // in the middle of it.
    let (home, urls, token) = (c.home.path().to_path_buf(), c.manager_urls(), c.admin_token());
    let burst = std::thread::spawn(move || {
        (0..40)
            .map(|_| {
                let o = base_cmd(&home)
                    .env("BERTH_URL", &urls)
                    .env("BERTH_TOKEN", &token)
                    .args(["submit", "-o", "json", "--", "true"])
                    .output()
                    .unwrap();
                // a submit cut off mid-request may fail; one that answered has an id
                serde_json::from_slice::<Value>(&o.stdout).ok().and_then(|v| v["id"].as_i64())
            })
            .collect::<Vec<_>>()
    });
    wait_for("the burst under way", || listed(&c).len() > 10);
    c.kill_manager_k(0);
    let ids: Vec<i64> = burst.join().unwrap().into_iter().flatten().collect();
    let new = leader(&c);
    assert_ne!(new, 0, "a standby took over");
    assert!(ids.len() >= 30, "submits go on with the new leader: {} of 40 got an id", ids.len());

    let seen = listed(&c);
    for id in &ids {
        assert_eq!(seen.get(id), Some(&1), "job {id} got an id: it exists exactly once ({seen:?})");
    }
    for id in &ids {
        c.wait_state(*id, "SUCCEEDED");
    }
    assert_eq!(c.json(&["show", &long.to_string()])["job"]["state"], "RUNNING");
    assert_eq!(starts(&c, "long"), 1, "the running job kept running: never started again");

    // The standby that is left is killed, then the leader: the first manager, back as a
    // standby, is the last one standing and leads.
    c.start_manager();
    let other = 3 - new;
    c.kill_manager_k(other);
    c.kill_manager_k(new);
    assert_eq!(leader(&c), 0, "the last one standing leads");
    a_new_job_completes(&c);
    assert_eq!(starts(&c, "long"), 1);
}

#[test]
fn a_frozen_or_cut_off_leader_is_replaced_and_never_acts_again() {
    let Some(mut c) = Cluster::with_standbys(1, 1, &[]) else { return };
    c.start_agent(1);
    assert_eq!(leader(&c), 0);
    let long = long_job(&c, "long");

    // Frozen past its lease: the standby leads, the agent follows it.
    let first = epoch(&c);
    c.freeze_manager(0, true);
    wait_for("the standby leads", || {
        managers(&c).as_array().unwrap().iter().any(|m| m["role"] == "leader" && m["epoch"].as_u64() > Some(first))
    });
    let second = epoch(&c);
    a_new_job_completes(&c);
    // Resumed, it finds its lease gone: it exits without a word to any agent.
    c.freeze_manager(0, false);
    let mut status = None;
    wait_for("the deposed leader to exit", || {
        status = c.manager_exited(0);
        status.is_some()
    });
    assert!(!status.unwrap().success(), "a deposed leader exits non-zero (to be restarted as a standby)");
    let log = c.manager_log(0);
    assert!(log.contains("lost the leadership"), "{log}");
    let agent = c.agent_log(1);
    assert!(agent.contains(&format!("registered with the manager (leader epoch {second})")), "{agent}");
    assert!(!agent.contains("refused a"), "the deposed leader sent no command at all: {agent}");
    assert_eq!(starts(&c, "long"), 1);
    // Streams find the leader too (a WebSocket cannot follow a redirect).
    let out = c.ok(&["exec", &long.to_string(), "--", "echo", "inside"]);
    assert_eq!(out.trim(), "inside");

    // Back as a standby; then the leader is cut off from the store: it stops acting and exits,
    // the first manager leads again.
    c.start_manager();
    assert_eq!(leader(&c), 1);
    c.cut_off_store(1);
    let mut status = None;
    wait_for("the cut-off leader to exit", || {
        status = c.manager_exited(1);
        status.is_some()
    });
    assert!(c.manager_log(1).contains("lost the leadership"));
    assert_eq!(leader(&c), 0);
    a_new_job_completes(&c);
    let agent = c.agent_log(1);
    let third = epoch(&c);
    assert!(third > second);
    assert!(agent.contains(&format!("registered with the manager (leader epoch {third})")), "{agent}");
    assert_eq!(c.json(&["show", &long.to_string()])["job"]["state"], "RUNNING");
    assert_eq!(starts(&c, "long"), 1, "the running job kept running through both takeovers");
}
