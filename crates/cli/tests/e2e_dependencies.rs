//! Job dependencies and begin times (Slurm's `--dependency`, `--begin`), from the `berth`
//! binary: held jobs wait with a reason that names the job they wait for, start once it got
//! where they need it, and a dependency that can never be met cancels the dependent (or, with
//! `kill_invalid_depend = false`, keeps it pending with that reason).

mod support;

use std::path::Path;

use support::{Berth, shared_tempdir, text};

/// A job that runs until `gate` exists, then exits with `code`.
fn gated(b: &Berth, gate: &Path, code: i32, extra: &[&str]) -> i64 {
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; exit {code}", gate.display());
    let mut args: Vec<&str> = vec!["--cpus", "0.1", "--mem", "32MiB"];
    args.extend(extra);
    args.extend(["--", "sh", "-c", &script]);
    b.submit(&args)
}

fn quick(b: &Berth, extra: &[&str]) -> i64 {
    let mut args: Vec<&str> = vec!["--cpus", "0.1", "--mem", "32MiB"];
    args.extend(extra);
    args.extend(["--", "true"]);
    b.submit(&args)
}

fn reason(b: &Berth, id: i64) -> String {
    b.job(id)["job"]["pending_reason"]["message"].as_str().unwrap_or_default().to_string()
}

fn wait_reason(b: &Berth, id: i64, part: &str) -> String {
    b.wait_job(id, &format!("a reason with `{part}`"), |j| {
        j["job"]["pending_reason"]["message"].as_str().is_some_and(|m| m.contains(part))
    })["job"]["pending_reason"]["message"]
        .as_str()
        .unwrap()
        .to_string()
}

fn ts(j: &serde_json::Value, field: &str) -> jiff::Timestamp {
    j["job"][field].as_str().unwrap_or_else(|| panic!("no {field}: {j:#}")).parse().unwrap()
}

#[test]
fn a_chain_of_three_runs_in_order_and_a_fan_in_waits_for_every_job() {
    let b = Berth::up(&[]);
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let a = gated(&b, &gate, 0, &[]);
    let bb = quick(&b, &["--dependency", &format!("afterok:{a}")]);
    let c = quick(&b, &["--dependency", &format!("afterok:{bb}")]);
    // A fan-in: one failing and one succeeding job, and a job after both whatever they did.
    let fails = gated(&b, &gate, 3, &[]);
    let fan = quick(&b, &["--dependency", &format!("afterany:{a}:{fails}")]);

    b.wait_state(a, "RUNNING");
    assert_eq!(wait_reason(&b, bb, "dependency"), format!("dependency: waits for {a} (RUNNING)"));
    assert_eq!(wait_reason(&b, c, "dependency"), format!("dependency: waits for {bb} (PENDING)"));
    assert!(reason(&b, fan).starts_with("dependency: waits for"), "{}", reason(&b, fan));
    // Held jobs take no place in the queue.
    assert!(b.job(bb)["job"]["position"].is_null(), "{:#}", b.job(bb));
    let ps = b.ok(&["ps"]);
    assert!(ps.contains(&format!("waits for {a} (RUNNING)")), "{ps}");
    let show = b.ok(&["show", &c.to_string()]);
    assert!(show.contains(&format!("afterok:{bb}")), "{show}");

    std::fs::write(&gate, "").unwrap();
    let ja = b.wait_state(a, "SUCCEEDED");
    let jb = b.wait_state(bb, "SUCCEEDED");
    let jc = b.wait_state(c, "SUCCEEDED");
    assert!(ts(&jb, "started_at") >= ts(&ja, "ended_at"), "b started before a ended");
    assert!(ts(&jc, "started_at") >= ts(&jb, "ended_at"), "c started before b ended");
    let jf = b.wait_state(fails, "FAILED");
    let jfan = b.wait_state(fan, "SUCCEEDED");
    assert!(ts(&jfan, "started_at") >= ts(&jf, "ended_at"));
    assert!(ts(&jfan, "started_at") >= ts(&ja, "ended_at"));
}

#[test]
fn a_dependency_that_can_never_be_met_cancels_the_job_and_one_already_impossible_is_refused() {
    let b = Berth::up(&[]);
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let failing = gated(&b, &gate, 1, &[]);
    let after_ok = quick(&b, &["--dependency", &format!("afterok:{failing}")]);
    let after_not_ok = quick(&b, &["--dependency", &format!("afternotok:{failing}")]);
    wait_reason(&b, after_ok, "dependency: waits for");
    std::fs::write(&gate, "").unwrap();
    b.wait_state(failing, "FAILED");
    let j = b.wait_state(after_ok, "CANCELLED");
    assert_eq!(j["job"]["end_cause"], "dependency", "{j:#}");
    let why = j["job"]["reason"].as_str().unwrap();
    assert_eq!(why, format!("dependency never satisfied: afterok:{failing}: job {failing} ended FAILED"));
    b.wait_state(after_not_ok, "SUCCEEDED");

    // Submitting against the failed job now is refused, saying why.
    let out = b.cli(&["submit", "--dependency", &format!("afterok:{failing}"), "--", "true"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("can never be satisfied") && err.contains("FAILED"), "{err}");
    // Malformed, or naming no job: refused before anything is stored.
    let out = b.cli(&["submit", "--dependency", "afterok:1,afterany:2?afterok:3", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot be mixed"), "{}", text(&out.stderr));
    let out = b.cli(&["submit", "--dependency", "afterok:999", "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no job 999"), "{}", text(&out.stderr));
}

#[test]
fn another_users_job_is_no_dependency_target_and_singletons_run_one_at_a_time() {
    let b = Berth::up(&[]);
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let admins = gated(&b, &dir.path().join("admins"), 0, &[]);
    let alice = b.create_user("alice");
    let out = b.cli_as(&alice, &["submit", "--dependency", &format!("afterany:{admins}"), "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!("no job {admins} (or it is not yours to see)")),
        "a job she cannot see answers like one that does not exist: {}",
        text(&out.stderr)
    );
    // Each job takes a whole CPU of the (maybe two-CPU) machine.
    std::fs::write(dir.path().join("admins"), "").unwrap();
    b.wait_state(admins, "SUCCEEDED");

    let first = gated(&b, &gate, 0, &["--name", "nightly", "--dependency", "singleton"]);
    let second = quick(&b, &["--name", "nightly", "--dependency", "singleton"]);
    let other_name = quick(&b, &["--name", "weekly", "--dependency", "singleton"]);
    b.wait_state(first, "RUNNING");
    assert_eq!(
        wait_reason(&b, second, "singleton"),
        format!("dependency: singleton: waits for {first} (RUNNING) of the same name")
    );
    b.wait_state(other_name, "SUCCEEDED");
    std::fs::write(&gate, "").unwrap();
    let j1 = b.wait_state(first, "SUCCEEDED");
    let j2 = b.wait_state(second, "SUCCEEDED");
    assert!(ts(&j2, "started_at") >= ts(&j1, "ended_at"));
}

#[test]
fn begin_times_hold_a_job_and_sbatch_lines_take_both_options() {
    let b = Berth::up(&[]);
    let later = quick(&b, &["--begin", "now+1hour"]);
    let why = wait_reason(&b, later, "begins at");
    assert_eq!(b.job(later)["job"]["pending_reason"]["kind"], "begin-time", "{why}");
    let now = quick(&b, &["--begin", "now"]);
    b.wait_state(now, "SUCCEEDED");
    let out = b.cli(&["submit", "--begin", "soon", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad time `soon`"), "{}", text(&out.stderr));

    let dir = shared_tempdir();
    let script = dir.path().join("after.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\n#SBATCH --dependency=afterok:{now}\n#SBATCH -b now\n#SBATCH --mem=32M\necho after\n"),
    )
    .unwrap();
    let id = b.submit(&[script.to_str().unwrap()]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.job(id)["spec"]["dependency"]["conditions"][0]["job"], now);

    std::fs::write(&script, "#!/bin/sh\n#SBATCH --mem=32M\n#SBATCH --dependency=afterok:x\ntrue\n").unwrap();
    let out = b.cli(&["submit", script.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("after.sh:3:") && err.contains("`x` is not a job id"), "{err}");
}

#[test]
fn kill_invalid_depend_off_keeps_the_job_pending_with_the_reason() {
    let b = Berth::up_with_config("kill_invalid_depend = false\n", &[]);
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let failing = gated(&b, &gate, 1, &[]);
    let dependent = quick(&b, &["--dependency", &format!("afterok:{failing}")]);
    wait_reason(&b, dependent, "waits for");
    std::fs::write(&gate, "").unwrap();
    b.wait_state(failing, "FAILED");
    let why = wait_reason(&b, dependent, "never satisfied");
    assert_eq!(why, format!("dependency never satisfied: afterok:{failing}: job {failing} ended FAILED"));
    assert_eq!(b.state(dependent), "PENDING");
    // It stays until someone cancels it.
    b.ok(&["cancel", &dependent.to_string()]);
    b.wait_state(dependent, "CANCELLED");
}

/// An array of `spec` whose task N runs until `dir/go.N` exists.
fn gated_array(b: &Berth, dir: &Path, spec: &str) -> i64 {
    let script = format!("while [ ! -e {}/go.$SLURM_ARRAY_TASK_ID ]; do sleep 0.05; done", dir.display());
    b.submit(&["--array", spec, "--cpus", "0.1", "--mem", "32MiB", "--", "sh", "-c", &script])
}

/// The job of task `index` of `array`, once the array has made it.
fn task(b: &Berth, array: i64, index: u32) -> i64 {
    let start = std::time::Instant::now();
    loop {
        let all = b.json(&["ps", "-a"]);
        let found = all.as_array().unwrap().iter().find(|j| {
            j["array_task"]["array_id"] == array && j["array_task"]["index"].as_u64() == Some(u64::from(index))
        });
        if let Some(j) = found {
            return j["id"].as_i64().unwrap();
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "task {array}_{index} was never made");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn made(b: &Berth, array: i64, index: u32) -> bool {
    let all = b.json(&["ps", "-a"]);
    all.as_array()
        .unwrap()
        .iter()
        .any(|j| j["array_task"]["array_id"] == array && j["array_task"]["index"].as_u64() == Some(u64::from(index)))
}

/// Issue 20: `afterok:A_2` names task 2 of array A alone. It waits while the array has not
/// made the task yet (through a manager restart), starts once that task succeeded though a
/// later task still runs, and `afternotok` on a task that succeeded is never satisfied.
#[test]
fn a_dependency_on_one_array_task_waits_for_that_task_alone_even_before_it_is_made() {
    let mut b = Berth::up(&[]);
    let dir = shared_tempdir();
    let go = |i: u32| std::fs::write(dir.path().join(format!("go.{i}")), "").unwrap();
    let a = gated_array(&b, dir.path(), "0-3%1");
    let after_2 = quick(&b, &["--dependency", &format!("afterok:{a}_2")]);
    let not_ok_1 = quick(&b, &["--dependency", &format!("afternotok:{a}_1")]);
    let whole = quick(&b, &["--dependency", &format!("afterok:{a}")]);
    b.wait_state(task(&b, a, 0), "RUNNING");
    assert_eq!(wait_reason(&b, after_2, "dependency"), format!("dependency: waits for {a}_2 (PENDING)"));
    assert!(!made(&b, a, 2), "the throttle (%1) keeps task 2 unmade");
    let show = b.ok(&["show", &after_2.to_string()]);
    assert!(show.contains(&format!("afterok:{a}_2")) && show.contains(&format!("waits for {a}_2")), "{show}");

    // Refused at submit: an index outside the array, a range, a malformed index.
    let out = b.cli(&["submit", "--dependency", &format!("afterok:{a}_9"), "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&format!("task {a}_9 is not in job array {a} (0-3)")), "{}", text(&out.stderr));
    let out = b.cli(&["submit", "--dependency", &format!("afterok:{a}_[1-2]"), "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("list them, e.g. afterok:{a}_1:{a}_2")), "{}", text(&out.stderr));
    let out = b.cli(&["submit", "--dependency", "afterok:12_x", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("`x` is not an array task index"), "{}", text(&out.stderr));

    // A restarted manager rebuilds it from the store: still waiting for the unmade task.
    b.restart();
    assert_eq!(b.state(after_2), "PENDING");
    assert_eq!(wait_reason(&b, after_2, "dependency"), format!("dependency: waits for {a}_2 (PENDING)"));

    go(0);
    go(1);
    b.wait_state(task(&b, a, 1), "SUCCEEDED");
    let j = b.wait_state(not_ok_1, "CANCELLED");
    assert_eq!(j["job"]["end_cause"], "dependency", "{j:#}");
    assert_eq!(j["job"]["reason"], format!("dependency never satisfied: afternotok:{a}_1: job {a}_1 ended SUCCEEDED"));
    assert_eq!(b.state(after_2), "PENDING", "task 2 has not run yet");
    go(2);
    let t2 = b.wait_state(task(&b, a, 2), "SUCCEEDED");
    let after = b.wait_state(after_2, "SUCCEEDED");
    assert!(ts(&after, "started_at") >= ts(&t2, "ended_at"), "started before task 2 ended");
    // It did not wait for the whole array: task 3 still runs, its gate shut.
    assert_eq!(b.state(task(&b, a, 3)), "RUNNING");
    assert_eq!(b.state(a), "PENDING");
    assert_eq!(b.state(whole), "PENDING", "afterok on the array waits for every task");
    go(3);
    let ja = b.wait_state(a, "SUCCEEDED");
    let jw = b.wait_state(whole, "SUCCEEDED");
    assert!(ts(&jw, "started_at") >= ts(&ja, "ended_at"), "started before the array ended");
}

/// Issue 20: a task cancelled before its array made it (`berth cancel A_1`) ends a dependency
/// on it like any cancelled job: `afterok` never satisfied, `afterany` met, and a new
/// `afterok` on it refused at submit.
#[test]
fn a_task_cancelled_before_it_was_made_resolves_like_any_cancelled_job() {
    let b = Berth::up(&[]);
    let dir = shared_tempdir();
    let a = gated_array(&b, dir.path(), "0-1%1");
    let ok = quick(&b, &["--dependency", &format!("afterok:{a}_1")]);
    let any = quick(&b, &["--dependency", &format!("afterany:{a}_1")]);
    b.wait_state(task(&b, a, 0), "RUNNING");
    wait_reason(&b, ok, &format!("waits for {a}_1 (PENDING)"));
    b.ok(&["cancel", &format!("{a}_1")]);
    let j = b.wait_state(ok, "CANCELLED");
    assert_eq!(j["job"]["reason"], format!("dependency never satisfied: afterok:{a}_1: job {a}_1 ended CANCELLED"));
    b.wait_state(any, "SUCCEEDED");
    let out = b.cli(&["submit", "--dependency", &format!("afterok:{a}_1"), "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("can never be satisfied"), "{}", text(&out.stderr));
    let out = b.cli(&["submit", "--dependency", &format!("afterok:{ok}_0"), "--", "true"]);
    assert!(text(&out.stderr).contains(&format!("job {ok} is not a job array")), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("go.0"), "").unwrap();
    b.wait_state(a, "CANCELLED");
}
