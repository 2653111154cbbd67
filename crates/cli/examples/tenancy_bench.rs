//! Tenancy benchmarks (bench/tenancy.sh drives it), against a running `berth up`:
//! - `submit SECS CLIENTS quotas|no-quotas`: sets up 10 projects and 100 users (10 per
//!   project), with or without quotas on every user and project, then CLIENTS clients submit
//!   jobs as those users into their projects for SECS seconds (the jobs wait behind a blocker
//!   job holding every CPU); prints submissions per second.
//! - `auth N`: N sequential requests of `GET /v1/health` (no token), `GET /v1/whoami` with a
//!   token the manager has cached, and `GET /v1/whoami` with N fresh tokens (first use: a
//!   store lookup); prints p50/p99 of each, so the cost of authentication is the difference.
//!
//! Usage: `BERTH_URL=... BERTH_TOKEN=<admin> BENCH_NODE_CPUS=2 tenancy_bench submit 10 8 quotas`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_model::JobSpec;
use berth_model::api::SubmitRequest;
use serde_json::{Value, json};

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{path}: {status} {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// 100 users in 10 projects; returns (token, project) per user.
async fn setup(api: &Api, admin: &str, quotas: bool) -> anyhow::Result<Vec<(String, String)>> {
    use reqwest::Method;
    let mut users = Vec::new();
    for p in 0..10 {
        let project = format!("p{p}");
        api.call(Method::POST, "/v1/admin/projects", Some(admin), Some(json!({"name": project}))).await?;
        if quotas {
            let l = json!({"gpu_milli": 8000, "cpu_milli": 64000, "running_jobs": 100, "pending_jobs": 1_000_000, "max_priority": 10});
            api.call(Method::PUT, &format!("/v1/admin/quotas/project/{project}"), Some(admin), Some(l)).await?;
        }
        for u in 0..10 {
            let name = format!("u{p}x{u}");
            let created = api.call(Method::POST, "/v1/admin/users", Some(admin), Some(json!({"name": name}))).await?;
            let path = format!("/v1/admin/projects/{project}/members");
            api.call(Method::POST, &path, Some(admin), Some(json!({"user": name}))).await?;
            if quotas {
                let l = json!({"cpu_milli": 16000, "running_jobs": 20, "pending_jobs": 100_000, "max_priority": 5});
                api.call(Method::PUT, &format!("/v1/admin/quotas/user/{name}"), Some(admin), Some(l)).await?;
            }
            users.push((created["token"].as_str().context("token")?.to_string(), project.clone()));
        }
    }
    Ok(users)
}

async fn submit(api: Api, admin: String, secs: u64, clients: usize, quotas: bool) -> anyhow::Result<()> {
    let cpus: u64 = std::env::var("BENCH_NODE_CPUS").ok().and_then(|c| c.parse().ok()).unwrap_or(1);
    let users = Arc::new(setup(&api, &admin, quotas).await?);
    let mut blocker = JobSpec::command(["sleep", "3600"]);
    blocker.resources.cpu_milli = cpus * 1000;
    let b = api
        .call(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&admin),
            Some(serde_json::to_value(SubmitRequest { spec: blocker })?),
        )
        .await?;
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (api, users, count, stop) = (api.clone(), users.clone(), count.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while !stop.load(Ordering::Relaxed) {
                let (token, project) = &users[i % users.len()];
                let mut spec = JobSpec::command(["true"]);
                spec.project = Some(project.clone());
                let body = serde_json::to_value(SubmitRequest { spec }).unwrap();
                if let Err(e) = api.call(reqwest::Method::POST, "/v1/jobs", Some(token), Some(body)).await {
                    eprintln!("submit failed: {e}");
                    break;
                }
                count.fetch_add(1, Ordering::Relaxed);
                i += clients;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let n = count.load(Ordering::Relaxed);
    let rate = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "submit {}: {n} jobs by 100 users in 10 projects, {clients} clients, {secs}s: {rate:.0} submissions/s",
        if quotas { "WITH quotas on every user and project" } else { "without quotas" }
    );
    let _ = api.call(reqwest::Method::POST, &format!("/v1/jobs/{}/cancel", b["id"]), Some(&admin), None).await;
    Ok(())
}

async fn auth(api: Api, admin: String, n: usize) -> anyhow::Result<()> {
    use reqwest::Method;
    let timed = |label: &'static str, mut v: Vec<f64>| {
        println!("{label}: p50 {:.3} ms, p99 {:.3} ms ({} requests)", pct(&mut v, 0.5), pct(&mut v, 0.99), v.len());
    };
    let mut health = Vec::with_capacity(n);
    let mut cached = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        api.call(Method::GET, "/v1/health", None, None).await?;
        health.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        api.call(Method::GET, "/v1/whoami", Some(&admin), None).await?;
        cached.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut tokens = Vec::with_capacity(n);
    for _ in 0..n {
        let t = api.call(Method::POST, "/v1/tokens", Some(&admin), Some(json!({"label": "bench"}))).await?;
        tokens.push(t["token"].as_str().context("token")?.to_string());
    }
    let mut fresh = Vec::with_capacity(n);
    for t in &tokens {
        let s = Instant::now();
        api.call(Method::GET, "/v1/whoami", Some(t), None).await?;
        fresh.push(s.elapsed().as_secs_f64() * 1e3);
    }
    timed("GET /v1/health (no token)", health);
    timed("GET /v1/whoami, token cached", cached);
    timed("GET /v1/whoami, token's first use (store lookup + memberships)", fresh);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("BERTH_URL").context("set BERTH_URL")?;
    let admin = std::env::var("BERTH_TOKEN").context("set BERTH_TOKEN (an admin token)")?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let api = Api { http, url };
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["submit", secs, clients, mode] => {
            let quotas = match *mode {
                "quotas" => true,
                "no-quotas" => false,
                m => bail!("unknown mode `{m}`: use quotas or no-quotas"),
            };
            submit(api, admin, secs.parse()?, clients.parse()?, quotas).await
        }
        ["auth", n] => auth(api, admin, n.parse()?).await,
        _ => bail!("usage: tenancy_bench submit SECS CLIENTS quotas|no-quotas | auth N"),
    }
}
