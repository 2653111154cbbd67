//! End to end through the real binary: `berth up`, submit, ps, show, logs, cancel, nodes, and
//! a restart that keeps every job and its history.

mod support;

use support::{Berth, text};

#[test]
fn a_job_runs_to_completion_and_its_output_and_history_are_visible() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--name", "hello", "--", "sh", "-c", "echo out-line; echo err-line >&2"]);
    let detail = b.wait_state(id, "SUCCEEDED");
    assert_eq!(detail["job"]["exit_code"], 0);
    assert_eq!(detail["job"]["name"], "hello");

    // every transition with time and reason, in order
    let states: Vec<&str> =
        detail["transitions"].as_array().unwrap().iter().map(|t| t["to"].as_str().unwrap()).collect();
    assert_eq!(states.first(), Some(&"PENDING"));
    assert!(states.contains(&"SCHEDULED") && states.contains(&"RUNNING"), "{states:?}");
    assert_eq!(states.last(), Some(&"SUCCEEDED"));
    // the binding: exact CPUs on the local node
    let binding = &detail["kernels"][0]["binding"];
    assert_eq!(binding["cpus"].as_array().unwrap().len(), 1, "{binding}");

    assert_eq!(b.ok(&["logs", &id.to_string()]), "out-line\n");
    assert_eq!(b.ok(&["logs", &id.to_string(), "--stderr"]), "err-line\n");

    let show = b.ok(&["show", &id.to_string()]);
    assert!(show.contains("SUCCEEDED") && show.contains("RUNNING"), "{show}");

    // finished jobs leave `ps` but stay in `ps --all`
    let all = b.json(&["ps", "--all"]);
    let finished = all.as_array().unwrap().iter().find(|j| j["id"] == id).expect("finished job in ps --all");
    // regression: finished jobs listed from the store lost the node they ran on
    assert_eq!(finished["nodes"].as_array().unwrap().len(), 1, "{finished}");
}

#[test]
fn wait_exits_with_the_jobs_exit_code() {
    let b = Berth::up(&[]);
    let o = b.cli(&["submit", "--wait", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let o = b.cli(&["submit", "--wait", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn job_file_and_script_directives_are_honoured() {
    let b = Berth::up(&[]);
    let dir = b.home.path();
    std::fs::write(
        dir.join("job.toml"),
        "name = \"from-toml\"\ncommand = [\"sh\", \"-c\", \"echo $GREETING\"]\nmem = \"64MiB\"\n[env]\nGREETING = \"hi from toml\"\n",
    )
    .unwrap();
    let id = b.submit(&[dir.join("job.toml").to_str().unwrap()]);
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["name"], "from-toml");
    assert_eq!(d["job"]["mem_bytes"], 64 << 20);
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hi from toml\n");

    std::fs::write(dir.join("job.sh"), "#!/bin/sh\n#BERTH --name scripted\n#BERTH --mem 96MiB\necho \"args: $1\"\n")
        .unwrap();
    let id = b.submit(&[dir.join("job.sh").to_str().unwrap(), "first"]);
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["name"], "scripted");
    assert_eq!(d["job"]["mem_bytes"], 96 << 20);
    assert_eq!(b.ok(&["logs", &id.to_string()]), "args: first\n");
}

#[test]
fn cancel_stops_a_running_job_and_a_pending_one() {
    let b = Berth::up(&[]);
    let running = b.submit(&["--", "sleep", "300"]);
    b.wait_state(running, "RUNNING");
    let o = b.cli(&["cancel", &running.to_string()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let d = b.wait_state(running, "CANCELLED");
    let last = d["transitions"].as_array().unwrap().last().unwrap().clone();
    assert!(last["reason"].as_str().unwrap().contains("cancel"), "{last}");

    // more CPUs than free: stays pending with a reason, then cancelled at once
    let cpus = std::thread::available_parallelism().unwrap().get();
    let hog = b.submit(&["--cpus", &cpus.to_string(), "--", "sleep", "300"]);
    b.wait_state(hog, "RUNNING");
    let waiting = b.submit(&["--", "true"]);
    let ps = b.json(&["ps"]);
    let w = ps.as_array().unwrap().iter().find(|j| j["id"] == waiting).unwrap().clone();
    assert_eq!(w["state"], "PENDING");
    assert_eq!(w["position"], 1);
    assert!(w["pending_reason"]["message"].as_str().unwrap().contains("CPU"), "{w}");
    b.ok(&["cancel", &waiting.to_string(), &hog.to_string()]);
    b.wait_state(waiting, "CANCELLED");
    b.wait_state(hog, "CANCELLED");
}

#[test]
fn restart_keeps_every_job_and_its_history() {
    let mut b = Berth::up(&[]);
    let done = b.submit(&["--", "echo", "before restart"]);
    b.wait_state(done, "SUCCEEDED");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let hog = b.submit(&["--cpus", &cpus.to_string(), "--", "sleep", "300"]);
    b.wait_state(hog, "RUNNING");
    let too_big_now = b.submit(&["--cpus", &cpus.to_string(), "--", "true"]);
    assert_eq!(b.state(too_big_now), "PENDING");
    let history_before = b.job(done)["transitions"].clone();

    let statuses = b.stop();
    assert!(statuses.iter().all(|s| s.success()), "berth up exits 0 on Ctrl-C: {statuses:?}");
    b.restart();

    assert_eq!(b.job(done)["transitions"], history_before);
    assert_eq!(b.ok(&["logs", &done.to_string()]), "before restart\n");
    // the job that was running when berth stopped runs on: taken over, not restarted
    let h = b.job(hog);
    assert_eq!(h["job"]["state"], "RUNNING", "{h:#}");
    assert_eq!(h["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count(), 1, "{h:#}");
    // the pending job is still there and runs once the CPUs are free
    assert_eq!(b.state(too_big_now), "PENDING");
    b.ok(&["cancel", &hog.to_string()]);
    b.wait_state(too_big_now, "SUCCEEDED");
    // ids keep counting
    let next = b.submit(&["--", "true"]);
    assert!(next > too_big_now);
}

#[test]
fn nodes_shows_the_local_agent_with_its_cpus_and_gpus() {
    let b = Berth::up(&["--fake-gpus", "2"]);
    let nodes = b.json(&["nodes"]);
    let n = &nodes[0];
    assert_eq!(n["state"], "ready");
    assert_eq!(n["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(n["cpus_total"].as_u64().unwrap() as usize, std::thread::available_parallelism().unwrap().get());
    let table = b.ok(&["nodes"]);
    assert!(table.contains("ready"), "{table}");
}

/// Regression: `berth up` as root with its data dir under a 0700 directory (like `/root`) made
/// every job fail with "permission denied", because `nobody` could not reach its work dir.
#[test]
fn jobs_run_when_the_data_dir_is_closed_to_the_run_user() {
    let b = Berth::up_private(&[]);
    let id = b.submit(&["--", "sh", "-c", "pwd > /dev/null && echo ran"]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "ran\n");
}
