//! Many fake agents in one process, for measuring how one manager scales (bench/scale.sh).
//!
//! Each agent opens its own WebSocket to `<manager>/v1/agents/connect` with the join token and
//! speaks the real protocol (`berth_model::protocol`): `Register` with a synthetic topology,
//! a `Heartbeat` every `heartbeat_interval_ms` from `Welcome`, and a runtime that only sleeps:
//! `StartKernel` is answered with `Started` at once and `Finished` (succeeded, exit 0) after
//! `--run-ms`; `StopKernel` ends the kernel as `stopped`; `Forget` drops it. Commands are
//! idempotent like the real agent's (a repeated start or stop only re-reports the state), and
//! a lost connection is redialled with a `Register` that reports the fake kernels.
//!
//! Then `--clients` REST clients submit `--jobs` 1-CPU jobs as fast as the API takes them, and
//! the swarm records when each `StartKernel` arrives, which gives jobs started/s and
//! submit→start (the API's `submitted_at` → the command's arrival, one machine, one clock).
//! With `--manager-pid` it also reads the manager's CPU time and peak RSS from /proc.
//!
//! Usage: `BERTH_URL=... BERTH_TOKEN=<admin> BERTH_JOIN_TOKEN=... \
//!   cargo run --release --example swarm -- --agents 500 --jobs 50000 --manager-pid PID`

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_model::api::{JobView, SubmitRequest};
use berth_model::protocol::{
    AgentMessage, KernelEvent, KernelKey, KernelOutcome, KernelReport, KernelSample, ManagerMessage, PROTOCOL_VERSION,
};
use berth_model::{JobSpec, Topology};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

#[derive(Debug, Parser, Clone)]
struct Args {
    /// Manager URL (http://host:port).
    #[arg(long, env = "BERTH_URL")]
    url: String,
    /// Join token for the agents.
    #[arg(long, env = "BERTH_JOIN_TOKEN", hide_env_values = true)]
    join_token: String,
    /// API token that submits the jobs.
    #[arg(long, env = "BERTH_TOKEN", hide_env_values = true)]
    token: String,
    #[arg(long, default_value_t = 500)]
    agents: usize,
    /// CPUs per agent (split over --numa NUMA nodes).
    #[arg(long, default_value_t = 64)]
    cpus: u32,
    #[arg(long, default_value_t = 256)]
    mem_gib: u64,
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    #[arg(long, default_value_t = 2)]
    numa: u32,
    /// How long each fake kernel "runs" before it reports success.
    #[arg(long, default_value_t = 1000)]
    run_ms: u64,
    /// Jobs to submit once every agent is registered (0: only hold the agents until Ctrl-C).
    #[arg(long, default_value_t = 50_000)]
    jobs: usize,
    /// Concurrent REST clients submitting.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Manager process id, for CPU time and memory from /proc.
    #[arg(long)]
    manager_pid: Option<u32>,
    /// Give up waiting for the jobs after this many seconds (and report what happened).
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Node name prefix.
    #[arg(long, default_value = "swarm")]
    prefix: String,
    /// Heartbeats carry a usage sample of every running kernel, as real agents' do every
    /// `--usage-interval` (off by default, so scale figures compare with older builds).
    #[arg(long)]
    usage: bool,
    /// Once every job has started, measure the manager's CPU over this many seconds of steady
    /// state (kernels running, heartbeats flowing, nothing submitted); give --run-ms longer.
    #[arg(long, default_value_t = 0)]
    hold_s: u64,
}

/// What every agent task adds to.
#[derive(Default)]
struct Shared {
    registered: AtomicUsize,
    /// (job id, wall-clock µs) of each kernel's first `StartKernel`.
    starts: Mutex<Vec<(i64, i64)>>,
    finished: AtomicU64,
    stops: AtomicU64,
    duplicates: AtomicU64,
    /// Connections lost (each is redialled).
    lost: AtomicUsize,
}

fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

/// One fake kernel: running until its deadline, or ended with this outcome.
#[derive(Clone, Copy)]
enum Kernel {
    Running,
    Ended(KernelOutcome, Option<i32>),
}

fn event(k: Kernel) -> KernelEvent {
    match k {
        Kernel::Running => KernelEvent::Started { pid: 1, at: jiff::Timestamp::now() },
        Kernel::Ended(outcome, exit_code) => KernelEvent::Finished {
            outcome,
            exit_code,
            message: String::new(),
            at: jiff::Timestamp::now(),
            usage: None,
            signal: None,
        },
    }
}

async fn agent(
    args: Arc<Args>,
    index: usize,
    topology: Topology,
    shared: Arc<Shared>,
    dial_slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let name = format!("{}-{index:04}", args.prefix);
    let mut node = FakeNode { kernels: HashMap::new(), due: VecDeque::new(), registered: false };
    // Like the real agent: reconnect after a lost connection and report what it runs.
    loop {
        match node.session(&args, &name, &topology, &shared, &dial_slots, &mut stop).await {
            Ok(()) => return,
            Err(e) if *stop.borrow() => {
                eprintln!("{name}: {e:#}");
                return;
            }
            Err(e) => {
                shared.lost.fetch_add(1, Ordering::Relaxed);
                eprintln!("{name}: {e:#}; reconnecting");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One fake agent's kernels; they outlive its connections.
struct FakeNode {
    kernels: HashMap<KernelKey, Kernel>,
    /// Every kernel runs for the same time, so deadlines come in start order: a queue, no timers.
    due: VecDeque<(tokio::time::Instant, KernelKey)>,
    registered: bool,
}

impl FakeNode {
    async fn session(
        &mut self,
        args: &Args,
        name: &str,
        topology: &Topology,
        shared: &Shared,
        dial_slots: &Semaphore,
        stop: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let base = args.url.trim_end_matches('/').replacen("http://", "ws://", 1);
        let mut req = format!("{base}/v1/agents/connect").into_client_request()?;
        let auth = format!("Bearer {}", args.join_token).parse()?;
        req.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, auth);
        let mut ws = {
            let _slot = dial_slots.acquire().await?;
            // Nagle off, as the real agent does: small frames would wait ~40 ms for delayed ACKs.
            let (mut ws, _) =
                tokio_tungstenite::connect_async_with_config(req, None, true).await.context("cannot connect")?;
            let register = AgentMessage::Register {
                protocol_version: PROTOCOL_VERSION,
                node: name.to_string(),
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
                queue: berth_model::DEFAULT_QUEUE.to_string(),
                topology: topology.clone(),
                kernels: self.kernels.iter().map(|(key, k)| KernelReport { key: *key, last: event(*k) }).collect(),
                address: Some("127.0.0.1".into()),
                containers: Default::default(),
                labels: Default::default(),
                cache_url: None,
                cache_weight: None,
                folder_mounts: true,
            };
            ws.send(Message::text(serde_json::to_string(&register)?)).await?;
            ws
        };
        let interval = loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => match serde_json::from_str::<ManagerMessage>(t.as_str())? {
                    ManagerMessage::Welcome { heartbeat_interval_ms, .. } => break heartbeat_interval_ms.max(100),
                    ManagerMessage::Refused { reason } => bail!("refused: {reason}"),
                    other => bail!("expected welcome, got {other:?}"),
                },
                Some(Ok(_)) => continue,
                Some(Err(e)) => bail!("{e}"),
                None => bail!("closed before welcome"),
            }
        };
        if !self.registered {
            self.registered = true;
            shared.registered.fetch_add(1, Ordering::Relaxed);
        }
        let mut heartbeat = tokio::time::interval(Duration::from_millis(interval));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        let run = Duration::from_millis(args.run_ms);
        let started = Instant::now();
        loop {
            let next_due = self.due.front().map(|d| d.0);
            let mut out: Vec<AgentMessage> = Vec::new();
            tokio::select! {
                _ = stop.changed() => break,
                _ = heartbeat.tick() => {
                    // Like a real agent: a usage sample for every running kernel.
                    let usage = if args.usage {
                        self.kernels.iter().filter(|(_, k)| matches!(k, Kernel::Running)).map(|(key, _)| {
                            KernelSample { key: *key, usage: fake_usage(started.elapsed().as_secs_f64()) }
                        }).collect()
                    } else {
                        Vec::new()
                    };
                    out.push(AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage, gpus: Vec::new() });
                }
                _ = async { tokio::time::sleep_until(next_due.expect("guarded")).await }, if next_due.is_some() => {
                    let now = tokio::time::Instant::now();
                    while let Some(&(at, key)) = self.due.front() {
                        if at > now {
                            break;
                        }
                        self.due.pop_front();
                        if let Some(k @ Kernel::Running) = self.kernels.get_mut(&key) {
                            *k = Kernel::Ended(KernelOutcome::Succeeded, Some(0));
                            shared.finished.fetch_add(1, Ordering::Relaxed);
                            out.push(AgentMessage::Kernel { key, event: event(*k) });
                        }
                    }
                }
                m = ws.next() => {
                    let text = match m {
                        Some(Ok(Message::Text(t))) => t,
                        Some(Ok(Message::Close(_))) | None => bail!("the manager closed the connection"),
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => bail!("{e}"),
                    };
                    match serde_json::from_str::<ManagerMessage>(text.as_str())? {
                        ManagerMessage::StartKernel { key, .. } => match self.kernels.get(&key) {
                            Some(k) => {
                                shared.duplicates.fetch_add(1, Ordering::Relaxed);
                                out.push(AgentMessage::Kernel { key, event: event(*k) });
                            }
                            None => {
                                shared.starts.lock().expect("starts lock").push((key.job_id, now_us()));
                                self.kernels.insert(key, Kernel::Running);
                                self.due.push_back((tokio::time::Instant::now() + run, key));
                                out.push(AgentMessage::Kernel { key, event: event(Kernel::Running) });
                            }
                        },
                        ManagerMessage::StopKernel { key, .. } => {
                            let k = self.kernels.entry(key).or_insert(Kernel::Ended(KernelOutcome::Stopped, None));
                            if let Kernel::Running = k {
                                *k = Kernel::Ended(KernelOutcome::Stopped, Some(143));
                                shared.stops.fetch_add(1, Ordering::Relaxed);
                            }
                            out.push(AgentMessage::Kernel { key, event: event(*k) });
                        }
                        ManagerMessage::Forget { key } => {
                            self.kernels.remove(&key);
                        }
                        ManagerMessage::FetchLogs { req_id, .. } => {
                            out.push(AgentMessage::LogData { req_id, data: String::new(), next_offset: 0, found: false });
                        }
                        ManagerMessage::Refused { reason } => bail!("refused: {reason}"),
                        // No streams into fake kernels: the manager's wait for the dial times out.
                        ManagerMessage::Welcome { .. }
                        | ManagerMessage::OpenStream { .. }
                        | ManagerMessage::RemoveEnv { .. }
                        | ManagerMessage::SignalKernel { .. } => {}
                    }
                }
            }
            for m in &out {
                ws.feed(Message::text(serde_json::to_string(m)?)).await?;
            }
            if !out.is_empty() {
                ws.flush().await?;
            }
        }
        let _ = ws.close(None).await;
        Ok(())
    }
}

/// utime + stime (seconds) and VmHWM / VmRSS (bytes) of a process.
fn proc_figures(pid: u32) -> Option<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`, which may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
    };
    Some((ticks as f64 / hz, kb("VmHWM:")? * 1024, kb("VmRSS:")? * 1024))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn submit_all(args: &Args, submitted: Arc<Mutex<HashMap<i64, i64>>>) -> anyhow::Result<f64> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let begin = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (http, next, submitted) = (http.clone(), next.clone(), submitted.clone());
        let url = format!("{}/v1/jobs", args.url.trim_end_matches('/'));
        let (token, n) = (args.token.clone(), args.jobs);
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let mut spec = JobSpec::command(["sleep", "1"]);
                spec.resources.cpu_milli = 1000;
                spec.resources.mem_bytes = 1 << 30;
                let r = http.post(&url).bearer_auth(&token).json(&SubmitRequest { spec }).send().await?;
                if !r.status().is_success() {
                    bail!("submit failed: {} {}", r.status(), r.text().await.unwrap_or_default());
                }
                let v: JobView = r.json().await?;
                submitted.lock().expect("submitted lock").insert(v.id, v.submitted_at.as_microsecond());
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(begin.elapsed().as_secs_f64())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let per_numa = args.cpus / args.numa.max(1);
    let topology = Topology::synthetic(
        args.numa,
        per_numa,
        (args.mem_gib << 30) / args.numa.max(1) as u64,
        args.gpus / args.numa.max(1),
    );
    let shared = Arc::new(Shared::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let dial_slots = Arc::new(Semaphore::new(32));
    let t_dial = Instant::now();
    let mut agents = Vec::new();
    for i in 0..args.agents {
        let a = agent(args.clone(), i, topology.clone(), shared.clone(), dial_slots.clone(), stop_rx.clone());
        agents.push(tokio::spawn(a));
    }
    while shared.registered.load(Ordering::Relaxed) < args.agents {
        if t_dial.elapsed() > Duration::from_secs(120) {
            bail!("only {} of {} agents registered in 120 s", shared.registered.load(Ordering::Relaxed), args.agents);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "agents: {} ({} CPUs, {} GiB, {} GPUs each; kernels run {} ms) registered in {:.2}s",
        args.agents,
        args.cpus,
        args.mem_gib,
        args.gpus,
        args.run_ms,
        t_dial.elapsed().as_secs_f64()
    );
    if args.jobs == 0 {
        println!("holding the agents; Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
        let _ = stop_tx.send(true);
        return Ok(());
    }

    let proc0 = args.manager_pid.and_then(proc_figures);
    let submitted = Arc::new(Mutex::new(HashMap::with_capacity(args.jobs)));
    let t0 = Instant::now();
    let t0_us = now_us();
    // Progress every second: submitted, started, finished, manager RSS.
    let progress = {
        let (shared, submitted, pid) = (shared.clone(), submitted.clone(), args.manager_pid);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let rss = pid.and_then(proc_figures).map(|p| mib(p.2)).unwrap_or(f64::NAN);
                eprintln!(
                    "  t={:>5.1}s submitted {} started {} finished {} manager RSS {rss:.0} MiB",
                    t0.elapsed().as_secs_f64(),
                    submitted.lock().expect("submitted lock").len(),
                    shared.starts.lock().expect("starts lock").len(),
                    shared.finished.load(Ordering::Relaxed)
                );
            }
        })
    };
    let submit_secs = submit_all(&args, submitted.clone()).await?;
    println!(
        "submitted {} jobs in {submit_secs:.2}s from {} clients = {:.0}/s",
        args.jobs,
        args.clients,
        args.jobs as f64 / submit_secs
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    // Until every job ran, or nothing moved for a minute (jobs of lost nodes never start again).
    let (mut seen, mut moved) = (0, Instant::now());
    let mut held = args.hold_s == 0;
    while (shared.finished.load(Ordering::Relaxed) as usize) < args.jobs && Instant::now() < deadline {
        if !held && shared.starts.lock().expect("starts lock").len() >= args.jobs {
            held = true;
            hold(&args, &shared).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = shared.finished.load(Ordering::Relaxed) + shared.starts.lock().expect("starts lock").len() as u64;
        if now != seen {
            (seen, moved) = (now, Instant::now());
        } else if moved.elapsed() > Duration::from_secs(60) {
            eprintln!("no start or end for 60 s: giving up");
            break;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let proc1 = args.manager_pid.and_then(proc_figures);
    progress.abort();
    let _ = stop_tx.send(true);
    for a in agents {
        let _ = a.await;
    }

    let starts = std::mem::take(&mut *shared.starts.lock().expect("starts lock"));
    let submitted = submitted.lock().expect("submitted lock");
    let mut times: Vec<i64> = starts.iter().map(|s| s.1).collect();
    times.sort_unstable();
    let mut lat: Vec<f64> =
        starts.iter().filter_map(|(id, at)| submitted.get(id).map(|s| (at - s) as f64 / 1000.0)).collect();
    lat.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = times.len();
    println!(
        "started {n}/{} ({} duplicate starts), finished {}, stopped {}, connections lost {}, after {elapsed:.2}s",
        args.jobs,
        shared.duplicates.load(Ordering::Relaxed),
        shared.finished.load(Ordering::Relaxed),
        shared.stops.load(Ordering::Relaxed),
        shared.lost.load(Ordering::Relaxed)
    );
    if n >= 2 {
        let last = times[n - 1];
        let overall = n as f64 / ((last - t0_us) as f64 / 1e6);
        let (a, b) = (times[n / 10], times[n * 9 / 10]);
        let steady = (n * 8 / 10) as f64 / ((b - a).max(1) as f64 / 1e6);
        println!(
            "jobs started/s: overall {overall:.0} (first submit -> last start {:.2}s), steady {steady:.0} (10th..90th percentile start)",
            (last - t0_us) as f64 / 1e6
        );
        // Starts per second since the first submit: shows the ramp, the plateau and the tail.
        let secs = ((last - t0_us) / 1_000_000 + 1) as usize;
        let mut per_sec = vec![0u32; secs];
        for t in &times {
            per_sec[((t - t0_us).max(0) / 1_000_000) as usize] += 1;
        }
        println!("starts per second: {per_sec:?}");
    }
    println!(
        "submit->start: n={} p50={:.1}ms p90={:.1}ms p99={:.1}ms max={:.1}ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    if let (Some(p0), Some(p1)) = (proc0, proc1) {
        println!(
            "manager: CPU {:.1}s over {elapsed:.1}s ({:.0}% of one core), peak RSS {:.0} MiB (VmHWM), RSS at end {:.0} MiB",
            p1.0 - p0.0,
            100.0 * (p1.0 - p0.0) / elapsed,
            mib(p1.1),
            mib(p1.2)
        );
    }
    Ok(())
}

/// The manager's CPU over `--hold-s` seconds while every job runs and nothing else happens:
/// the cost of heartbeats (and their usage samples) alone.
async fn hold(args: &Args, shared: &Shared) {
    let Some(pid) = args.manager_pid else { return };
    let running = args.jobs as u64 - shared.finished.load(Ordering::Relaxed);
    let (p0, t0) = (proc_figures(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.hold_s)).await;
    let (p1, secs) = (proc_figures(pid), t0.elapsed().as_secs_f64());
    let ended = args.jobs as u64 - shared.finished.load(Ordering::Relaxed);
    if let (Some(p0), Some(p1)) = (p0, p1) {
        println!(
            "steady state: {running}..{ended} kernels running on {} agents, usage samples {}: manager CPU {:.2}s over {secs:.1}s = {:.1}% of one core",
            args.agents,
            if args.usage { "on" } else { "off" },
            p1.0 - p0.0,
            100.0 * (p1.0 - p0.0) / secs
        );
    }
}

/// What a fake kernel reports it used: one busy CPU and 100 MiB.
fn fake_usage(secs: f64) -> berth_model::KernelUsage {
    berth_model::KernelUsage {
        cpu_seconds: Some(secs),
        memory_bytes: Some(100 << 20),
        memory_peak_bytes: Some(100 << 20),
        ..Default::default()
    }
}
