//! The process runtime for real on this machine: exit codes, logs, time limit, stop, OOM,
//! cpuset, run user, leftover processes. Checks that need root or cgroups print
//! `SKIPPED: ...` when the machine cannot do them.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use berth_agent::runtime::{Runtime, RuntimeOptions};
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome};
use berth_model::{Binding, JobSpec};
use common::{binding, key};
use tokio::sync::mpsc;

struct Rt {
    rt: Runtime,
    tx: mpsc::UnboundedSender<(KernelKey, KernelEvent)>,
    rx: mpsc::UnboundedReceiver<(KernelKey, KernelEvent)>,
    dir: tempfile::TempDir,
}

fn runtime(test: &str) -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeOptions {
        data_dir: dir.path().to_path_buf(),
        node: format!("test-{}-{test}", std::process::id()),
        run_as: None,
        user_map: berth_agent::runtime::UserMap::Fixed,
        gpu_memory: Default::default(),
        pids_max: 256,
        stop_grace: Duration::from_millis(300),
        use_cgroups: std::env::var_os("BERTH_TEST_NO_CGROUPS").is_none(),
        favor_dynmods: false,
        docker: Default::default(),
        fake_gpus: false,
        shim: None,
    })
    .unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    Rt { rt, tx, rx, dir }
}

fn spec(cmd: &[&str]) -> JobSpec {
    JobSpec::command(cmd.iter().copied())
}

struct End {
    outcome: KernelOutcome,
    exit_code: Option<i32>,
    message: String,
}

impl Rt {
    async fn run(&mut self, job: i64, spec: &JobSpec, b: &Binding) -> End {
        match self.rt.start(key(job), spec, b, &BTreeMap::new(), None, Default::default(), &self.tx) {
            Err(e) => End { outcome: KernelOutcome::LaunchFailed, exit_code: None, message: e.to_string() },
            Ok(_) => self.finished(job).await,
        }
    }

    async fn finished(&mut self, job: i64) -> End {
        let (k, ev) = tokio::time::timeout(Duration::from_secs(60), self.rx.recv()).await.unwrap().unwrap();
        assert_eq!(k, key(job));
        match ev {
            KernelEvent::Finished { outcome, exit_code, message, .. } => End { outcome, exit_code, message },
            other => panic!("unexpected {other:?}"),
        }
    }

    fn log(&self, job: i64, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("kernels/{job}.0.0/{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        self.rt.cleanup();
    }
}

fn skip_without_cgroups(rt: &Rt, what: &str) -> bool {
    if !rt.rt.has_cgroups() {
        eprintln!("SKIPPED: {what}: cgroups are not available on this machine (not root or no delegation)");
        return true;
    }
    false
}

#[tokio::test]
async fn exit_codes_and_log_files() {
    let mut rt = runtime("exit");
    let b = binding(&[], 64 << 20);
    let e = rt.run(1, &spec(&["true"]), &b).await;
    assert_eq!((e.outcome, e.exit_code, e.message.as_str()), (KernelOutcome::Succeeded, Some(0), ""));

    let e = rt.run(2, &spec(&["sh", "-c", "echo out; echo err >&2; exit 3"]), &b).await;
    assert_eq!((e.outcome, e.exit_code, e.message.as_str()), (KernelOutcome::Failed, Some(3), "exit code 3"));
    assert_eq!(rt.log(2, "stdout"), "out\n");
    assert_eq!(rt.log(2, "stderr"), "err\n");

    let e = rt.run(3, &spec(&["sh", "-c", "kill -9 $$"]), &b).await;
    assert_eq!((e.outcome, e.exit_code), (KernelOutcome::Failed, Some(137)));
    assert_eq!(e.message, "killed by signal 9 (SIGKILL)");
}

#[tokio::test]
async fn launch_failures() {
    let mut rt = runtime("launch");
    let b = binding(&[], 64 << 20);
    let e = rt.run(1, &spec(&["no-such-program-berth"]), &b).await;
    assert_eq!(e.outcome, KernelOutcome::LaunchFailed);
    assert_eq!(e.message, "cannot run `no-such-program-berth`: no such file or directory");
    let mut s = spec(&["true"]);
    s.workdir = Some("/no/such/dir".into());
    let e = rt.run(2, &s, &b).await;
    // Jobs run where they were submitted: a directory this node lacks says so, and what to do.
    assert!(e.message.starts_with("working directory `/no/such/dir` is not a directory on node test-"));
    assert!(e.message.ends_with("--job-dir for a directory of the job's own"), "{}", e.message);
}

#[tokio::test]
async fn environment_and_workdir() {
    let mut rt = runtime("env");
    let mut s = spec(&["sh", "-c", "echo $BERTH_CPUS/$CUDA_VISIBLE_DEVICES/$FOO/$OMP_NUM_THREADS; pwd"]);
    s.env.insert("FOO".into(), "bar".into());
    let e = rt.run(1, &s, &binding(&[0], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    let out = rt.log(1, "stdout");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("0//bar/1"));
    let work = rt.dir.path().join("kernels/1.0.0/work");
    assert_eq!(Path::new(lines.next().unwrap()).canonicalize().unwrap(), work.canonicalize().unwrap());
}

#[tokio::test]
async fn time_limit_is_a_timeout() {
    let mut rt = runtime("timeout");
    let mut s = spec(&["sleep", "30"]);
    s.time_limit_secs = Some(1);
    let e = rt.run(1, &s, &binding(&[], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Timeout);
    assert_eq!(e.message, "time limit 1s exceeded");
    assert_eq!(e.exit_code, Some(128 + 15), "sleep dies of the SIGTERM");
}

#[tokio::test]
async fn stop_sends_term_then_kill() {
    let mut rt = runtime("stop");
    // The shell traps TERM (and says so) and keeps going, so only the SIGKILL ends it.
    let s = spec(&["sh", "-c", "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done"]);
    let h =
        rt.rt.start(key(1), &s, &binding(&[], 64 << 20), &BTreeMap::new(), None, Default::default(), &rt.tx).unwrap();
    while !rt.log(1, "stdout").contains("ready") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.stop("cancelled by user", Duration::from_millis(500));
    let e = rt.finished(1).await;
    assert_eq!((e.outcome, e.message.as_str()), (KernelOutcome::Stopped, "cancelled by user"));
    assert_eq!(e.exit_code, Some(137), "killed by SIGKILL after the grace");
    assert!(rt.log(1, "stdout").contains("got TERM"), "SIGTERM came first: {}", rt.log(1, "stdout"));
}

#[tokio::test]
async fn out_of_memory_in_its_cgroup() {
    let mut rt = runtime("oom");
    if skip_without_cgroups(&rt, "out_of_memory_in_its_cgroup") {
        return;
    }
    // `tail` keeps the whole line it is reading; /dev/zero has no newline.
    let e = rt.run(1, &spec(&["tail", "/dev/zero"]), &binding(&[], 32 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::OutOfMemory, "{}", e.message);
    assert_eq!(e.message, "out of memory (limit 32MiB)");
    assert_eq!(e.exit_code, Some(137));
}

#[tokio::test]
async fn cpuset_is_applied() {
    let mut rt = runtime("cpuset");
    if skip_without_cgroups(&rt, "cpuset_is_applied") {
        return;
    }
    let cpus: Vec<u32> = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|l| berth_model::binding::parse_ranges(l.trim()))
        .unwrap();
    let last = *cpus.last().unwrap();
    let e = rt.run(1, &spec(&["grep", "Cpus_allowed_list", "/proc/self/status"]), &binding(&[last], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    assert_eq!(rt.log(1, "stdout").split_whitespace().last(), Some(last.to_string().as_str()));
}

#[tokio::test]
async fn runs_as_nobody_when_root() {
    let mut rt = runtime("user");
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: runs_as_nobody_when_root: the tests do not run as root");
        return;
    }
    let e = rt.run(1, &spec(&["sh", "-c", "id -u; id -G; echo $HOME"]), &binding(&[], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let out = rt.log(1, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], nobody.uid.to_string());
    assert_eq!(lines[1], nobody.gid.to_string(), "no supplementary groups of root survive");
}

#[tokio::test]
async fn leftover_processes_are_killed() {
    let mut rt = runtime("leftover");
    if skip_without_cgroups(&rt, "leftover_processes_are_killed") {
        return;
    }
    // The background sleep escapes the process group but not the cgroup.
    let s = spec(&["sh", "-c", "setsid sleep 100 > /dev/null 2>&1 & echo $!"]);
    let e = rt.run(1, &s, &binding(&[], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    let pid: i32 = rt.log(1, "stdout").trim().parse().unwrap();
    // Once Finished is reported the daemon is dead (a zombie at most, until init reaps it).
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(state.is_empty() || state.contains(") Z "), "leftover still runs: {state}");
}

/// A figure, not a check (never assert wall-clock times): `cargo test -p berth-agent --test
/// runtime -- --ignored --nocapture throughput`.
#[tokio::test]
#[ignore]
async fn throughput_of_true_jobs() {
    let mut rt = runtime("bench");
    let n = 1000;
    let t0 = std::time::Instant::now();
    let mut start_total = Duration::ZERO;
    let b = binding(&[0], 64 << 20);
    for job in 0..n {
        let t = std::time::Instant::now();
        rt.rt.start(key(job), &spec(&["true"]), &b, &BTreeMap::new(), None, Default::default(), &rt.tx).unwrap();
        start_total += t.elapsed();
        let e = rt.finished(job).await;
        assert_eq!(e.outcome, KernelOutcome::Succeeded);
    }
    eprintln!(
        "{n} `true` kernels one after another: {:?} total, start() {:?} each on average, cgroups: {}",
        t0.elapsed(),
        start_total / n as u32,
        rt.rt.has_cgroups()
    );
}

/// Kernels of different berth users run under different uids from the agent's range: one
/// cannot read the other's work dir or logs, nor signal its processes.
#[tokio::test]
async fn users_are_kept_apart_by_uid() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: users_are_kept_apart_by_uid: the tests do not run as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeOptions {
        data_dir: dir.path().to_path_buf(),
        node: format!("test-{}-uids", std::process::id()),
        run_as: None,
        user_map: berth_agent::runtime::UserMap::Range { first: 300_000, count: 1000 },
        gpu_memory: Default::default(),
        pids_max: 256,
        stop_grace: Duration::from_millis(300),
        use_cgroups: false,
        favor_dynmods: false,
        docker: Default::default(),
        fake_gpus: false,
        shim: None,
    })
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let owner = |name: &str, id: i64| -> BTreeMap<String, String> {
        [("BERTH_USER".to_string(), name.to_string()), ("BERTH_USER_ID".to_string(), id.to_string())].into()
    };
    // alice: writes a secret in her work dir, then waits.
    let alice = spec(&["sh", "-c", "id -u; echo $HOME; echo secret > $HOME/secret; sleep 30"]);
    let h =
        rt.start(key(1), &alice, &binding(&[], 64 << 20), &owner("alice", 7), None, Default::default(), &tx).unwrap();
    let alice_log = dir.path().join("kernels/1.0.0/stdout.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&alice_log).unwrap_or_default().lines().count() < 2 {
        assert!(std::time::Instant::now() < deadline, "alice's kernel printed nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = std::fs::read_to_string(&alice_log).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("300007"), "uid = first + user id");
    let home = lines.next().unwrap().to_string();
    let secret = format!("{home}/secret");
    while !std::path::Path::new(&secret).exists() {
        assert!(std::time::Instant::now() < deadline, "alice wrote no secret");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // bob: tries to read alice's secret and log, and to signal her kernel.
    let bob_cmd = format!(
        "id -u; cat {secret} && echo READ; cat {log} && echo LOG; kill -0 {pid} && echo SIGNALLED; true",
        log = alice_log.display(),
        pid = h.pid
    );
    rt.start(
        key(2),
        &spec(&["sh", "-c", &bob_cmd]),
        &binding(&[], 64 << 20),
        &owner("bob", 8),
        None,
        Default::default(),
        &tx,
    )
    .unwrap();
    let bob_end = loop {
        let (k, ev) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
        if k == key(2) && matches!(ev, KernelEvent::Finished { .. }) {
            break ev;
        }
    };
    assert!(matches!(bob_end, KernelEvent::Finished { outcome: KernelOutcome::Succeeded, .. }), "{bob_end:?}");
    let bob_out = std::fs::read_to_string(dir.path().join("kernels/2.0.0/stdout.log")).unwrap();
    assert!(bob_out.starts_with("300008\n"), "{bob_out}");
    for leak in ["READ", "LOG", "SIGNALLED"] {
        assert!(!bob_out.contains(leak), "bob could do {leak}: {bob_out}");
    }
    let bob_err = std::fs::read_to_string(dir.path().join("kernels/2.0.0/stderr.log")).unwrap();
    assert!(bob_err.contains("Permission denied") || bob_err.contains("Operation not permitted"), "{bob_err}");
    h.stop("test over", Duration::from_millis(100));
    let _ = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
}

/// Regression (a cluster test failed with `cannot create cgroup .../berth/a2-.../1.1.0: No
/// such file or directory`): the agent's empty subtree removed under it (by a clean-up of
/// empty cgroups) is made again at the next start instead of failing every start.
#[tokio::test]
async fn a_kernel_starts_after_the_agents_empty_cgroup_subtree_was_removed() {
    let mut rt = runtime("regone");
    if skip_without_cgroups(&rt, "cgroup subtree removal") {
        return;
    }
    let b = binding(&[], 64 << 20);
    assert_eq!(rt.run(1, &spec(&["true"]), &b).await.outcome, KernelOutcome::Succeeded);
    let scope = berth_agent::runtime::cgroup_scope(&format!("test-{}-regone", std::process::id()), rt.dir.path());
    let mut gone = 0;
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        gone += remove_named(&h.path(), &scope, 6);
    }
    assert!(gone > 0, "the agent's subtree {scope} was found and removed");
    let e = rt.run(2, &spec(&["true"]), &b).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
}

/// Removes the (empty) dirs named `name` up to `depth` levels below `dir`, and their empty
/// kernel dirs; how many.
fn remove_named(dir: &Path, name: &str, depth: usize) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut n = 0;
    for e in entries.flatten().filter(|e| e.path().is_dir()) {
        if e.file_name() == name {
            for k in std::fs::read_dir(e.path()).into_iter().flatten().flatten().filter(|k| k.path().is_dir()) {
                let _ = std::fs::remove_dir(k.path());
            }
            n += usize::from(std::fs::remove_dir(e.path()).is_ok());
        } else if depth > 0 {
            n += remove_named(&e.path(), name, depth - 1);
        }
    }
    n
}

/// A root agent on cgroup v1 makes sure the node has a `favordynmods` cgroup hierarchy (fast
/// cgroup joins on a quiet node, docs/perf.md), out of other users' reach, and a second agent
/// finds it instead of stacking another. On the unified hierarchy (or without root) nothing
/// is mounted. The test removes the mount if it made it.
#[tokio::test]
async fn a_root_agent_on_cgroup_v1_favors_dynamic_cgroup_moves_while_it_runs() {
    let before = std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains("name=berth-dynmods");
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeOptions {
        data_dir: dir.path().to_path_buf(),
        node: format!("test-{}-dynmods", std::process::id()),
        run_as: None,
        user_map: berth_agent::runtime::UserMap::Fixed,
        gpu_memory: Default::default(),
        pids_max: 256,
        stop_grace: Duration::from_millis(300),
        use_cgroups: true,
        favor_dynmods: true,
        docker: Default::default(),
        fake_gpus: false,
        shim: None,
    })
    .unwrap();
    let mountinfo = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let node_mount = std::path::Path::new("/run/berth/cgroup-dynmods");
    let count = || mountinfo().lines().filter(|l| l.contains("name=berth-dynmods")).count();
    let v1 = rt.has_cgroups() && !rt.cgroups_v2();
    match rt.dynmods_mount() {
        // Linux 6.0 and later know the option; the test machines run newer kernels.
        Some(m) if v1 => assert_eq!(m, node_mount),
        None if v1 => panic!("a root agent on cgroup v1 mounts no favordynmods hierarchy"),
        Some(m) => panic!("a favordynmods hierarchy at {} without cgroup v1 as root", m.display()),
        None => return,
    }
    assert!(berth_agent::runtime::dynmods::mounted_at(&mountinfo(), node_mount), "{}", mountinfo());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata("/run/berth").unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "other users cannot reach the mount");
    let mounts = count();
    let again = berth_agent::runtime::dynmods::FavorDynmods::enable().expect("found");
    assert_eq!(again.path(), node_mount);
    assert_eq!(count(), mounts, "a second agent stacks no second mount");
    rt.cleanup();
    if !before {
        nix::mount::umount2(node_mount, nix::mount::MntFlags::MNT_DETACH).unwrap();
        let _ = std::fs::remove_dir(node_mount);
        let _ = std::fs::remove_dir("/run/berth");
    }
}
