//! The runtime conformance suite: the same job scenarios (exit codes, logs, environment,
//! limits, stop, time limit, OOM, run user, a restart of the agent) against the `process`
//! backend and the container backends, `docker` and `podman`, which must behave alike.
//!
//! Docker scenarios need a running dockerd and a static busybox to build their image
//! (`scripts/test-image.sh`, which `scripts/test.sh` prepares), Podman ones the `podman`
//! package (`scripts/test-image.sh podman`); without them they print `SKIPPED: ...`, except
//! that with `CI=true` a missing podman fails them. Process scenarios that need cgroups skip
//! the same way as in `runtime.rs`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_agent::runtime::{DockerOptions, Engine, Runtime, RuntimeOptions};
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome};
use berth_model::{Binding, JobSpec};
use common::{binding, key};
use tokio::sync::mpsc;

const IMAGE: &str = "berth-test/busybox:1";
const IMAGE_WITH_USER: &str = "berth-test/busybox-user:1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Process,
    Docker,
    Podman,
}

impl Kind {
    /// Whether kernels of this kind are containers.
    fn containers(self) -> bool {
        self != Kind::Process
    }

    /// The container engine's command line tool.
    fn tool(self) -> &'static str {
        if self == Kind::Podman { "podman" } else { "docker" }
    }
}

/// Builds the test images; `Err` says why docker scenarios cannot run here.
fn docker_ready() -> Result<(), String> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-image.sh");
            let out = std::process::Command::new("bash").arg(script).output().map_err(|e| e.to_string())?;
            if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
        })
        .clone()
}

/// Builds the test images in Podman's store; `Err` says why podman scenarios cannot run here.
fn podman_ready() -> Result<(), String> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-image.sh");
            let out =
                std::process::Command::new("bash").arg(script).arg("podman").output().map_err(|e| e.to_string())?;
            if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
        })
        .clone()
}

/// `true` (after a loud SKIPPED line) when the scenario cannot run for this kind here; on CI
/// (`CI=true`) a missing podman fails it instead.
fn skip(kind: Kind, test: &str) -> bool {
    let ready = match kind {
        Kind::Process => Ok(()),
        Kind::Docker => docker_ready(),
        Kind::Podman => podman_ready(),
    };
    match ready {
        Ok(()) => false,
        Err(why) if kind == Kind::Podman && std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test} (podman) cannot run on CI: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: {test} ({}): {why}", kind.tool());
            true
        }
    }
}

struct Rt {
    kind: Kind,
    rt: Runtime,
    tx: mpsc::UnboundedSender<(KernelKey, KernelEvent)>,
    rx: mpsc::UnboundedReceiver<(KernelKey, KernelEvent)>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

fn options(dir: &Path, test: &str, kind: Kind) -> RuntimeOptions {
    RuntimeOptions {
        data_dir: dir.to_path_buf(),
        node: format!("conf-{}-{test}", std::process::id()),
        run_as: None,
        user_map: berth_agent::runtime::UserMap::Fixed,
        gpu_memory: Default::default(),
        pids_max: 256,
        stop_grace: Duration::from_millis(500),
        use_cgroups: std::env::var_os("BERTH_TEST_NO_CGROUPS").is_none(),
        favor_dynmods: false,
        docker: DockerOptions {
            enabled: true,
            engine: if kind == Kind::Podman { Engine::Podman } else { Engine::Docker },
            allow_mounts: vec![std::env::temp_dir()],
            ..Default::default()
        },
        fake_gpus: true,
        // Process kernels are forked by the kernel supervisor, as the `berth` binary runs them.
        shim: Some(env!("CARGO_BIN_EXE_berth-kernel-supervisor").into()),
    }
}

fn runtime(kind: Kind, test: &str) -> Rt {
    let tmp = tempfile::tempdir().unwrap();
    let rt = Runtime::new(options(tmp.path(), test, kind)).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    Rt { kind, rt, tx, rx, dir: tmp.path().to_path_buf(), _tmp: Some(tmp) }
}

#[derive(Debug)]
struct End {
    outcome: KernelOutcome,
    exit_code: Option<i32>,
    message: String,
}

impl Rt {
    fn spec(&self, cmd: &[&str]) -> JobSpec {
        let mut s = JobSpec::command(cmd.iter().copied());
        if self.kind.containers() {
            s.image = Some(IMAGE.into());
        }
        s
    }

    fn is_process(&self) -> bool {
        self.kind == Kind::Process
    }

    async fn run(&mut self, job: i64, spec: &JobSpec, b: &Binding) -> End {
        match self.rt.start(key(job), spec, b, &BTreeMap::new(), None, Default::default(), &self.tx) {
            Err(e) => End { outcome: KernelOutcome::LaunchFailed, exit_code: None, message: e.to_string() },
            Ok(_) => self.finished(job).await,
        }
    }

    /// The next event of `job`, skipping its `Started`.
    async fn finished(&mut self, job: i64) -> End {
        loop {
            let (k, ev) = tokio::time::timeout(Duration::from_secs(60), self.rx.recv()).await.unwrap().unwrap();
            assert_eq!(k, key(job));
            match ev {
                KernelEvent::Finished { outcome, exit_code, message, .. } => {
                    return End { outcome, exit_code, message };
                }
                KernelEvent::Started { .. } | KernelEvent::Preparing { .. } => continue,
            }
        }
    }

    fn log(&self, job: i64, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("kernels/{job}.0.0/{name}.log"))).unwrap_or_default()
    }

    async fn wait_log(&self, job: i64, what: &str) {
        for _ in 0..3000 {
            if self.log(job, "stdout").contains(what) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("`{what}` never appeared in the log of job {job}");
    }

    fn no_limits(&self, test: &str) -> bool {
        if self.is_process() && !self.rt.has_cgroups() {
            eprintln!(
                "SKIPPED: {test} (process): cgroups are not available on this machine (not root or no delegation)"
            );
            return true;
        }
        false
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        self.rt.cleanup();
    }
}

/// No container of this runtime's scope is left.
fn containers_left(rt: &Rt) -> usize {
    if !rt.kind.containers() {
        return 0;
    }
    let out = std::process::Command::new(rt.kind.tool())
        .args(["ps", "-aq", "--filter", &format!("label=berth.scope={}", rt.rt.container_scope())])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod process {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Process).await })*
        }
        mod docker {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Docker).await })*
        }
        mod podman {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Podman).await })*
        }
    };
}

both!(
    exit_codes_and_logs,
    environment,
    time_limit,
    stop_is_term_then_kill,
    out_of_memory,
    cpuset,
    run_user,
    launch_failure
);

async fn exit_codes_and_logs(kind: Kind) {
    if skip(kind, "exit_codes_and_logs") {
        return;
    }
    let mut rt = runtime(kind, "exit");
    let b = binding(&[], 64 << 20);
    let e = rt.run(1, &rt.spec(&["true"]), &b).await;
    assert_eq!((e.outcome, e.exit_code, e.message.as_str()), (KernelOutcome::Succeeded, Some(0), ""));

    let e = rt.run(2, &rt.spec(&["sh", "-c", "echo out; echo err >&2; exit 3"]), &b).await;
    assert_eq!((e.outcome, e.exit_code, e.message.as_str()), (KernelOutcome::Failed, Some(3), "exit code 3"));
    assert_eq!(rt.log(2, "stdout"), "out\n");
    assert_eq!(rt.log(2, "stderr"), "err\n");

    let e = rt.run(3, &rt.spec(&["sh", "-c", "kill -9 $$"]), &b).await;
    assert_eq!((e.outcome, e.exit_code), (KernelOutcome::Failed, Some(137)));
    assert_eq!(containers_left(&rt), 0, "every ended container is removed");
}

async fn environment(kind: Kind) {
    if skip(kind, "environment") {
        return;
    }
    let mut rt = runtime(kind, "env");
    let mut s = rt.spec(&["sh", "-c", "echo $BERTH_CPUS/$FOO/$OMP_NUM_THREADS/$BERTH_JOB_ID; cd /tmp && pwd"]);
    s.env.insert("FOO".into(), "bar".into());
    let env: BTreeMap<String, String> = [("BERTH_JOB_ID".to_string(), "1".to_string())].into();
    rt.rt.start(key(1), &s, &binding(&[0], 64 << 20), &env, None, Default::default(), &rt.tx).unwrap();
    let e = rt.finished(1).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    assert_eq!(rt.log(1, "stdout"), "0/bar/1/1\n/tmp\n");
}

async fn time_limit(kind: Kind) {
    if skip(kind, "time_limit") {
        return;
    }
    let mut rt = runtime(kind, "timeout");
    let mut s = rt.spec(&["sleep", "30"]);
    s.time_limit_secs = Some(1);
    let e = rt.run(1, &s, &binding(&[], 64 << 20)).await;
    assert_eq!((e.outcome, e.message.as_str()), (KernelOutcome::Timeout, "time limit 1s exceeded"));
    assert_eq!(e.exit_code, Some(128 + 15), "sleep dies of the SIGTERM");
    assert_eq!(containers_left(&rt), 0);
}

async fn stop_is_term_then_kill(kind: Kind) {
    if skip(kind, "stop_is_term_then_kill") {
        return;
    }
    let mut rt = runtime(kind, "stop");
    // The shell traps TERM (and says so) and keeps going, so only the SIGKILL ends it.
    let s = rt.spec(&["sh", "-c", "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done"]);
    let h =
        rt.rt.start(key(1), &s, &binding(&[], 64 << 20), &BTreeMap::new(), None, Default::default(), &rt.tx).unwrap();
    rt.wait_log(1, "ready").await;
    h.stop("cancelled by user", Duration::from_millis(1000));
    let e = rt.finished(1).await;
    assert_eq!((e.outcome, e.message.as_str()), (KernelOutcome::Stopped, "cancelled by user"));
    assert_eq!(e.exit_code, Some(137), "killed by SIGKILL after the grace");
    assert!(rt.log(1, "stdout").contains("got TERM"), "SIGTERM came first: {}", rt.log(1, "stdout"));
    assert_eq!(containers_left(&rt), 0, "a cancelled container is removed");
}

async fn out_of_memory(kind: Kind) {
    if skip(kind, "out_of_memory") {
        return;
    }
    let mut rt = runtime(kind, "oom");
    if rt.no_limits("out_of_memory") {
        return;
    }
    // `tail` keeps the whole line it is reading; /dev/zero has no newline.
    let e = rt.run(1, &rt.spec(&["tail", "/dev/zero"]), &binding(&[], 32 << 20)).await;
    assert_eq!(e.exit_code, Some(137));
    // Podman (4.3) does not record an OOM kill on cgroup v1 (`State.OOMKilled` stays false):
    // its kernel ends killed, without the reason (docs/node.md).
    if kind == Kind::Podman && !rt.rt.cgroups_v2() {
        assert_eq!((e.outcome, e.message.as_str()), (KernelOutcome::Failed, "exit code 137"));
        return;
    }
    assert_eq!((e.outcome, e.message.as_str()), (KernelOutcome::OutOfMemory, "out of memory (limit 32MiB)"));
}

async fn cpuset(kind: Kind) {
    if skip(kind, "cpuset") {
        return;
    }
    let mut rt = runtime(kind, "cpuset");
    if rt.no_limits("cpuset") {
        return;
    }
    let cpus: Vec<u32> = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|l| berth_model::binding::parse_ranges(l.trim()))
        .unwrap();
    let last = *cpus.last().unwrap();
    let s = rt.spec(&["sh", "-c", "grep Cpus_allowed_list /proc/self/status; cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; true"]);
    let e = rt.run(1, &s, &binding(&[last], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    let out = rt.log(1, "stdout");
    let mut lines = out.lines();
    assert_eq!(lines.next().unwrap().split_whitespace().last(), Some(last.to_string().as_str()));
    if !rt.is_process() {
        assert_eq!(lines.next(), Some("256"), "the pids limit: {out}");
    }
}

async fn run_user(kind: Kind) {
    if skip(kind, "run_user") {
        return;
    }
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: run_user ({kind:?}): the tests do not run as root");
        return;
    }
    let mut rt = runtime(kind, "user");
    let e = rt.run(1, &rt.spec(&["sh", "-c", "id -u; id -g"]), &binding(&[], 64 << 20)).await;
    assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(rt.log(1, "stdout"), format!("{}\n{}\n", nobody.uid, nobody.gid));
    if kind.containers() {
        // An image that names its USER runs as that user.
        let mut s = rt.spec(&["id", "-u"]);
        s.image = Some(IMAGE_WITH_USER.into());
        let e = rt.run(2, &s, &binding(&[], 64 << 20)).await;
        assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
        assert_eq!(rt.log(2, "stdout"), "4321\n");
    }
}

async fn launch_failure(kind: Kind) {
    if skip(kind, "launch_failure") {
        return;
    }
    let mut rt = runtime(kind, "launch");
    let e = rt.run(1, &rt.spec(&["no-such-program-berth"]), &binding(&[], 64 << 20)).await;
    // A process fails to exec; a container's init cannot find it either (docker reports the
    // start failure, or the init exits 127 as a shell would; Podman's, catatonit, exits 1).
    match kind {
        Kind::Process => assert_eq!(e.outcome, KernelOutcome::LaunchFailed),
        Kind::Podman => assert_eq!((e.outcome, e.exit_code), (KernelOutcome::Failed, Some(1)), "{e:?}"),
        Kind::Docker => assert!(
            e.outcome == KernelOutcome::LaunchFailed || (e.outcome, e.exit_code) == (KernelOutcome::Failed, Some(127)),
            "{e:?}"
        ),
    }
    if kind.containers() {
        let mut s = rt.spec(&["true"]);
        s.image = Some("berth-test/no-such-image:1".into());
        let e = rt.run(2, &s, &binding(&[], 64 << 20)).await;
        assert_eq!(e.outcome, KernelOutcome::LaunchFailed);
        assert!(e.message.contains("image `berth-test/no-such-image:1` is not on node"), "{}", e.message);
        let mut s = rt.spec(&["true"]);
        s.mounts.push("/etc:/host-etc".parse().unwrap());
        let e = rt.run(3, &s, &binding(&[], 64 << 20)).await;
        assert_eq!(e.outcome, KernelOutcome::LaunchFailed);
        assert!(e.message.contains("mount `/etc` is not allowed on node"), "{}", e.message);
        // An allowed mount is visible, read-only by default.
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join("hello"), "hi\n").unwrap();
        let mut s = rt.spec(&["sh", "-c", "cat /data/hello; touch /data/x || echo read-only"]);
        s.mounts.push(format!("{}:/data", data.path().display()).parse().unwrap());
        let e = rt.run(4, &s, &binding(&[], 64 << 20)).await;
        assert_eq!(e.outcome, KernelOutcome::Succeeded, "{}", e.message);
        assert_eq!(rt.log(4, "stdout"), "hi\nread-only\n");
    }
    assert_eq!(containers_left(&rt), 0);
}

/// An agent that dies (its tasks vanish without stopping anything) and starts again on the
/// same data dir: both runtimes take over the running kernels (processes through the kernel
/// supervisor, containers by label) and report the ones that ended meanwhile with their exit codes.
#[test]
fn agent_restart_process() {
    agent_restart(Kind::Process, true);
}

#[test]
fn agent_restart_docker() {
    agent_restart(Kind::Docker, true);
}

#[test]
fn agent_restart_podman() {
    agent_restart(Kind::Podman, true);
}

/// Without the supervisor nobody can supervise a bare process: the new agent kills what it finds.
#[test]
fn agent_restart_process_without_shim() {
    agent_restart(Kind::Process, false);
}

fn agent_restart(kind: Kind, shim: bool) {
    if skip(kind, "agent_restart") {
        return;
    }
    let options = |dir: &Path, test: &str| RuntimeOptions {
        shim: options(dir, test, kind).shim.filter(|_| shim),
        ..options(dir, test, kind)
    };
    let tmp = tempfile::tempdir().unwrap();
    let test = "restart";
    let spec = |cmd: &[&str]| {
        let mut s = JobSpec::command(cmd.iter().copied());
        if kind.containers() {
            s.image = Some(IMAGE.into());
        }
        s
    };
    let old = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    old.block_on(async {
        let rt = Runtime::new(options(tmp.path(), test)).unwrap();
        // Job 1 runs on past the restart; job 2 ends while no agent watches.
        let long = spec(&["sh", "-c", "echo before; sleep 6; echo after"]);
        rt.start(key(1), &long, &binding(&[], 64 << 20), &BTreeMap::new(), None, Default::default(), &tx).unwrap();
        rt.start(
            key(2),
            &spec(&["sh", "-c", "sleep 2; exit 4"]),
            &binding(&[], 64 << 20),
            &BTreeMap::new(),
            None,
            Default::default(),
            &tx,
        )
        .unwrap();
        // Containers report `Started` once running; processes run once `start` returns.
        let mut started = 0;
        while kind.containers() && started < 2 {
            if let (_, KernelEvent::Started { .. }) = rx.recv().await.unwrap() {
                started += 1;
            }
        }
        // Job 1 has written its first line before the crash (a loaded machine may take a while).
        let log1 = tmp.path().join("kernels/1.0.0/stdout.log");
        let t0 = std::time::Instant::now();
        while std::fs::read_to_string(&log1).unwrap_or_default() != "before\n" {
            assert!(t0.elapsed() < Duration::from_secs(30), "job 1 never wrote its first line");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // The agent "crashes": its tasks are dropped, nothing is stopped.
    old.shutdown_background();
    std::thread::sleep(Duration::from_millis(2500));

    let new = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    new.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let rt = Runtime::new(options(tmp.path(), test)).unwrap();
        let adopted = rt.adopt(&tx).await;
        let log = |job: i64| std::fs::read_to_string(tmp.path().join(format!("kernels/{job}.0.0/stdout.log"))).unwrap();
        if !shim {
            assert!(adopted.is_empty());
            // The old kernel was killed at the new start: "after" is never written.
            tokio::time::sleep(Duration::from_secs(6)).await;
            assert_eq!(log(1), "before\n", "the old agent's kernel was killed");
            return;
        }
        let running = adopted.iter().find(|a| a.key.job_id == 1).expect("job 1 is taken over");
        assert!(
            matches!(running.event, KernelEvent::Started { .. }) && running.handle.is_some(),
            "{:?}",
            running.event
        );
        // Job 2 ended while no agent ran: reported at once (containers) or right after
        // (processes, from their exit files).
        let mut ends: BTreeMap<i64, (KernelOutcome, Option<i32>)> = adopted
            .iter()
            .filter_map(|a| match &a.event {
                KernelEvent::Finished { outcome, exit_code, .. } => Some((a.key.job_id, (*outcome, *exit_code))),
                _ => None,
            })
            .collect();
        while ends.len() < 2 {
            let (k, ev) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
            if let KernelEvent::Finished { outcome, exit_code, .. } = ev {
                assert!(ends.insert(k.job_id, (outcome, exit_code)).is_none(), "job {} ended twice", k.job_id);
            }
        }
        assert_eq!(ends[&2], (KernelOutcome::Failed, Some(4)), "the exit code of a kernel that ended unwatched");
        assert_eq!(ends[&1], (KernelOutcome::Succeeded, Some(0)), "the taken-over kernel ends normally");
        assert_eq!(log(1), "before\nafter\n", "the whole output, written once");
        match kind {
            Kind::Process => {}
            Kind::Docker | Kind::Podman => {
                let left = std::process::Command::new(kind.tool())
                    .args(["ps", "-aq", "--filter", &format!("label=berth.scope={}", rt.container_scope())])
                    .output()
                    .unwrap();
                assert!(left.stdout.is_empty(), "no container is left behind");
            }
        }
        rt.cleanup();
    });
}
