//! Load generator for berth's foundation benchmarks (bench/foundation.sh drives it).
//!
//! Talks to a running manager over the REST API like the CLI does and prints figures:
//! - `latency N`: N sequential jobs on an idle node; per job, submit→start as the agent saw it
//!   (`started_at − submitted_at`) and as the job itself saw it (the job prints its own start
//!   time with `date +%s%N`; compared with the client's clock just before the submit request).
//! - `makespan N`: N trivial 1-CPU `true` jobs submitted as fast as 8 clients can, then the time
//!   from the first submit until the last job ended.
//! - `submit-rate SECS CLIENTS`: CLIENTS concurrent clients submit jobs that wait in the queue
//!   (a blocker job holds every CPU first) for SECS seconds; prints submissions per second.
//!
//! Usage: `BERTH_URL=... BERTH_TOKEN=... cargo run --release --example loadgen -- latency 200`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use berth_model::JobSpec;
use berth_model::api::{JobDetail, JobView, SubmitRequest};

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Api {
    async fn submit(&self, spec: JobSpec) -> anyhow::Result<JobView> {
        let r = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(&self.token)
            .json(&SubmitRequest { spec })
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("submit failed: {} {}", r.status(), r.text().await.unwrap_or_default());
        }
        Ok(r.json().await?)
    }

    async fn job(&self, id: i64) -> anyhow::Result<JobDetail> {
        let r = self.http.get(format!("{}/v1/jobs/{id}", self.url)).bearer_auth(&self.token).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    async fn unfinished(&self) -> anyhow::Result<Vec<JobView>> {
        let r = self.http.get(format!("{}/v1/jobs", self.url)).bearer_auth(&self.token).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    async fn cancel(&self, id: i64) -> anyhow::Result<()> {
        self.http
            .post(format!("{}/v1/jobs/{id}/cancel", self.url))
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn stdout(&self, id: i64) -> anyhow::Result<String> {
        let r = self.http.get(format!("{}/v1/jobs/{id}/logs", self.url)).bearer_auth(&self.token).send().await?;
        Ok(r.error_for_status()?.text().await?)
    }

    async fn wait_done(&self, id: i64) -> anyhow::Result<JobDetail> {
        let mut delay = Duration::from_millis(2);
        loop {
            let d = self.job(id).await?;
            if d.job.state.is_terminal() {
                return Ok(d);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(50));
        }
    }
}

/// A trivial 1-CPU job; with `BENCH_IMAGE` set, a container job of that image (bench/docker.sh).
fn trivial(cmd: &[&str]) -> JobSpec {
    let mut s = JobSpec::command(cmd.iter().copied());
    s.resources.cpu_milli = 1000;
    s.resources.mem_bytes = 64 << 20;
    s.image = std::env::var("BENCH_IMAGE").ok().filter(|i| !i.is_empty());
    s
}

fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "{name}: n={} p50={:.2}ms p90={:.2}ms p99={:.2}ms mean={:.2}ms max={:.2}ms",
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        percentile(&v, 0.99),
        mean,
        v.last().copied().unwrap_or(f64::NAN)
    );
}

async fn latency(api: &Api, n: usize) -> anyhow::Result<()> {
    let mut agent_seen = Vec::new();
    let mut job_seen = Vec::new();
    // busybox's `date` has no %N: container jobs (BENCH_IMAGE) give the manager's figure only.
    let container = std::env::var_os("BENCH_IMAGE").is_some_and(|i| !i.is_empty());
    for _ in 0..n {
        let t0 = now_ns();
        let v = api.submit(trivial(if container { &["true"] } else { &["date", "+%s%N"] })).await?;
        let d = api.wait_done(v.id).await?;
        if let Some(start) = d.job.started_at {
            agent_seen.push((start.as_microsecond() - d.job.submitted_at.as_microsecond()) as f64 / 1000.0);
        }
        if container {
            continue;
        }
        let out = api.stdout(v.id).await?;
        let started: i128 = out.trim().parse().with_context(|| format!("job {} printed `{out}`", v.id))?;
        job_seen.push((started - t0) as f64 / 1e6);
    }
    summary("submit->start (manager: submitted_at -> RUNNING recorded)", agent_seen);
    if !job_seen.is_empty() {
        summary("submit->start (client before POST -> job's own clock)", job_seen);
    }
    Ok(())
}

async fn makespan(api: &Api, n: usize) -> anyhow::Result<()> {
    let first = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (api, next) = (api.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n as u64 {
                ids.push(api.submit(trivial(&["true"])).await?.id);
            }
            anyhow::Ok(ids)
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await??);
    }
    let submitted = first.elapsed();
    loop {
        if api.unfinished().await?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = first.elapsed();
    let mut ok = 0;
    for &id in &ids {
        if api.job(id).await?.job.state == berth_model::JobState::Succeeded {
            ok += 1;
        }
    }
    println!(
        "makespan of {n} trivial 1-CPU jobs: {:.2}s (all submitted after {:.2}s; {ok}/{n} SUCCEEDED; {:.0} jobs/s)",
        done.as_secs_f64(),
        submitted.as_secs_f64(),
        n as f64 / done.as_secs_f64()
    );
    Ok(())
}

async fn submit_rate(api: &Api, secs: u64, clients: usize) -> anyhow::Result<()> {
    // Hold every CPU so that the submitted jobs wait in the queue.
    let cpus = std::env::var("BENCH_NODE_CPUS").ok().and_then(|c| c.parse::<u64>().ok()).unwrap_or(2);
    let mut blocker = trivial(&["sleep", "3600"]);
    blocker.resources.cpu_milli = cpus * 1000;
    let blocker = api.submit(blocker).await?;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (api, count) = (api.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                api.submit(trivial(&["true"])).await?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                count.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = count.load(Ordering::Relaxed);
    println!("sustained submissions: {n} in {elapsed:.2}s from {clients} clients = {:.0}/s", n as f64 / elapsed);
    summary("submit request latency", lat);
    api.cancel(blocker.id).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("BERTH_URL").context("set BERTH_URL")?;
    let token = std::env::var("BERTH_TOKEN").context("set BERTH_TOKEN")?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let api = Api { http, url: url.trim_end_matches('/').to_string(), token };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("latency") => latency(&api, num(1, 200) as usize).await,
        Some("makespan") => makespan(&api, num(1, 1000) as usize).await,
        Some("submit-rate") => submit_rate(&api, num(1, 10), num(2, 8) as usize).await,
        _ => bail!("usage: loadgen latency N | makespan N | submit-rate SECS CLIENTS"),
    }
}
