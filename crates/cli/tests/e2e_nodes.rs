//! Cluster basics through the real binary on 127.0.0.1 (issue 4): node states, addresses and
//! versions in `berth nodes`, drain/undrain, and a 2-node job's torchrun environment read back
//! with `berth logs --kernel`. The failure tests with separate hosts (network namespaces) live
//! in `e2e_cluster.rs`.

mod support;

use serde_json::Value;
use support::{Berth, text};

fn node(b: &Berth, name: &str) -> Value {
    let nodes = b.json(&["nodes"]);
    nodes.as_array().unwrap().iter().find(|n| n["name"] == name).cloned().unwrap_or(Value::Null)
}

#[test]
fn drain_undrain_and_a_two_node_job_environment() {
    let b = Berth::cluster("", &[("n1", &[]), ("n2", &[])]);
    let n1 = node(&b, "n1");
    assert_eq!(n1["state"], "ready");
    assert_eq!(n1["address"], "127.0.0.1", "the agent's address on its route to the manager");
    assert_eq!(n1["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(n1["connected"], true);

    let out = b.ok(&["nodes", "drain", "n1", "--reason", "disk swap"]);
    assert_eq!(out.trim(), "node n1 is drained");
    let table = b.ok(&["nodes"]);
    assert!(table.contains("drained (disk swap)") && table.contains("127.0.0.1"), "{table}");

    // A 2-node job cannot start while n1 is drained.
    let id = b.submit(&[
        "--nodes",
        "2",
        "--",
        "sh",
        "-c",
        // main ending ends the job and stops the other kernels (like a launcher whose workers
        // are done): it waits a moment, so that a slow sub kernel on a loaded machine has
        // printed its line by then (it once had not, on CI).
        "echo rank=$RANK world=$WORLD_SIZE node_rank=$NODE_RANK local=$LOCAL_RANK role=$BERTH_CLUSTER_ROLE \
         master=$MASTER_ADDR:$MASTER_PORT hosts=$BERTH_CLUSTER_HOSTS; \
         if [ \"$BERTH_CLUSTER_ROLE\" = main ]; then sleep 2; fi",
    ]);
    let j = b.wait_job(id, "a scheduler verdict", |j| {
        j["job"]["pending_reason"]["kind"].as_str().is_some_and(|k| k != "queued")
    });
    assert_eq!(j["job"]["state"], "PENDING", "{j}");

    let out = b.ok(&["nodes", "undrain", "n1"]);
    assert_eq!(out.trim(), "node n1 is ready");
    let done = b.wait_state(id, "SUCCEEDED");
    let port = done["kernels"][0]["binding"]["port"].as_u64().expect("main's binding holds MASTER_PORT");
    for k in 0..2 {
        let log = b.ok(&["logs", &id.to_string(), "--kernel", &k.to_string()]);
        let role = if k == 0 { "main" } else { "sub1" };
        let want = format!(
            "rank={k} world=2 node_rank={k} local=0 role={role} master=127.0.0.1:{port} hosts=127.0.0.1,127.0.0.1"
        );
        assert_eq!(log.trim(), want);
    }
    let o = b.cli(&["logs", &id.to_string(), "--kernel", "2"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("has no kernel 2"), "{}", text(&o.stderr));
}

#[test]
fn only_admins_drain_and_unknown_nodes_are_named() {
    let b = Berth::cluster("", &[("n1", &[])]);
    let o = b.cli(&["nodes", "drain", "nope"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("no node `nope`") && err.contains("known nodes are n1"), "{err}");

    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["nodes", "drain", "n1"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).to_lowercase().contains("admin"), "{}", text(&o.stderr));
    assert_eq!(node(&b, "n1")["state"], "ready");

    // --heartbeat-timeout takes durations and refuses nonsense before starting anything.
    let o = b.cli(&["manager", "--heartbeat-timeout", "3d"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("out of range"), "{}", text(&o.stderr));
}

#[test]
fn a_queue_takes_the_nodes_labelled_for_it() {
    let b = Berth::cluster("", &[("n1", &["--label", "gpu=a100"]), ("n2", &[])]);
    assert_eq!(node(&b, "n1")["labels"]["gpu"], "a100");
    let o = b.cli(&["agent", "--manager", &b.url, "--join-token", "x", "--label", "gpu"]);
    assert_eq!(o.status.code(), Some(2), "a label without a value is a usage error");
    b.ok(&["admin", "queue", "create", "gpu", "--node-labels", "gpu=a100"]);
    assert_eq!(node(&b, "n1")["queue"], "gpu");
    assert_eq!(node(&b, "n2")["queue"], "default");
    let id = b.submit(&["--queue", "gpu", "--", "true"]);
    let done = b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["nodes"], serde_json::json!(["n1"]));
    b.ok(&["admin", "queue", "update", "gpu", "--node-labels", "none", "--nodes", "n2"]);
    assert_eq!(node(&b, "n1")["queue"], "default");
    assert_eq!(node(&b, "n2")["queue"], "gpu");
}
