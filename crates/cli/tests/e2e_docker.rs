//! Container jobs through the real binary: `--image` jobs run through Docker with logs, exit
//! codes, mounts, time limits and cancel like process jobs; `berth images` lists what nodes
//! have; a job whose image no node has waits with an `image:` reason; a killed agent's (or a
//! stopped `berth up`'s) container is re-adopted by the next agent and its end is recorded; mounts no node allows
//! are refused at submit. Jobs with several kernels on one node (`--kernels N`) run on a
//! private network where the kernels reach each other as `main`, `sub1`, ... (the agents
//! here make it `internal`, so test traffic stays between the test's containers), and reach
//! `berth up`'s loopback dataset cache through the agent's forwarder on the network's gateway.
//!
//! Needs a running dockerd and a static busybox to build the test image
//! (`scripts/test-image.sh`); without them every test prints `SKIPPED: ...`.

mod cache_support;
mod support;

use std::time::{Duration, Instant};

use support::{Berth, PATIENCE, docker_ready, text};

const IMAGE: &str = "berth-test/busybox:1";

/// The containers (and job networks) that match some `docker ... --filter`s; removes them on
/// drop, so that a failed test leaves nothing behind either.
struct Containers(Vec<String>);

impl Containers {
    /// Those of agents whose node name starts with `prefix`.
    fn of_agent(prefix: &str) -> Containers {
        Containers(vec![format!("name=berth-{prefix}")])
    }

    /// Those of job `id` of a `berth up` agent (named after this host).
    fn of_up_job(id: i64) -> Containers {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        Containers(vec![format!("label=berth.job={id}"), format!("name=berth-{}-", host.trim())])
    }

    /// What `docker <list...>` prints for the ones that match.
    fn list(&self, list: &[&str]) -> Vec<String> {
        let filters = self.0.iter().flat_map(|f| ["--filter", f.as_str()]);
        let o = std::process::Command::new("docker").args(list).args(filters).output().unwrap();
        text(&o.stdout).lines().map(String::from).collect()
    }

    fn names(&self) -> Vec<String> {
        self.list(&["container", "ls", "-a", "--format", "{{.Names}}"])
    }

    /// The job networks of the same agents.
    fn networks(&self) -> Vec<String> {
        self.list(&["network", "ls", "--format", "{{.Name}}"])
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for n in self.names() {
            let _ = std::process::Command::new("docker").args(["rm", "-f", &n]).output();
        }
        for n in self.networks() {
            let _ = std::process::Command::new("docker").args(["network", "rm", &n]).output();
        }
    }
}

impl Containers {
    /// Waits until `n` containers of these agents exist.
    fn wait_count(&self, n: usize) {
        let start = Instant::now();
        while self.names().len() < n {
            assert!(start.elapsed() < PATIENCE, "expected {n} containers: {:?}", self.names());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until no container and no job network of these agents is left.
    fn wait_gone(&self) {
        let start = Instant::now();
        while !self.names().is_empty() || !self.networks().is_empty() {
            let left = (self.names(), self.networks());
            assert!(start.elapsed() < PATIENCE, "containers and networks left behind: {left:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `docker inspect` of a container or network, as JSON.
fn inspect(what: &[&str]) -> serde_json::Value {
    let o = std::process::Command::new("docker").args(what).output().unwrap();
    assert!(o.status.success(), "docker {what:?}: {}", text(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()[0].clone()
}

fn node_name(tag: &str) -> String {
    format!("dk{}{tag}", std::process::id())
}

#[test]
fn container_jobs_run_like_processes() {
    if !docker_ready("container_jobs_run_like_processes") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("hello.txt"), "hi from the host\n").unwrap();
    let node = node_name("a");
    let left = Containers::of_agent(&node);
    let allow = data.path().display().to_string();
    let b = Berth::cluster("", &[(&node, &["--allow-mount", &allow])]);

    // The node reports its images.
    let images = b.json(&["images"]);
    let listed = images["images"].as_array().unwrap().iter().any(|i| i["image"] == IMAGE && i["nodes"][0] == node);
    assert!(listed, "{images:#}");
    assert!(b.ok(&["images"]).contains(IMAGE));

    // Exit code and logs.
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo hello; echo oops >&2; exit 3"]);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hello\n");

    // A mount from the allow-list, read-only, and the environment.
    let mount = format!("{allow}:/data");
    let id = b.submit(&[
        "--image",
        IMAGE,
        "--mount",
        &mount,
        "--env",
        "GREETING=hey",
        "--workdir",
        "/data",
        "--",
        "sh",
        "-c",
        "cat hello.txt; echo $GREETING $BERTH_JOB_ID; touch x 2>/dev/null || echo read-only",
    ]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), format!("hi from the host\nhey {id}\nread-only\n"));

    // A mount outside every node's allow-list is refused at submit, saying how to fix it.
    let o = b.cli(&["submit", "--image", IMAGE, "--mount", "/etc:/host-etc", "--", "true"]);
    let err = text(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains(&format!("mount: /etc not allowed on any node of queue default (allowed: {allow}")), "{err}");
    assert!(err.contains("berth agent --allow-mount"), "{err}");
    // One that only looks allowed (a symlink out of the allowed tree) fails at start.
    std::os::unix::fs::symlink("/etc", data.path().join("escape")).unwrap();
    let escape = format!("{allow}/escape:/host-etc");
    let id = b.submit(&["--image", IMAGE, "--mount", &escape, "--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("/escape` is not allowed on node"), "{d:#}");

    // Time limit and cancel.
    let id = b.submit(&["--image", IMAGE, "--time-limit", "1s", "--", "sleep", "300"]);
    let d = b.wait_state(id, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or_default().contains("time limit"), "{d:#}");
    let id = b.submit(&["--image", IMAGE, "--", "sleep", "300"]);
    b.wait_state(id, "RUNNING");
    b.ok(&["cancel", &id.to_string()]);
    b.wait_state(id, "CANCELLED");

    // An image no node has: the job waits, saying so.
    let id = b.submit(&["--image", "berth-test/nowhere:1", "--", "true"]);
    let d = b.wait_job(id, "an image reason", |j| j["job"]["pending_reason"]["kind"] == "image");
    assert_eq!(d["job"]["pending_reason"]["message"], "image: berth-test/nowhere:1 not on any node", "{d:#}");
    assert_eq!(b.state(id), "PENDING");
    b.ok(&["cancel", &id.to_string()]);

    // Every container is gone once its job ended.
    left.wait_gone();
}

/// `docker <args>`, which must succeed; its stdout, trimmed.
fn docker(args: &[&str]) -> String {
    let o = std::process::Command::new("docker").args(args).output().unwrap();
    assert!(o.status.success(), "docker {args:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// Only the agent says which GPUs a container sees: neither a job's
/// `--env NVIDIA_VISIBLE_DEVICES=all` nor an image's `ENV NVIDIA_VISIBLE_DEVICES=all` (as CUDA
/// base images have) reaches the container; a job without GPUs gets `void`.
#[test]
fn a_users_nvidia_visible_devices_never_reaches_a_container() {
    if !docker_ready("a_users_nvidia_visible_devices_never_reaches_a_container") {
        return;
    }
    // The test image with every GPU in its ENV, made locally (no registry).
    let all_gpus = format!("berth-test/all-gpus-{}:1", std::process::id());
    let made = docker(&["create", IMAGE, "true"]);
    docker(&["commit", "--change", "ENV NVIDIA_VISIBLE_DEVICES=all", &made, &all_gpus]);
    docker(&["rm", &made]);
    let node = node_name("nv");
    let left = Containers::of_agent(&node);
    let b = Berth::cluster("", &[(&node, &[])]);
    let show = "echo devices=$NVIDIA_VISIBLE_DEVICES";
    let by_env = b.submit(&["--image", IMAGE, "--env", "NVIDIA_VISIBLE_DEVICES=all", "--", "sh", "-c", show]);
    let by_image = b.submit(&["--image", &all_gpus, "--", "sh", "-c", show]);
    for id in [by_env, by_image] {
        b.wait_state(id, "SUCCEEDED");
        assert_eq!(b.ok(&["logs", &id.to_string()]), "devices=void\n", "job {id}");
    }
    left.wait_gone();
    drop(b);
    let _ = std::process::Command::new("docker").args(["rmi", "-f", &all_gpus]).output();
}

/// A container's `/dev/shm` and `/tmp` are tmpfs of its memory limit, private to it and gone
/// with it: another container does not see the files, and 200 MiB written into `/dev/shm`
/// under `--mem 64MiB` does not succeed.
#[test]
fn a_containers_dev_shm_and_tmp_are_its_own_and_bounded_by_its_memory() {
    if !docker_ready("a_containers_dev_shm_and_tmp_are_its_own_and_bounded_by_its_memory") {
        return;
    }
    let node = node_name("s");
    let left = Containers::of_agent(&node);
    let b = Berth::cluster("", &[(&node, &[])]);
    let script = "echo secret > /dev/shm/mine && echo secret > /tmp/mine && cat /dev/shm/mine /tmp/mine && \
                  grep -E ' (/dev/shm|/tmp) ' /proc/self/mounts; echo ready; sleep 300";
    let writer = b.submit(&["--image", IMAGE, "--mem", "96MiB", "--", "sh", "-c", script]);
    let start = Instant::now();
    let out = loop {
        let out = text(&b.cli(&["logs", &writer.to_string()]).stdout);
        if out.contains("ready") {
            break out;
        }
        assert!(start.elapsed() < PATIENCE, "the writer never got ready: {out}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.starts_with("secret\nsecret\n"), "{out}");
    for point in ["/dev/shm", "/tmp"] {
        let line = out.lines().rfind(|l| l.split(' ').nth(1) == Some(point)).unwrap_or_default();
        assert!(line.contains("tmpfs") && line.contains("size=98304k"), "{point} is a tmpfs of --mem: {out}");
    }
    let look = "test ! -e /dev/shm/mine && test ! -e /tmp/mine && echo unseen";
    let other = b.submit(&["--image", IMAGE, "--", "sh", "-c", look]);
    b.wait_state(other, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &other.to_string()]), "unseen\n");
    b.ok(&["cancel", &writer.to_string()]);
    b.wait_state(writer, "CANCELLED");

    let fill = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=200";
    let id = b.submit(&["--image", IMAGE, "--mem", "64MiB", "--", "sh", "-c", fill]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("out of memory") || reason.contains("exit code"), "{d:#}");
    left.wait_gone();
}

/// The agent is killed (SIGKILL) while a container job runs; the next agent on the same data
/// dir re-adopts the container, the manager keeps the job RUNNING and records its end.
#[test]
fn a_restarted_agent_re_adopts_its_containers() {
    if !docker_ready("a_restarted_agent_re_adopts_its_containers") {
        return;
    }
    let node = node_name("r");
    let left = Containers::of_agent(&node);
    let mut b = Berth::cluster("", &[(&node, &[])]);
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo before; sleep 4; echo after"]);
    b.wait_state(id, "RUNNING");
    b.kill_agent(0);
    assert_eq!(left.names().len(), 1, "the container outlives its agent");
    b.add_agent(&node, &[]);
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "before\nafter\n");
    left.wait_gone();
}

/// `berth up` stopped with SIGTERM while a container job runs: the container runs on, the
/// next `berth up` re-adopts it, the job stays RUNNING (one run) and can still be cancelled.
#[test]
fn a_container_job_survives_a_sigterm_of_berth_up() {
    if !docker_ready("a_container_job_survives_a_sigterm_of_berth_up") {
        return;
    }
    let mut b = Berth::up(&[]);
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo started; sleep 300"]);
    let left = Containers::of_up_job(id);
    b.wait_job(id, "its first line", |_| b.ok(&["logs", &id.to_string()]) == "started\n");
    b.signal_all(libc::SIGTERM);
    assert_eq!(left.names().len(), 1, "the container outlives berth up");
    b.start_again(&[]);
    let d = b.job(id);
    assert_eq!(d["job"]["state"], "RUNNING", "taken over: {d:#}");
    assert_eq!(d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count(), 1, "{d:#}");
    b.ok(&["cancel", &id.to_string()]);
    b.wait_state(id, "CANCELLED");
    left.wait_gone();
}

/// What each kernel of the test jobs prints: its cluster variables and host name; then `main`
/// serves a page and waits for a message from `sub1`, which fetches the page from `main` by
/// name and sends what it got back to `main` by name.
const TALK: &str = r#"env | grep -E '^(BERTH_CLUSTER_(SIZE|HOSTS|ROLE|INDEX)|MASTER_ADDR|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK)=' | sort
echo host=$(hostname)
if [ "$BERTH_CLUSTER_ROLE" = main ]; then
  mkdir -p /tmp/www && echo "hello from $(hostname)" > /tmp/www/index.html && httpd -p 8080 -h /tmp/www
  nc -l -p 9000
else
  until page=$(wget -qO- http://main:8080/); do sleep 0.2; done
  until echo "$(hostname) got: $page" | nc main 9000; do sleep 0.2; done
  echo sent
fi"#;

fn env_lines(index: u32) -> String {
    let role = if index == 0 { "main" } else { "sub1" };
    format!(
        "BERTH_CLUSTER_HOSTS=main,sub1\nBERTH_CLUSTER_INDEX={index}\nBERTH_CLUSTER_ROLE={role}\n\
         BERTH_CLUSTER_SIZE=2\nLOCAL_RANK={index}\nMASTER_ADDR=main\nNODE_RANK=0\nRANK={index}\nWORLD_SIZE=2\n\
         host={role}\n"
    )
}

#[test]
fn kernels_of_one_job_reach_each_other_by_name() {
    if !docker_ready("kernels_of_one_job_reach_each_other_by_name") {
        return;
    }
    let node = node_name("k");
    let left = Containers::of_agent(&node);
    let b = Berth::cluster("", &[(&node, &["--internal-job-networks"])]);

    // Two kernels (this machine may have only 2 CPUs: one each) talk over their network.
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sh", "-c", TALK]);
    let d = b.wait_state(id, "SUCCEEDED");
    let kernels = d["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2, "{d:#}");
    assert!(kernels.iter().all(|k| k["binding"]["node"] == node.as_str()), "{d:#}");
    let logs = |k: &str| b.ok(&["logs", &id.to_string(), "--kernel", k]);
    assert_eq!(logs("0"), format!("{}sub1 got: hello from main\n", env_lines(0)));
    assert_eq!(logs("1"), format!("{}sent\n", env_lines(1)));
    left.wait_gone();

    // Without an image, or more kernels than the node can ever hold: refused at submit.
    let o = b.cli(&["submit", "--kernels", "2", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--kernels needs --image"), "{}", text(&o.stderr));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let too_many = (cpus + 1).to_string();
    let o = b.cli(&["submit", "--kernels", &too_many, "--image", IMAGE, "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains(&format!("needs {too_many} kernels with 1 CPU")), "{}", text(&o.stderr));

    // A failing sub kernel fails the job; main is stopped and everything removed.
    let script = r#"if [ "$BERTH_CLUSTER_ROLE" = main ]; then sleep 300; else exit 7; fi"#;
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sh", "-c", script]);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["reason"], "exit code 7", "{d:#}");
    left.wait_gone();

    // While a job runs: two containers named by role on one internal network of the job.
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sleep", "300"]);
    b.wait_state(id, "RUNNING");
    left.wait_count(2);
    let nets = left.networks();
    assert_eq!(nets.len(), 1, "{nets:?}");
    assert!(nets[0].ends_with(&format!("-job-{id}.0")), "{nets:?}");
    let net = inspect(&["network", "inspect", &nets[0]]);
    assert_eq!(net["Internal"], true, "{net:#}");
    assert_eq!(net["Labels"]["berth.job"], id.to_string(), "{net:#}");
    let mut hosts: Vec<String> = left
        .names()
        .iter()
        .map(|c| inspect(&["container", "inspect", c])["Config"]["Hostname"].as_str().unwrap().to_string())
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["main", "sub1"]);
    // Cancel removes both containers and the network.
    b.ok(&["cancel", &id.to_string()]);
    b.wait_state(id, "CANCELLED");
    left.wait_gone();
}

/// The agent is killed while a 2-kernel job runs; the next agent re-adopts both containers
/// and keeps their network, removes a job network that no container uses (left by a crash),
/// and the job's end removes the rest.
#[test]
fn a_restarted_agent_re_adopts_kernels_and_reconciles_networks() {
    if !docker_ready("a_restarted_agent_re_adopts_kernels_and_reconciles_networks") {
        return;
    }
    let node = node_name("n");
    let left = Containers::of_agent(&node);
    let flags: &[&str] = &["--internal-job-networks"];
    let mut b = Berth::cluster("", &[(&node, flags)]);
    let script = r#"if [ "$BERTH_CLUSTER_ROLE" = main ]; then echo before; sleep 5; echo after; else sleep 300; fi"#;
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sh", "-c", script]);
    b.wait_state(id, "RUNNING");
    left.wait_count(2);
    b.kill_agent(0);
    let nets = left.networks();
    assert_eq!((left.names().len(), nets.len()), (2, 1), "they outlive the agent: {nets:?}");
    // A network of this agent's scope that no container uses, as a crash between creating
    // a job's network and its containers leaves.
    let scope = inspect(&["network", "inspect", &nets[0]])["Labels"]["berth.scope"].as_str().unwrap().to_string();
    let stray = format!("berth-{scope}-job-999999.0");
    let o = std::process::Command::new("docker")
        .args(["network", "create", "--internal", "--label", &format!("berth.scope={scope}"), &stray])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));

    b.add_agent(&node, flags);
    let start = Instant::now();
    while left.networks().contains(&stray) {
        assert!(start.elapsed() < PATIENCE, "the unused network was not removed: {:?}", left.networks());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(left.networks(), nets, "the running job's network stays");
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string(), "--kernel", "0"]), "before\nafter\n");
    left.wait_gone();

    // A network of the next job's name that berth did not create is not used: the job fails
    // saying how to fix it, and the foreign network is left alone.
    let clash = format!("berth-{scope}-job-{}.0", id + 1);
    let o = std::process::Command::new("docker").args(["network", "create", "--internal", &clash]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let next = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "true"]);
    assert_eq!(next, id + 1);
    let d = b.wait_state(next, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("exists that this agent did not create: remove it (docker network rm {clash})")),
        "{d:#}"
    );
    assert_eq!(left.networks(), vec![clash]);
    assert!(left.names().is_empty(), "{:?}", left.names());
}

/// `berth up` hands kernels its in-process dataset cache at a loopback address, which a
/// kernel on a job network cannot reach as such: the agent forwards it from the network's
/// gateway (an `internal` one here) and the kernel gets that address instead.
#[test]
fn kernels_on_a_job_network_reach_the_node_cache() {
    if !docker_ready("kernels_on_a_job_network_reach_the_node_cache") {
        return;
    }
    let b = Berth::up(&["--internal-job-networks", "--cache-listen", "127.0.0.1:0"]);
    // (sub1 may not even have started when main's end ends the job.)
    let script = r#"if [ "$BERTH_CLUSTER_ROLE" = main ]; then
  echo "url=$BERTH_CACHE_URL"; wget -q -O- "$BERTH_CACHE_URL/healthz"
else
  sleep 300
fi"#;
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sh", "-c", script]);
    let left = Containers::of_up_job(id);
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    let main = b.ok(&["logs", &id.to_string(), "--kernel", "0"]);
    let lines: Vec<&str> = main.lines().collect();
    assert_eq!(lines.len(), 2, "{main}");
    assert_eq!(lines[1], "ok", "{main}");
    let url = lines[0].strip_prefix("url=http://").unwrap_or_else(|| panic!("not an http URL: {main}"));
    let host = url.split(':').next().unwrap();
    let ip: std::net::Ipv4Addr = host.parse().unwrap_or_else(|e| panic!("{host}: {e}"));
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "{main}");
    left.wait_gone();
    // The forwarder went with its kernel: nothing listens there any more.
    assert!(std::net::TcpStream::connect(url).is_err(), "{url} still listens after the job");
}

/// The agent is killed while a job-network kernel uses a node cache on loopback (`berth
/// cache serve` here, the agent's `--cache-url`); the next agent re-adopts the container and
/// binds its forwarder again on the address the kernel was given, so the kernel reaches the
/// cache after the restart too.
#[test]
fn a_re_adopted_kernel_reaches_the_cache_again() {
    if !docker_ready("a_re_adopted_kernel_reaches_the_cache_again") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cache.key");
    let cache = cache_support::Node::start(&dir.path().join("c"), &key, 0, &[]);
    let node = node_name("c");
    let left = Containers::of_agent(&node);
    let flags: &[&str] = &["--internal-job-networks", "--cache-url", &cache.url];
    let key_arg = key.display().to_string();
    let mut b = Berth::cluster_with("", &["--cache-key-file", &key_arg], &[(&node, flags)]);
    // main asks the cache, waits for the test's go (a file it makes), and asks again.
    let script = r#"if [ "$BERTH_CLUSTER_ROLE" = main ]; then
  wget -q -O- "$BERTH_CACHE_URL/healthz"
  until [ -e /tmp/go ]; do sleep 0.1; done
  wget -q -O- "$BERTH_CACHE_URL/healthz"
else
  sleep 300
fi"#;
    let id = b.submit(&["--kernels", "2", "--image", IMAGE, "--", "sh", "-c", script]);
    b.wait_state(id, "RUNNING");
    let start = Instant::now();
    while b.ok(&["logs", &id.to_string(), "--kernel", "0"]) != "ok\n" {
        assert!(start.elapsed() < PATIENCE, "main did not reach the cache: {:?}", b.job(id));
        std::thread::sleep(Duration::from_millis(100));
    }
    let main = left.names().into_iter().find(|n| n.ends_with(&format!("-{id}.0.0"))).expect("main's container");
    let labels = inspect(&["container", "inspect", &main])["Config"]["Labels"].clone();
    let forward = labels["berth.cache-forward"].as_str().unwrap_or_else(|| panic!("{labels:#}")).to_string();
    let (at, target) = forward.split_once(' ').unwrap();
    assert_eq!(format!("http://{target}"), cache.url, "{forward}");

    b.kill_agent(0);
    b.add_agent(&node, flags);
    let start = Instant::now();
    while std::net::TcpStream::connect(at).is_err() {
        assert!(start.elapsed() < PATIENCE, "the re-adopting agent does not listen on {at} again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = std::process::Command::new("docker").args(["exec", &main, "touch", "/tmp/go"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string(), "--kernel", "0"]), "ok\nok\n");
    left.wait_gone();
}
