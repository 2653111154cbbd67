//! Job arrays (`--array`, `#SBATCH --array`) from the `berth` binary: one submit however many
//! tasks, the part still to come kept as one row, the throttle never exceeded, each task a job
//! with its own state, log and exit code, and cancels of one task or the whole array.

mod support;

use serde_json::Value;
use support::{Berth, shared_tempdir, text};

/// The tasks the array has made so far, by index.
fn tasks(b: &Berth, array: i64) -> Vec<(u32, Value)> {
    let all = b.json(&["ps", "-a"]);
    let mut out: Vec<(u32, Value)> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["array_task"]["array_id"] == array)
        .map(|j| (j["array_task"]["index"].as_u64().unwrap() as u32, j.clone()))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

fn wait_tasks(b: &Berth, array: i64, n: usize) -> Vec<(u32, Value)> {
    let start = std::time::Instant::now();
    loop {
        let t = tasks(b, array);
        if t.len() >= n {
            return t;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "array {array} made {} tasks, not {n}", t.len());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn ten_thousand_tasks_are_one_submit_and_the_waiting_part_stays_one_row() {
    let mut b = Berth::up(&[]);
    // An image no node has holds the tasks once made.
    let array = b.submit(&["--array", "0-9999", "--image", "berth-test-absent:1", "--mem", "16MiB", "--", "true"]);
    // The first tasks are made as jobs (they wait for the image); the rest stay in the
    // array's own row, shown as Slurm shows it.
    let made = wait_tasks(&b, array, 1024);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(tasks(&b, array).len(), 1024, "at most 1024 made ahead");
    assert_eq!(made[0].1["state"], "PENDING");
    let ps = b.ok(&["ps"]);
    assert!(ps.contains(&format!("{array}_[1024-9999]")), "{ps}");
    assert!(ps.contains(&format!("{array}_0 ")), "{ps}");
    let j = b.job(array);
    assert_eq!(j["job"]["pending_reason"]["message"], "array: 1024 of 10000 tasks made, 1024 unfinished", "{j:#}");

    // A restarted manager knows which tasks it made: none twice, none more.
    b.restart();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(tasks(&b, array).len(), 1024);
    let ps = b.ok(&["ps"]);
    assert!(ps.contains(&format!("{array}_[1024-9999]")), "{ps}");

    // Cancelling the array cancels its tasks, made or not.
    let out = b.cli(&["cancel", &array.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    b.wait_state(array, "CANCELLED");
    let left = b.json(&["ps"]);
    assert_eq!(left.as_array().unwrap().len(), 0, "{left:#}");
    assert_eq!(tasks(&b, array).len(), 1024, "no task made after the cancel");
}

#[test]
fn the_throttle_is_never_exceeded_and_each_task_knows_its_index() {
    let b = Berth::up(&[]);
    let dir = shared_tempdir();
    let d = dir.path().display().to_string();
    let script = format!(
        "date +%s%N > {d}/start.$SLURM_ARRAY_TASK_ID; echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_MIN \
         $SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_COUNT > {d}/env.$SLURM_ARRAY_TASK_ID; sleep 0.3; \
         date +%s%N > {d}/end.$SLURM_ARRAY_TASK_ID"
    );
    let array = b.submit(&["--array", "1-6%1", "--cpus", "0.1", "--mem", "16MiB", "--", "sh", "-c", &script]);
    let j = b.wait_state(array, "SUCCEEDED");
    assert_eq!(j["job"]["reason"], "all 6 tasks succeeded", "{j:#}");
    let read = |f: String| std::fs::read_to_string(dir.path().join(f)).unwrap().trim().to_string();
    let mut spans: Vec<(u128, u128)> = (1..=6)
        .map(|i| (read(format!("start.{i}")).parse().unwrap(), read(format!("end.{i}")).parse().unwrap()))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[1].0 >= w[0].1, "two tasks ran at once under %1: {spans:?}");
    }
    assert_eq!(read("env.3".into()), format!("{array} 1 6 6"));
}

#[test]
fn each_task_has_its_state_log_and_exit_code_and_one_task_can_be_cancelled() {
    let b = Berth::up(&[]);
    let script = "echo task $SLURM_ARRAY_TASK_ID; exit $SLURM_ARRAY_TASK_ID";
    let array = b.submit(&["--array", "0-2", "--cpus", "0.1", "--mem", "16MiB", "--", "sh", "-c", script]);
    let j = b.wait_state(array, "FAILED");
    assert_eq!(j["job"]["reason"], "2 of 3 tasks failed");
    let t = tasks(&b, array);
    let states: Vec<(u32, &str, i64)> =
        t.iter().map(|(i, j)| (*i, j["state"].as_str().unwrap(), j["exit_code"].as_i64().unwrap())).collect();
    assert_eq!(states, [(0, "SUCCEEDED", 0), (1, "FAILED", 1), (2, "FAILED", 2)]);
    let id2 = t[2].1["id"].as_i64().unwrap();
    assert!(b.ok(&["logs", &id2.to_string()]).contains("task 2"));

    // One task cancelled by its array id, the other runs on.
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let wait = format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display());
    let array = b.submit(&["--array", "0-1", "--cpus", "0.1", "--mem", "16MiB", "--", "sh", "-c", &wait]);
    let t = wait_tasks(&b, array, 2);
    let first = t[0].1["id"].as_i64().unwrap();
    b.wait_state(first, "RUNNING");
    let out = b.cli(&["cancel", &format!("{array}_0")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    b.wait_state(first, "CANCELLED");
    assert_ne!(b.state(t[1].1["id"].as_i64().unwrap()), "CANCELLED");
    std::fs::write(&gate, "").unwrap();
    let j = b.wait_state(array, "CANCELLED");
    assert_eq!(j["job"]["reason"], "1 of 2 tasks cancelled");
    // An index outside the array is named as such; a malformed array is refused.
    let out = b.cli(&["cancel", &format!("{array}_7")]);
    assert!(!out.status.success());
    let wanted = format!("task {array}_7 is not in job array {array} (0-1)");
    assert!(text(&out.stderr).contains(&wanted), "{}", text(&out.stderr));
    let out = b.cli(&["submit", "--array", "5-1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ends before it starts"), "{}", text(&out.stderr));
}
