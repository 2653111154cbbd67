//! `berth cache ...`: run a dataset cache node (`serve`), mint tokens (`token`), manage
//! buckets (`bucket create|list`), prefetch a dataset (`warm`) and show counters (`stats`).
//!
//! The client commands find a node through `--url`/`BERTH_CACHE_URL` and authenticate with
//! `--token`/`BERTH_CACHE_TOKEN` (or `--token-file`); they ask that node for `/v1/members` and
//! then talk to every member (bucket settings, stats) or to each key's owner (warm).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_cache::maglev::{Maglev, Member};
use berth_cache::server::{self, Node};
use berth_cache::token::{Claims, Key, unix_now};
use berth_cache::{BucketStats, Store};
use berth_model::{format_bytes, parse_duration, parse_mem};
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use percent_encoding::{AsciiSet, CONTROLS, percent_encode};
use serde_json::Value;

use crate::UsageError;
use crate::output::{OutputArgs, print_json, print_table, table};

#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

impl CacheArgs {
    /// `serve` is a daemon (info logs, default SIGPIPE handling); the rest are user commands.
    pub fn is_daemon(&self) -> bool {
        matches!(self.command, CacheCommand::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// Run a cache node: HTTP object cache on this machine's disk
    Serve(ServeArgs),
    /// Mint a signed cache token with the nodes' key file
    Token(TokenArgs),
    /// Create or list buckets (on every member)
    #[command(subcommand)]
    Bucket(BucketCommand),
    /// Prefetch a directory into a bucket, with a progress bar
    Warm(WarmArgs),
    /// Per-node, per-bucket objects, bytes, hits, misses and evictions
    Stats(StatsArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory for the objects (put it on the node's local NVMe).
    #[arg(long, default_value = "./berth-cache")]
    data_dir: PathBuf,
    /// Bytes of object data to keep, e.g. 500GiB; older objects are evicted past it.
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    capacity: u64,
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: SocketAddr,
    /// URL the other nodes and clients reach this node at (default: http://<listen address>).
    #[arg(long)]
    advertise: Option<String>,
    /// Every cache node's URL, this one included, comma-separated; `URL=WEIGHT` for weights.
    /// Default: the list last set through the API, or this node alone.
    #[arg(long, value_delimiter = ',')]
    members: Vec<String>,
    /// Key file shared by the nodes and the manager (default: <data-dir>/cache.key, created).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Server threads, each with its own event loop (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The cache nodes' key file.
    #[arg(long)]
    key_file: PathBuf,
    /// Projects whose private buckets the token may use, comma-separated.
    #[arg(long, value_delimiter = ',')]
    projects: Vec<String>,
    /// An admin token (create buckets, change members, use every bucket).
    #[arg(long)]
    admin: bool,
    /// How long the token is valid, e.g. 12h or 30d.
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// Who the token is for (shown in errors and logs).
    #[arg(long, default_value = "cli")]
    sub: String,
    /// Write the token to this file (0600, no newline: what PFIO_HTTP_BEARER_TOKEN_PATH reads).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Where a cache node is and the token to use.
#[derive(Debug, Args)]
pub struct Endpoint {
    /// A cache node's URL.
    #[arg(long, env = "BERTH_CACHE_URL", default_value = "http://127.0.0.1:7171")]
    url: String,
    /// Cache token.
    #[arg(long, env = "BERTH_CACHE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File holding the cache token.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum BucketCommand {
    /// Create a bucket, or change its settings, on every member
    Create(BucketCreateArgs),
    /// List buckets and their settings
    List(BucketListArgs),
}

#[derive(Debug, Args)]
struct BucketCreateArgs {
    name: String,
    /// Readable without a token (writes still need one).
    #[arg(long)]
    public: bool,
    /// Most bytes the bucket may use on each node, e.g. 100GiB.
    #[arg(long, value_parser = parse_size)]
    quota: Option<u64>,
    /// Projects whose tokens may use the bucket, comma-separated.
    #[arg(long, value_delimiter = ',')]
    projects: Vec<String>,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Debug, Args)]
struct BucketListArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct WarmArgs {
    /// Directory whose files to load (recursively).
    pub dir: PathBuf,
    #[arg(long)]
    pub bucket: String,
    /// Key prefix; a file's key is the prefix plus its path under DIR. Default: PFIO's name
    /// for local files, `file:/` + the file's absolute path, so `pfio.v2.from_url(DIR,
    /// http_cache=...)` hits what this loaded.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Parallel uploads.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// Upload files the cache already holds too.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub endpoint: Endpoint,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    output: OutputArgs,
}

fn parse_size(s: &str) -> Result<u64, String> {
    parse_mem(s).map_err(|e| e.to_string())
}

pub async fn run(a: CacheArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        CacheCommand::Serve(a) => serve(a).await.map(|()| ExitCode::SUCCESS),
        CacheCommand::Token(a) => token(a),
        CacheCommand::Bucket(BucketCommand::Create(a)) => bucket_create(a).await,
        CacheCommand::Bucket(BucketCommand::List(a)) => bucket_list(a).await,
        CacheCommand::Warm(a) => crate::commands::cache_warm::warm(a).await,
        CacheCommand::Stats(a) => stats(a).await,
    }
}

fn parse_member(s: &str) -> anyhow::Result<Member> {
    let (name, weight) = match s.rsplit_once('=') {
        Some((n, w)) => (
            n,
            w.parse::<u32>()
                .map_err(|_| UsageError::error(format!("member `{s}`: the weight after `=` must be a whole number")))?,
        ),
        None => (s, 1),
    };
    if !name.starts_with("http://") {
        return Err(UsageError::error(format!("member `{s}` is not a URL: use http://HOST:PORT")));
    }
    Ok(Member { name: name.trim_end_matches('/').to_string(), weight })
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let members = a.members.iter().map(|m| parse_member(m)).collect::<anyhow::Result<Vec<_>>>()?;
    let key_file = a.key_file.clone().unwrap_or_else(|| a.data_dir.join("cache.key"));
    let key =
        Key::load_or_create(&key_file).with_context(|| format!("cannot use the key file {}", key_file.display()))?;
    let (dir, cap) = (a.data_dir.clone(), a.capacity);
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, cap))
        .await?
        .with_context(|| format!("cannot open the cache in {}", a.data_dir.display()))?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let store = Arc::new(store);
    // the node's name is its URL, known once a port is chosen: hold the port (a bound,
    // not listening SO_REUSEPORT socket) until the workers listen on it
    let (hold, addr) = server::reserve(a.listen)
        .with_context(|| format!("cannot listen on {}: pick a free address with --listen", a.listen))?;
    let name = match a.advertise {
        Some(u) => u.trim_end_matches('/').to_string(),
        None if addr.ip().is_unspecified() => {
            bail!(
                "listening on {addr}, other nodes cannot reach that address: pass --advertise http://HOST:{}",
                addr.port()
            )
        }
        None => format!("http://{addr}"),
    };
    if !members.is_empty() && !members.iter().any(|m| m.name == name) {
        bail!("--members does not list this node ({name}): add it, or set --advertise to the URL it is listed under");
    }
    let used = store.used();
    let node = Arc::new(Node::new(store, key, name.clone(), members));
    let members = node.maglev().members().len();
    server::spawn_workers(addr, node, threads)
        .with_context(|| format!("cannot listen on {addr}: pick a free address with --listen"))?;
    drop(hold);
    println!(
        "berth cache node {name} serving {} ({} of {} used, {members} members, {threads} threads, key {})",
        a.data_dir.display(),
        format_bytes(used),
        format_bytes(a.capacity),
        key_file.display()
    );
    shutdown_signal().await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn token(a: TokenArgs) -> anyhow::Result<ExitCode> {
    let key = Key::load(&a.key_file)?;
    let ttl = parse_duration(&a.ttl).map_err(|e| UsageError::error(format!("--ttl: {e}")))?;
    let t = key.sign(&Claims { sub: a.sub, projects: a.projects, admin: a.admin, exp: unix_now() + ttl as i64 });
    match a.out {
        Some(p) => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::File::options()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&p)
                .with_context(|| format!("cannot write {}", p.display()))?;
            f.write_all(t.as_bytes())?;
        }
        None => println!("{t}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// An HTTP client for cache nodes.
pub(crate) struct CacheClient {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

impl CacheClient {
    pub fn new(e: &Endpoint) -> anyhow::Result<CacheClient> {
        let token = match (&e.token, &e.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(p)) => Some(
                std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?.trim().to_string(),
            ),
            (None, None) => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .context("cannot set up the HTTP client")?;
        Ok(CacheClient { http, base: e.url.trim_end_matches('/').to_string(), token })
    }

    pub fn req(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// GETs JSON from `base` + `path`, turning error answers into their message.
    pub async fn get_json(&self, base: &str, path: &str) -> anyhow::Result<Value> {
        let url = format!("{base}{path}");
        let r = self
            .req(reqwest::Method::GET, &url)
            .send()
            .await
            .with_context(|| format!("cannot reach the cache node {base}"))?;
        answer(r).await
    }

    /// The members' URLs, from the configured node.
    pub async fn members(&self) -> anyhow::Result<(Maglev, Value)> {
        let v = self.get_json(&self.base, "/v1/members").await?;
        let members: Vec<Member> = v["members"]
            .as_array()
            .ok_or_else(|| {
                anyhow!("{} answered /v1/members without a member list: is it a berth cache node?", self.base)
            })?
            .iter()
            .filter_map(|m| {
                Some(Member { name: m["name"].as_str()?.to_string(), weight: m["weight"].as_u64()? as u32 })
            })
            .collect();
        let m = Maglev::new(members);
        if v["table_size"].as_u64() != Some(m.table_size() as u64)
            || v["hash"] != format!("maglev-xxh3-v{}", berth_cache::maglev::HASH_VERSION)
        {
            bail!(
                "the cache node {} routes with {} over {} slots, this berth does not: use the same berth version",
                self.base,
                v["hash"],
                v["table_size"]
            );
        }
        Ok((m, v))
    }
}

/// The JSON of a 2xx answer, or the error message of another.
pub(crate) async fn answer(r: reqwest::Response) -> anyhow::Result<Value> {
    let status = r.status();
    let body = r.bytes().await.context("the cache node's answer was cut off")?;
    if status.is_success() {
        return serde_json::from_slice(&body).with_context(|| format!("the cache node answered {status} with no JSON"));
    }
    let msg = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    bail!("{msg} ({status})")
}

/// Characters a key may hold that must be escaped in a URL path (`/` and `:` stay).
pub(crate) const KEY_ESCAPE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

pub(crate) fn object_url(base: &str, bucket: &str, key: &[u8]) -> String {
    format!("{base}/v1/objects/{bucket}/{}", percent_encode(key, KEY_ESCAPE))
}

async fn bucket_create(a: BucketCreateArgs) -> anyhow::Result<ExitCode> {
    berth_cache::bucket::validate_bucket_name(&a.name).map_err(|e| UsageError::error(e.to_string()))?;
    let c = CacheClient::new(&a.endpoint)?;
    let (m, _) = c.members().await?;
    let body = serde_json::json!({ "public": a.public, "quota": a.quota, "projects": a.projects });
    let mut failed = 0;
    for member in m.members() {
        let url = format!("{}/v1/buckets/{}", member.name, a.name);
        let r = match c.req(reqwest::Method::PUT, &url).json(&body).send().await {
            Ok(r) => answer(r).await,
            Err(e) => Err(anyhow!("cannot reach it: {e}")),
        };
        if let Err(e) = r {
            eprintln!("error: {}: {e:#}", member.name);
            failed += 1;
        }
    }
    if failed > 0 {
        eprintln!(
            "bucket `{}` is set on {} of {} members: run the command again once they are up",
            a.name,
            m.members().len() - failed,
            m.members().len()
        );
        return Ok(ExitCode::FAILURE);
    }
    let quota = a.quota.map(format_bytes).unwrap_or_else(|| "none".into());
    println!(
        "bucket `{}` on {} members: {}, quota {quota} per node{}",
        a.name,
        m.members().len(),
        if a.public { "public" } else { "private" },
        if a.projects.is_empty() { String::new() } else { format!(", projects {}", a.projects.join(",")) }
    );
    Ok(ExitCode::SUCCESS)
}

async fn bucket_list(a: BucketListArgs) -> anyhow::Result<ExitCode> {
    let c = CacheClient::new(&a.endpoint)?;
    let v = c.get_json(&c.base, "/v1/buckets").await?;
    if a.output.json() {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = table(["BUCKET", "ACCESS", "QUOTA", "PROJECTS"]);
    for b in v.as_array().into_iter().flatten() {
        let projects: Vec<&str> = b["projects"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect();
        t.add_row(vec![
            b["name"].as_str().unwrap_or("").to_string(),
            if b["public"].as_bool() == Some(true) { "public" } else { "private" }.to_string(),
            b["quota"].as_u64().map(format_bytes).unwrap_or_else(|| "-".into()),
            if projects.is_empty() { "-".into() } else { projects.join(",") },
        ]);
    }
    print_table(t);
    Ok(ExitCode::SUCCESS)
}

async fn stats(a: StatsArgs) -> anyhow::Result<ExitCode> {
    let c = CacheClient::new(&a.endpoint)?;
    let (m, _) = c.members().await?;
    let answers = futures_util::stream::iter(m.members().iter().map(|mm| {
        let c = &c;
        async move { (mm.name.clone(), c.get_json(&mm.name, "/v1/stats").await) }
    }))
    .buffered(16)
    .collect::<Vec<_>>()
    .await;
    if a.output.json() {
        let v: Vec<Value> = answers
            .iter()
            .map(|(n, r)| match r {
                Ok(v) => v.clone(),
                Err(e) => serde_json::json!({"node": n, "error": format!("{e:#}")}),
            })
            .collect();
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t =
        table(["NODE", "BUCKET", "OBJECTS", "BYTES", "QUOTA", "HITS", "MISSES", "HIT%", "EVICTIONS", "EVICTED"]);
    for (node, r) in &answers {
        let v = match r {
            Ok(v) => v,
            Err(e) => {
                t.add_row(vec![node.clone(), format!("unreachable: {e:#}")]);
                continue;
            }
        };
        let buckets: Vec<BucketStats> = serde_json::from_value(v["buckets"].clone()).unwrap_or_default();
        for b in buckets {
            let lookups = b.hits + b.misses;
            t.add_row(vec![
                node.clone(),
                b.bucket,
                b.objects.to_string(),
                format_bytes(b.bytes),
                b.quota.map(format_bytes).unwrap_or_else(|| "-".into()),
                b.hits.to_string(),
                b.misses.to_string(),
                if lookups == 0 { "-".into() } else { format!("{:.1}", 100.0 * b.hits as f64 / lookups as f64) },
                b.evictions.to_string(),
                format_bytes(b.evicted_bytes),
            ]);
        }
    }
    print_table(t);
    Ok(ExitCode::SUCCESS)
}

/// `path` made absolute and normalised like Python's `os.path.normpath` (what PFIO names
/// local files by), without resolving symlinks.
pub(crate) fn normalised_absolute(path: &Path) -> anyhow::Result<PathBuf> {
    use std::path::Component;
    let abs = std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let mut out = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Ok(out)
}

const DEFAULT_CACHE_PORT: u16 = 7171;

/// The cache flags of `berth up`, which runs a cache node in-process by default.
#[derive(Debug, Args)]
pub struct UpCacheArgs {
    /// Do not run a dataset cache (jobs then get no BERTH_CACHE_URL).
    #[arg(long)]
    pub no_cache: bool,
    /// Capacity of the local dataset cache (in <data-dir>/cache).
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    pub cache_capacity: u64,
    /// Address the dataset cache listens on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:7171")]
    pub cache_listen: SocketAddr,
}

/// The cache flags of `berth manager`: which cache to tell jobs about, and the key to sign
/// their tokens with (the cache nodes' key file).
#[derive(Debug, Args)]
pub struct ManagerCacheArgs {
    /// A cache node's URL, handed to jobs as BERTH_CACHE_URL.
    #[arg(long, requires = "cache_key_file")]
    pub cache_url: Option<String>,
    /// The cache nodes' key file, to sign each job's BERTH_CACHE_TOKEN.
    #[arg(long, requires = "cache_url")]
    pub cache_key_file: Option<PathBuf>,
}

/// Job tokens signed with `key`.
fn cache_env(url: String, key: Key) -> berth_manager::cache_env::CacheEnv {
    let mint = move |sub: &str, projects: &[String], exp: i64| {
        key.sign(&Claims { sub: sub.to_string(), projects: projects.to_vec(), admin: false, exp })
    };
    berth_manager::cache_env::CacheEnv { url, mint: Arc::new(mint) }
}

impl ManagerCacheArgs {
    pub fn env(&self) -> anyhow::Result<Option<berth_manager::cache_env::CacheEnv>> {
        match (&self.cache_url, &self.cache_key_file) {
            (Some(u), Some(k)) => {
                let key = Key::load(k).with_context(|| format!("cannot use --cache-key-file {}", k.display()))?;
                Ok(Some(cache_env(u.trim_end_matches('/').to_string(), key)))
            }
            _ => Ok(None),
        }
    }
}

/// A cache node running inside `berth up`.
pub struct Embedded {
    pub url: String,
    pub key_file: PathBuf,
    pub env: berth_manager::cache_env::CacheEnv,
    pub task: tokio::task::JoinHandle<()>,
}

impl UpCacheArgs {
    /// Starts the local cache node in `<data_dir>/cache` unless `--no-cache`.
    pub async fn start(&self, data_dir: &Path) -> anyhow::Result<Option<Embedded>> {
        if self.no_cache {
            return Ok(None);
        }
        let dir = data_dir.join("cache");
        let key_file = dir.join("cache.key");
        let key = Key::load_or_create(&key_file)
            .with_context(|| format!("cannot use the key file {}", key_file.display()))?;
        let (d, cap) = (dir.clone(), self.cache_capacity);
        let store = tokio::task::spawn_blocking(move || Store::open(&d, cap))
            .await?
            .with_context(|| format!("cannot open the dataset cache in {}", dir.display()))?;
        // the default port taken (another berth up, a test run): any free port, printed at start
        let bound = match server::bind(self.cache_listen).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && self.cache_listen.port() == DEFAULT_CACHE_PORT => {
                tracing::warn!("port {DEFAULT_CACHE_PORT} is taken: the dataset cache listens on a free port instead");
                server::bind(SocketAddr::new(self.cache_listen.ip(), 0)).await
            }
            r => r,
        };
        let (listener, addr) = bound.with_context(|| {
            format!(
                "cannot listen on {} for the dataset cache: pick another --cache-listen, or --no-cache",
                self.cache_listen
            )
        })?;
        let url = format!("http://{addr}");
        let node = Arc::new(Node::new(Arc::new(store), key.clone(), url.clone(), vec![]));
        let task = tokio::spawn(async move {
            if let Err(e) = server::serve(listener, node).await {
                tracing::error!(error = %e, "the dataset cache stopped");
            }
        });
        Ok(Some(Embedded { env: cache_env(url.clone(), key), url, key_file, task }))
    }
}
