//! Prometheus metrics (issue 16) through a real Prometheus (Debian's `prometheus` package,
//! installed by scripts/test.sh): it scrapes `berth up`'s manager (`/metrics` on the API
//! address) and its agent (`--metrics-listen`), and its query API answers the running and
//! pending job counts that `berth ps` shows, and every query of the Grafana dashboard
//! (deploy/grafana/berth.json). The example scrape config and the alert rules under
//! deploy/prometheus pass `promtool check` and the rules' own unit tests.
//!
//! Without `prometheus`/`promtool` on PATH the tests print `SKIPPED:`; with `CI=true` they fail.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Berth, PATIENCE, text};

/// The path of `tool`, or `None` after saying SKIPPED (a failure on CI).
fn tool(tool: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file());
    if found.is_none() {
        let why = format!("{test}: no `{tool}` on PATH (apt-get install prometheus; scripts/test.sh does)");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED: {why}");
    }
    found
}

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus").join(file)
}

#[test]
fn the_example_config_and_alert_rules_pass_promtool() {
    let Some(promtool) = tool("promtool", "the_example_config_and_alert_rules_pass_promtool") else { return };
    for args in [
        vec!["check", "rules", deploy("alerts.yml").to_str().unwrap()],
        vec!["check", "config", deploy("prometheus.yml").to_str().unwrap()],
        // Each alert fires on the synthetic series it is for, and only there.
        vec!["test", "rules", deploy("alerts_test.yml").to_str().unwrap()],
    ] {
        let o = Command::new(&promtool).args(&args).output().unwrap();
        assert!(o.status.success(), "promtool {args:?}:\n{}{}", text(&o.stdout), text(&o.stderr));
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: good enough for a test's own servers).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.0 GET of `path` on `addr`; the body, or `None` if nothing answered 200.
fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    // `HTTP/1.0 200 OK`: Go answers in the request's version
    head.lines().next()?.split(' ').nth(1).filter(|c| *c == "200").map(|_| body.to_string())
}

fn url_encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of the instant vector `query` as Prometheus answers it now: `None` while it has
/// no sample (not scraped yet); several series are an error of the query.
fn query(prom: &str, q: &str) -> Option<f64> {
    let body = get(prom, &format!("/api/v1/query?query={}", url_encode(q)))?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{q}: one series expected, got {v}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// A Prometheus of the test's own on a temp dir, killed by pid when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(bin: &Path, targets: &[(&str, &str)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let jobs: String = targets
            .iter()
            .map(|(job, t)| format!("  - job_name: {job}\n    static_configs:\n      - targets: [\"{t}\"]\n"))
            .collect();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, format!("global:\n  scrape_interval: 1s\nscrape_configs:\n{jobs}")).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        Prometheus { child, addr, _dir: dir }
    }

    /// Waits until `q` answers `want` (a scrape after the change); the last answer otherwise.
    fn wait_for(&self, q: &str, want: f64) -> Option<f64> {
        let deadline = Instant::now() + PATIENCE;
        let mut last = None;
        while Instant::now() < deadline {
            last = query(&self.addr, q);
            if last == Some(want) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        last
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many jobs `berth ps` lists in `state`.
fn ps_count(b: &Berth, state: &str) -> f64 {
    let v = b.json(&["ps"]);
    v.as_array().expect("ps -o json is a list").iter().filter(|j| j["state"] == state).count() as f64
}

#[test]
fn prometheus_reads_the_running_jobs_berth_ps_shows() {
    let Some(bin) = tool("prometheus", "prometheus_reads_the_running_jobs_berth_ps_shows") else { return };
    let agent = format!("127.0.0.1:{}", free_port());
    // A 2-CPU node whatever this machine has, so the test's arithmetic holds everywhere.
    let topo = tempfile::tempdir().unwrap();
    let topo_file = topo.path().join("topology.toml");
    std::fs::write(&topo_file, "[[numa]]\ncpus = \"0-1\"\nmemory = \"4GiB\"\n").unwrap();
    let b = Berth::up(&["--metrics-listen", &agent, "--topology", topo_file.to_str().unwrap()]);
    // Two one-CPU jobs fill the 2-CPU node (the first burns its CPU); the third waits for
    // resources.
    let burn = ["--cpus", "1", "--", "sh", "-c", "while :; do :; done"];
    let ids: Vec<i64> = [&burn[..], &["--cpus", "1", "--", "sleep", "300"], &["--cpus", "1", "--", "sleep", "300"]]
        .iter()
        .map(|args| b.submit(args))
        .collect();
    b.wait_state(ids[0], "RUNNING");
    b.wait_state(ids[1], "RUNNING");
    let (running, pending) = (ps_count(&b, "RUNNING"), ps_count(&b, "PENDING"));
    assert_eq!((running, pending), (2.0, 1.0), "berth ps: {}", b.ok(&["ps"]));

    let manager = b.url.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&bin, &[("berth-manager", &manager), ("berth-agent", &agent)]);
    let got = prom.wait_for("sum(berth_jobs{state=\"running\"})", running);
    assert_eq!(got, Some(running), "running jobs through Prometheus; its log:\n{}", prom.log());
    assert_eq!(prom.wait_for("sum(berth_jobs{state=\"pending\"})", pending), Some(pending));
    assert_eq!(prom.wait_for("sum(berth_jobs_pending{reason=\"resources\"})", 1.0), Some(1.0));
    // The agent's view agrees: two kernels run, each with its own memory figure (cgroups
    // permitting; without them a kernel has no figures of its own).
    assert_eq!(prom.wait_for("sum(berth_agent_kernels{state=\"running\"})", running), Some(running));
    assert_eq!(prom.wait_for("berth_agents_connected", 1.0), Some(1.0));
    assert_eq!(prom.wait_for("sum(berth_node_cpus_allocated)", 2.0), Some(2.0));
    assert_eq!(prom.wait_for("count(up == 1)", 2.0), Some(2.0), "both targets up");
    // No label of ours clashes with a target label Prometheus sets (it would rename ours).
    let clash =
        "count({__name__=~\"berth_.*\", exported_job!=\"\"} or {__name__=~\"berth_.*\", exported_instance!=\"\"})";
    assert_eq!(query(&prom.addr, clash), None, "a berth label named job or instance");
    if support::cgroups_usable() {
        assert_eq!(prom.wait_for("count(berth_kernel_memory_bytes > 0)", running), Some(running));
        // The burner's CPU time grows (read from its cgroup, or on cgroup v1 from /proc for
        // the processes in its memory cgroup); the sleeper's stays near 0.
        let burner = format!("berth_kernel_cpu_seconds{{job_id=\"{}\"}} > 0.5", ids[0]);
        assert!(prom.wait_for(&format!("count({burner})"), 1.0) == Some(1.0), "{}", b.ok(&["ps"]));
        let sleeper = query(&prom.addr, &format!("berth_kernel_cpu_seconds{{job_id=\"{}\"}}", ids[1]));
        assert!(sleeper.is_some_and(|s| s < 0.5), "a sleeping kernel used {sleeper:?} CPU seconds");
    } else {
        eprintln!("SKIPPED: per-kernel memory through Prometheus: no usable cgroups here");
    }

    // A job ending moves the counts, and the finished counter, at the next scrape.
    b.ok(&["cancel", &ids[0].to_string()]);
    b.wait_state(ids[2], "RUNNING");
    assert_eq!(prom.wait_for("sum(berth_jobs{state=\"pending\"})", 0.0), Some(0.0));
    assert_eq!(prom.wait_for("sum(berth_jobs_finished_total{state=\"cancelled\"})", 1.0), Some(1.0));
    assert_eq!(prom.wait_for("sum(berth_scheduler_starts_total)", 3.0), Some(3.0));
    // API requests are counted by route template, never by raw path (one series for all ids).
    let routes = query(&prom.addr, "count(berth_api_requests_total{route=\"/v1/jobs/{id}\"})");
    assert!(routes.is_some(), "show/wait requests counted under /v1/jobs/{{id}}");
    let raw = query(&prom.addr, &format!("count(berth_api_requests_total{{route=\"/v1/jobs/{}\"}})", ids[0]));
    assert_eq!(raw, None, "no series for a raw path");

    // Every query of the Grafana dashboard is one Prometheus accepts, over metrics berth
    // exports (GPU series need NVML; kernel figures need cgroups).
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("../grafana/berth.json")).unwrap()).unwrap();
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() > 20, "{exprs:?}");
    for e in &exprs {
        let q = e.replace("$__rate_interval", "1m");
        let body = get(&prom.addr, &format!("/api/v1/query?query={}", url_encode(&q)));
        let v: Value = serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
        assert_eq!(v["status"], "success", "dashboard query {q}: {v}");
        for name in metric_names(&q) {
            if name.starts_with("berth_gpu_") || (name.starts_with("berth_kernel_") && !support::cgroups_usable()) {
                continue;
            }
            // Seen at any scrape of the test (pending reasons went away with the last pending job).
            let n = query(&prom.addr, &format!("count(last_over_time({{__name__=\"{name}\"}}[10m]))"));
            assert!(n.is_some_and(|n| n > 0.0), "dashboard query {q}: berth exports no {name}");
        }
    }
}

/// The `expr` of every panel target of a Grafana dashboard.
fn dashboard_exprs(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    out
}

/// The `berth_*` metric names in a PromQL expression.
fn metric_names(q: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = q;
    while let Some(i) = rest.find("berth_") {
        let name: String = rest[i..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        rest = &rest[i + name.len()..];
        names.push(name);
    }
    names
}
