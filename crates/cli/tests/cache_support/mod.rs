//! Harness for the cache tests: runs `berth cache serve` as a child process on 127.0.0.1 with
//! an ephemeral port and a temp data dir, mints tokens with `berth cache token`, and talks
//! HTTP with reqwest.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_cache::Member;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_berth");

/// How long a node may take to get a member list pushed to it.
const WAIT: Duration = Duration::from_secs(60);

/// A running cache node; killed (SIGKILL) when dropped.
pub struct Node {
    pub url: String,
    pub data: PathBuf,
    pub key: PathBuf,
    child: Option<Child>,
}

impl Node {
    /// `berth cache serve --data-dir <data> --listen 127.0.0.1:<port> --key-file <key> <extra>`.
    pub fn start(data: &Path, key: &Path, port: u16, extra: &[&str]) -> Node {
        let mut child = Command::new(BIN)
            .args(["cache", "serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data)
            .arg("--key-file")
            .arg(key)
            .args(extra)
            .env("RUST_LOG", "info")
            .env_remove("BERTH_CA_FILE")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(data.with_extension("stderr")).unwrap()))
            .spawn()
            .expect("spawn berth cache serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(i) = line.find("http://").or_else(|| line.find("https://")) {
                    let url: String = line[i..].chars().take_while(|c| !c.is_whitespace()).collect();
                    let _ = tx.send(url);
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!(
                "berth cache serve printed no URL; stderr: {}",
                std::fs::read_to_string(data.with_extension("stderr")).unwrap_or_default()
            )
        });
        Node { url, data: data.to_path_buf(), key: key.to_path_buf(), child: Some(child) }
    }

    /// The port the node listens on.
    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Mints a token with the key file.
pub fn token(key: &Path, args: &[&str]) -> String {
    let o = Command::new(BIN).args(["cache", "token", "--key-file"]).arg(key).args(args).output().unwrap();
    assert!(o.status.success(), "berth cache token failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Runs `berth cache <args>` against `url` with `token`.
pub fn cli(url: &str, token: &str, args: &[&str]) -> std::process::Output {
    cli_env(url, token, &[], args)
}

/// [`cli`] with more environment, and none of the caller's BERTH_CA_FILE.
pub fn cli_env(url: &str, token: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("cache")
        .args(args)
        .env("BERTH_CACHE_URL", url)
        .env("BERTH_CACHE_TOKEN", token)
        .env_remove("BERTH_CA_FILE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn ok(o: std::process::Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// `{"public": .., "quota": .., "projects": ..}` PUT to /v1/buckets/{name} of one node.
pub async fn bucket(http: &reqwest::Client, url: &str, admin: &str, name: &str, body: serde_json::Value) {
    let r = http.put(format!("{url}/v1/buckets/{name}")).bearer_auth(admin).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// The value of one sample of /metrics (0 when absent).
pub async fn metric(http: &reqwest::Client, url: &str, series: &str) -> u64 {
    let t = http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    t.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')).map(|v| v.parse().unwrap()))
        .unwrap_or(0)
}

/// The members a cache node routes by: `(name, state, weight)`, sorted by name.
pub async fn routed(http: &reqwest::Client, url: &str) -> Vec<(String, String, u32)> {
    let v: Value = http.get(format!("{url}/v1/members")).send().await.unwrap().json().await.unwrap();
    let ms: Vec<Member> = serde_json::from_value(v["members"].clone()).unwrap();
    let mut out: Vec<_> = ms.into_iter().map(|m| (m.name, m.state.as_str().to_string(), m.weight)).collect();
    out.sort();
    out
}

pub async fn wait_routed(http: &reqwest::Client, url: &str, want: &[(&str, &str, u32)]) {
    let mut want: Vec<(String, String, u32)> =
        want.iter().map(|(n, s, w)| (n.to_string(), s.to_string(), *w)).collect();
    want.sort();
    let t0 = Instant::now();
    loop {
        let got = routed(http, url).await;
        if got == want {
            return;
        }
        assert!(t0.elapsed() < WAIT, "{url} never routed by {want:?}: it has {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the cache node at `url` knows bucket `name` (the manager's push); returns its
/// settings.
pub async fn wait_bucket(http: &reqwest::Client, url: &str, admin: &str, name: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let v: Value =
            http.get(format!("{url}/v1/buckets")).bearer_auth(admin).send().await.unwrap().json().await.unwrap();
        if let Some(b) = v.as_array().unwrap().iter().find(|b| b["name"] == name) {
            return b.clone();
        }
        assert!(t0.elapsed() < WAIT, "{url} never learnt bucket {name}: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
