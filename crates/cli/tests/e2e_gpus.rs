//! Fractional GPUs end to end with fake GPUs: Backend.AI's demo, exact GPU bindings and the
//! environment a kernel sees.

mod support;

use support::Berth;

fn position_and_reason(b: &Berth, id: i64) -> (serde_json::Value, String) {
    let ps = b.json(&["ps"]);
    let j = ps.as_array().unwrap().iter().find(|j| j["id"] == id).expect("job in ps").clone();
    (j["position"].clone(), j["pending_reason"]["message"].as_str().unwrap_or("").to_string())
}

/// Backend.AI's demo: one node with one GPU, three jobs of 0.5 GPU. Two run, one waits with
/// its reason; cancel a running one and the waiting one starts.
#[test]
fn backend_ai_demo_two_halves_run_the_third_waits_then_starts() {
    let b = Berth::up(&["--fake-gpus", "1"]);
    let a = b.submit(&["--gpus", "0.5", "--", "sleep", "300"]);
    let c = b.submit(&["--gpus", "0.5", "--", "sleep", "300"]);
    b.wait_state(a, "RUNNING");
    b.wait_state(c, "RUNNING");
    let third = b.submit(&["--gpus", "0.5", "--", "sleep", "300"]);
    // give the scheduler a pass; the job must still be pending with a GPU reason
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(b.state(third), "PENDING");
    let (pos, reason) = position_and_reason(&b, third);
    assert_eq!(pos, 1);
    assert!(reason.contains("GPU") && reason.contains("0.5"), "reason: {reason}");

    // both running halves share the one GPU
    let ga = &b.job(a)["kernels"][0]["binding"]["gpus"][0];
    let gc = &b.job(c)["kernels"][0]["binding"]["gpus"][0];
    assert_eq!(ga["uuid"], gc["uuid"]);
    assert_eq!(ga["milli"], 500);
    let nodes = b.json(&["nodes"]);
    assert_eq!(nodes[0]["gpus"][0]["used_milli"], 1000);

    b.ok(&["cancel", &a.to_string()]);
    b.wait_state(a, "CANCELLED");
    b.wait_state(third, "RUNNING");
    b.ok(&["cancel", &c.to_string(), &third.to_string()]);
}

#[test]
fn half_and_seven_tenths_do_not_share_a_gpu() {
    let b = Berth::up(&["--fake-gpus", "1"]);
    let half = b.submit(&["--gpus", "0.5", "--", "sleep", "300"]);
    b.wait_state(half, "RUNNING");
    let big = b.submit(&["--gpus", "0.7", "--", "true"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(b.state(big), "PENDING");
    b.ok(&["cancel", &half.to_string()]);
    b.wait_state(big, "SUCCEEDED");
}

#[test]
fn a_kernel_sees_its_gpus_and_cpus_in_its_environment() {
    let b = Berth::up(&["--fake-gpus", "2"]);
    let id = b.submit(&[
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        "echo gpus=$CUDA_VISIBLE_DEVICES job=$BERTH_JOB_ID; grep Cpus_allowed_list /proc/self/status",
    ]);
    let d = b.wait_state(id, "SUCCEEDED");
    let binding = &d["kernels"][0]["binding"];
    let uuid = binding["gpus"][0]["uuid"].as_str().unwrap();
    let out = b.ok(&["logs", &id.to_string()]);
    assert!(out.contains(&format!("gpus={uuid} job={id}")), "{out}");
    if support::cgroups_usable() {
        let cpus: Vec<String> = binding["cpus"].as_array().unwrap().iter().map(|c| c.to_string()).collect();
        assert!(out.contains(&format!("Cpus_allowed_list:\t{}", cpus.join(","))), "{out} vs {binding}");
    }
}
