//! Python environments through the real binary and a real uv (docs/environments.md): the
//! first job builds its environment (PREPARING, with a setup log), the next job with the same
//! inputs reuses it, other inputs build another, a requirement that does not exist fails the
//! job with uv's own message, and a job stopped during its build ends cancelled.
//!
//! Needs uv (`BERTH_TEST_UV`, installed by scripts/test.sh from PyPI) and PyPI itself; the
//! environments use the system python3's version (uv downloads no Pythons).

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Berth, PATIENCE, text};

/// uv, or `None` after printing why the test is skipped.
fn uv() -> Option<String> {
    match std::env::var("BERTH_TEST_UV") {
        Ok(uv) if !uv.is_empty() => Some(uv),
        _ => {
            println!("SKIPPED: BERTH_TEST_UV is not set (scripts/test.sh installs uv from PyPI)");
            None
        }
    }
}

/// `3.11`: the version of the python3 the nodes have.
fn python_version() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
        .output()
        .expect("python3 runs");
    text(&out.stdout).trim().to_string()
}

/// The environment key a setup log names (`environment <key>: python ...`).
fn key_in(setup_log: &str) -> String {
    let first = setup_log.lines().next().unwrap_or_default();
    let key = first.strip_prefix("environment ").and_then(|r| r.split(':').next()).unwrap_or_default();
    assert_eq!(key.len(), 64, "no key in the setup log: {setup_log}");
    key.to_string()
}

#[test]
fn jobs_build_an_environment_once_per_node_and_reuse_it() {
    let Some(uv) = uv() else { return };
    let b = Berth::up(&["--uv", &uv]);
    let py = python_version();
    let submit_dir = b.home.path().join("submit");
    std::fs::write(submit_dir.join("requirements.txt"), "six==1.16.0\n").unwrap();
    let check = "import six, sys; print(six.__version__, sys.prefix)";
    let job = |req: &str| b.submit(&["--python", &py, "--requirements", req, "--", "python", "-c", check]);

    // The first job builds it: SCHEDULED -> PREPARING -> RUNNING, and says so.
    let first = job("requirements.txt");
    b.wait_state(first, "SUCCEEDED");
    let out = b.ok(&["logs", &first.to_string()]);
    assert!(out.starts_with("1.16.0 ") && out.contains("/envs/"), "the job's python is not the env's: {out}");
    let setup1 = b.ok(&["logs", "--setup", &first.to_string()]);
    let key = key_in(&setup1);
    assert!(setup1.contains(&format!("built environment {key}")), "{setup1}");
    // The job printed its sys.prefix: the environment's directory, which a rebuild would replace.
    let prefix = out.trim_end().split_once(' ').map(|(_, p)| p.to_string()).unwrap();
    let built = std::fs::metadata(&prefix).unwrap_or_else(|e| panic!("{prefix}: {e}"));

    // The second starts without a build.
    let second = job("requirements.txt");
    b.wait_state(second, "SUCCEEDED");
    let setup2 = b.ok(&["logs", "--setup", &second.to_string()]);
    assert!(setup2.contains(&format!("reused environment {key}")), "{setup2}");
    assert!(!setup2.contains("built environment"), "{setup2}");
    // Reused, not rebuilt: the same directory, untouched (no wall-clock comparison: the
    // machines are shared and noisy).
    assert_eq!(b.ok(&["logs", &second.to_string()]).trim_end(), out.trim_end());
    let reused = std::fs::metadata(&prefix).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((reused.ino(), reused.mtime(), reused.mtime_nsec()), (built.ino(), built.mtime(), built.mtime_nsec()));

    // A job file's [environment], its file relative to the job file: the same inputs, reused.
    let jobs = b.home.path().join("submit/jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::copy(submit_dir.join("requirements.txt"), jobs.join("reqs.txt")).unwrap();
    let file = jobs.join("env.toml");
    std::fs::write(
        &file,
        format!(
            "command = [\"python\", \"-c\", \"import six\"]\n[environment]\npython = \"{py}\"\nrequirements = \"reqs.txt\"\n"
        ),
    )
    .unwrap();
    let from_file = b.submit(&[file.to_str().unwrap()]);
    b.wait_state(from_file, "SUCCEEDED");
    assert!(b.ok(&["logs", "--setup", &from_file.to_string()]).contains(&format!("reused environment {key}")));

    // Other requirements: another environment, with its own key.
    std::fs::write(submit_dir.join("more.txt"), "six==1.16.0\nidna==3.7\n").unwrap();
    let other = b.submit(&["--python", &py, "--requirements", "more.txt", "--", "python", "-c", "import idna, six"]);
    b.wait_state(other, "SUCCEEDED");
    let setup3 = b.ok(&["logs", "--setup", &other.to_string()]);
    let key3 = key_in(&setup3);
    assert_ne!(key3, key);
    assert!(setup3.contains(&format!("built environment {key3}")), "{setup3}");

    // `berth env ls` shows both, unused now; `env rm` deletes one, and the next job builds it again.
    let listed = wait_for_envs(&b, 2);
    assert!(listed.iter().all(|e| e["in_use"] == 0 && e["python"] == py.as_str()), "{listed:?}");
    let table = b.ok(&["env", "ls"]);
    assert!(table.contains(&key[..12]) && table.contains(&key3[..12]), "{table}");
    let removed = b.ok(&["env", "rm", &key[..8]]);
    assert!(removed.contains(&key[..12]), "{removed}");
    assert!(!b.ok(&["env", "ls"]).contains(&key[..12]));
    let again = job("requirements.txt");
    b.wait_state(again, "SUCCEEDED");
    assert!(b.ok(&["logs", "--setup", &again.to_string()]).contains(&format!("built environment {key}")));

    // An environment does not go with an image: refused at submit.
    let o = b.cli(&["submit", "--image", "busybox:1", "--python", &py, "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("cannot have an environment"), "{}", text(&o.stderr));
}

/// The environments `berth env ls -o json` lists, once there are `n`.
fn wait_for_envs(b: &Berth, n: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let nodes = b.json(&["env", "ls"]);
        let envs: Vec<Value> =
            nodes.as_array().unwrap().iter().flat_map(|n| n["envs"].as_array().unwrap().clone()).collect();
        if envs.len() == n || start.elapsed() > PATIENCE {
            return envs;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_requirement_that_does_not_exist_fails_the_job_with_uvs_message() {
    let Some(uv) = uv() else { return };
    let b = Berth::up(&["--uv", &uv]);
    let dir = b.home.path().join("submit");
    std::fs::write(dir.join("bad.txt"), "berth-no-such-package-xyz==1.0\n").unwrap();
    let id = b.submit(&["--python", &python_version(), "--requirements", "bad.txt", "--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("environment build failed: "), "{reason}");
    assert!(reason.contains("No solution found") && reason.contains("berth-no-such-package-xyz"), "{reason}");
    assert_eq!(d["job"]["end_cause"], "launch_failed", "{d:#}");
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(setup.contains("environment build failed after"), "{setup}");
    // Nothing half-built stays in the cache.
    assert!(b.json(&["env", "ls"]).as_array().unwrap().iter().all(|n| n["envs"].as_array().unwrap().is_empty()));
}

/// A local package whose build takes `secs` seconds (its `setup.py` sleeps), in the test's
/// submit dir; returns the requirements file naming it.
fn slow_package(b: &Berth, secs: u32) -> &'static str {
    let pkg = b.home.path().join("submit/slowpkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("setup.py"),
        format!(
            "import time\ntime.sleep({secs})\nfrom setuptools import setup\nsetup(name='slowpkg', version='1.0')\n"
        ),
    )
    .unwrap();
    std::fs::write(b.home.path().join("submit/slow.txt"), format!("slowpkg @ file://{}\n", pkg.display())).unwrap();
    "slow.txt"
}

/// Two jobs that need the same environment at once: one kernel builds it, the other waits for
/// that build instead of starting its own, and both run with it.
#[test]
fn two_jobs_that_need_one_environment_share_its_build() {
    let Some(uv) = uv() else { return };
    let b = Berth::up(&["--uv", &uv]);
    let req = slow_package(&b, 3);
    let py = python_version();
    let ids: Vec<i64> = (0..2)
        .map(|_| {
            b.submit(&["--cpus", "0.5", "--python", &py, "--requirements", req, "--", "python", "-c", "import slowpkg"])
        })
        .collect();
    let mut logs = Vec::new();
    for id in &ids {
        b.wait_state(*id, "SUCCEEDED");
        logs.push(b.ok(&["logs", "--setup", &id.to_string()]));
    }
    let built = logs.iter().filter(|l| l.contains("built environment")).count();
    let waited = logs.iter().filter(|l| l.contains("waited for environment")).count();
    assert_eq!((built, waited), (1, 1), "{logs:#?}");
}

/// A package whose build takes a minute (its `setup.py` sleeps): the job is PREPARING with
/// progress until it is cancelled, then ends CANCELLED and uv is gone.
#[test]
fn a_job_cancelled_during_its_build_stops_uv() {
    let Some(uv) = uv() else { return };
    let b = Berth::up(&["--uv", &uv]);
    let req = slow_package(&b, 120);
    let id = b.submit(&["--python", &python_version(), "--requirements", req, "--", "true"]);
    let d = b.wait_state(id, "PREPARING");
    assert_eq!(d["job"]["setup"]["step"], "environment", "{d:#}");
    let ps = b.ok(&["ps"]);
    assert!(ps.contains("PREPARING") && ps.contains("env build "), "{ps}");
    let show = b.ok(&["show", &id.to_string()]);
    assert!(show.lines().any(|l| l.starts_with("setup:") && l.contains("env build ") && l.contains("since")), "{show}");
    // The build runs (uv resolving, or setup.py sleeping) until the job is cancelled.
    // uv's command line names its temp dir in this test's data dir.
    let pattern = format!("{}/agent/envs/.build-", b.data.display());
    let building = || {
        let out = std::process::Command::new("pgrep").args(["-f", &pattern]).output();
        out.map(|o| !o.stdout.is_empty()).unwrap_or(false)
    };
    // Seen once is enough: between uv's steps (venv, then pip install) no process matches for
    // a moment, so a second look could miss a build that is under way (a flake under load).
    let start = Instant::now();
    let mut seen = building();
    while !seen && start.elapsed() < PATIENCE {
        std::thread::sleep(Duration::from_millis(100));
        seen = building();
    }
    assert!(seen, "no uv build of job {id} seen");
    b.ok(&["cancel", &id.to_string()]);
    let d = b.wait_state(id, "CANCELLED");
    assert!(d["transitions"].as_array().unwrap().iter().all(|t| t["to"] != "RUNNING"), "{d:#}");
    let start = Instant::now();
    while building() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!building(), "uv or its build still runs after the cancel");
}

/// A job of a berth user with no Unix account (a uid of the agent's range): uv runs as that
/// uid, and what enters the cache is root's and read-only, so no later kernel runs with files
/// its builder could still change.
#[test]
fn an_environment_is_built_as_the_kernels_user_and_sealed() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(uv) = uv() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: not root: the agent cannot run builds as other users");
        return;
    }
    // uv where the job's uid can run it (the test's uv may sit in root's home).
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared_uv = shared.path().join("uv");
    std::fs::copy(&uv, &shared_uv).unwrap();
    std::fs::set_permissions(&shared_uv, std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up(&["--uv", shared_uv.to_str().unwrap()]);
    let bob = b.create_user("bob");
    let req = b.home.path().join("submit/requirements.txt");
    std::fs::write(&req, "six==1.16.0\n").unwrap();
    let py = python_version();
    let check = "import os, six; print(os.getuid())";
    let id = b.submit_as(
        &bob,
        &["--job-dir", "--python", &py, "--requirements", req.to_str().unwrap(), "--", "python", "-c", check],
    );
    b.wait_state(id, "SUCCEEDED");
    let uid: u32 = b.ok(&["logs", &id.to_string()]).trim().parse().unwrap();
    assert_ne!(uid, 0);
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(setup.contains("with uv as user berth-bob"), "{setup}");
    let key = key_in(&setup);
    let kernel_dir = b.data.join(format!("agent/kernels/{id}.0.0"));
    let log = std::fs::metadata(kernel_dir.join("setup.log")).unwrap();
    assert_eq!((log.uid(), log.mode() & 0o777), (uid, 0o600));
    // every file of the environment: root's, nobody else may write
    let mut todo = vec![b.data.join("agent/envs").join(&key)];
    let mut seen = 0;
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(m.uid(), 0, "{} is not root's", p.display());
        if !m.file_type().is_symlink() {
            assert_eq!(m.mode() & 0o7022, 0, "{} is writable by others or set-id: {:o}", p.display(), m.mode());
        }
        if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        seen += 1;
    }
    assert!(seen > 10, "only {seen} files in the environment");
}

/// Past `--env-cache-size` the least recently used environment no kernel uses goes after the
/// next build; the one a job just built stays while it runs.
#[test]
fn environments_past_the_cache_size_are_evicted_least_recently_used_first() {
    let Some(uv) = uv() else { return };
    let b = Berth::up(&["--uv", &uv, "--env-cache-size", "1KiB"]);
    let py = python_version();
    let dir = b.home.path().join("submit");
    std::fs::write(dir.join("one.txt"), "six==1.16.0\n").unwrap();
    std::fs::write(dir.join("two.txt"), "idna==3.7\n").unwrap();
    let run = |req: &str| {
        let id = b.submit(&["--python", &py, "--requirements", req, "--", "true"]);
        b.wait_state(id, "SUCCEEDED");
        key_in(&b.ok(&["logs", "--setup", &id.to_string()]))
    };
    let one = run("one.txt");
    // over 1 KiB already, but its job used it: kept until the next build
    assert_eq!(wait_for_envs(&b, 1)[0]["key"], one.as_str());
    let two = run("two.txt");
    // the agent reports its cache after the build and the eviction: wait for the one with `two`
    let start = Instant::now();
    let left = loop {
        let envs = wait_for_envs(&b, 1);
        if envs.iter().any(|e| e["key"] == two.as_str()) || start.elapsed() > PATIENCE {
            break envs;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["key"], two.as_str(), "{left:?}");
    assert!(!b.data.join("agent/envs").join(&one).exists());
}

/// `berth up` stopped while a job's environment builds: the build dies with the agent, the
/// job stays PREPARING, and the restarted agent, told to start the kernel again, builds anew
/// (in a temp dir of its own; the old one is removed).
#[test]
fn a_build_lost_with_its_agent_starts_again() {
    let Some(uv) = uv() else { return };
    let mut b = Berth::up(&["--uv", &uv]);
    let req = slow_package(&b, 120);
    let id = b.submit(&["--python", &python_version(), "--requirements", req, "--", "true"]);
    let envs = b.data.join("agent/envs");
    let builds = || -> Vec<String> {
        let names = std::fs::read_dir(&envs).into_iter().flatten().flatten();
        names.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(".build-")).collect()
    };
    let start = Instant::now();
    while builds().is_empty() && start.elapsed() < PATIENCE {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = builds();
    assert_eq!(before.len(), 1, "{before:?}");
    b.restart();
    let start = Instant::now();
    let after = loop {
        let now = builds();
        if (!now.is_empty() && now != before) || start.elapsed() > PATIENCE {
            break now;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(after.len() == 1 && after != before, "before {before:?}, after {after:?}");
    assert_eq!(b.state(id), "PREPARING");
    b.ok(&["cancel", &id.to_string()]);
    b.wait_state(id, "CANCELLED");
}
