//! `berth cache ...`: run a dataset cache node (`serve`), mint tokens (`token`), manage
//! buckets (`bucket create|list|delete`) and members (`members`, `member set|remove|add`: in
//! [`super::cache_admin`]), prefetch a dataset (`warm`) and show counters (`stats`).
//!
//! The client commands find a node through `--url`/`BERTH_CACHE_URL` and authenticate with
//! `--token`/`BERTH_CACHE_TOKEN` (or `--token-file`); they ask that node for `/v1/members` and
//! then talk to every member (stats) or to each key's owner (warm). Buckets are kept by the
//! manager, which pushes them to every cache node including later ones: `bucket create|list`
//! go through the manager's API (admin credentials) unless a cache token is given, which
//! talks to the cache nodes directly (a cache run without a manager).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use berth_cache::maglev::Member;
use berth_cache::server::{self, Node};
use berth_cache::token::{Claims, Key, unix_now};
use berth_cache::{BucketStats, Store};
use berth_model::{format_bytes, parse_duration};
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde_json::Value;

use super::cache_admin::{BucketCommand, MemberCommand, MembersArgs};
use super::cache_client::{CacheClient, Endpoint};
use super::cache_warm::WarmArgs;
use crate::UsageError;
use crate::args::parse_size;
use crate::output::{OutputArgs, print_json, print_table, table};
use crate::tls::{TlsArgs, node_tls};

#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

impl CacheArgs {
    /// `cache serve`'s `--log-format`: `serve` is a daemon (info logs, default SIGPIPE
    /// handling); the other cache commands are user commands (`None`).
    pub fn log_format(&self) -> Option<crate::service::LogFormat> {
        match &self.command {
            CacheCommand::Serve(a) => Some(a.log.log_format),
            _ => None,
        }
    }
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// Run a cache node: HTTP object cache on this machine's disk
    Serve(ServeArgs),
    /// Mint a signed cache token with the nodes' key file
    Token(TokenArgs),
    /// Create, list or delete buckets (on every member)
    #[command(subcommand)]
    Bucket(BucketCommand),
    /// The cache members the manager knows: node, URL, state, weight
    Members(MembersArgs),
    /// Weigh, remove or add back a cache member (admin)
    #[command(subcommand)]
    Member(MemberCommand),
    /// Prefetch a directory into a bucket, with a progress bar
    Warm(WarmArgs),
    /// Per-node, per-bucket objects, bytes, hits, misses and evictions
    Stats(StatsArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory for the objects (put it on the node's local NVMe) [default: /var/cache/berth
    /// for root, else $XDG_CACHE_HOME/berth/cache, i.e. ~/.cache/berth/cache]
    #[arg(long, env = "BERTH_CACHE_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Bytes of object data to keep, e.g. 500GiB; older objects are evicted past it.
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    capacity: u64,
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: SocketAddr,
    /// URL the other nodes and clients reach this node at (default: http://<listen address>,
    /// https:// with --tls-cert).
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
    /// Bytes of small objects (up to 256 KiB each) kept in memory in front of the disk, so
    /// that the most read ones cost no file access; 0 turns it off.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    memory: u64,
    #[command(flatten)]
    tls: TlsArgs,
    /// PEM certificate(s) to trust for https:// members besides the public CAs (the CA that
    /// signed their certificates).
    #[arg(long, env = "BERTH_CA_FILE", value_name = "CA.pem")]
    ca_file: Option<PathBuf>,
    #[command(flatten)]
    log: crate::service::LogArgs,
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

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    output: OutputArgs,
}

pub async fn run(a: CacheArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        CacheCommand::Serve(a) => serve(a).await.map(|()| ExitCode::SUCCESS),
        CacheCommand::Token(a) => token(a),
        CacheCommand::Bucket(c) => super::cache_admin::bucket(c).await,
        CacheCommand::Members(a) => super::cache_admin::members(a).await,
        CacheCommand::Member(c) => super::cache_admin::member(c).await,
        CacheCommand::Warm(a) => super::cache_warm::warm(a).await,
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
    if !name.starts_with("http://") && !name.starts_with("https://") {
        return Err(UsageError::error(format!("member `{s}` is not a URL: use http://HOST:PORT")));
    }
    Ok(Member { weight, ..Member::up(name.trim_end_matches('/')) })
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let members = a.members.iter().map(|m| parse_member(m)).collect::<anyhow::Result<Vec<_>>>()?;
    let data_dir = crate::datadir::resolve(a.data_dir.clone(), crate::datadir::Role::Cache)?;
    let key_file = a.key_file.clone().unwrap_or_else(|| data_dir.join("cache.key"));
    // the store first: it makes an older release's data dir (and the key in it) private
    let (dir, cap) = (data_dir.clone(), a.capacity);
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, cap))
        .await?
        .with_context(|| format!("cannot open the cache in {}", data_dir.display()))?;
    let key =
        Key::load_or_create(&key_file).with_context(|| format!("cannot use the key file {}", key_file.display()))?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    store.set_memory_limit(a.memory);
    let store = Arc::new(store);
    // the node's name is its URL, known once a port is chosen: hold the port (a bound,
    // not listening SO_REUSEPORT socket) until the workers listen on it
    let tls = node_tls(a.tls.files().as_ref(), a.ca_file.as_deref())?;
    let scheme = if tls.server.is_some() { "https" } else { "http" };
    let (hold, addr) = server::reserve(a.listen)
        .with_context(|| format!("cannot listen on {}: pick a free address with --listen", a.listen))?;
    let name = match a.advertise {
        Some(u) => u.trim_end_matches('/').to_string(),
        None if addr.ip().is_unspecified() => {
            bail!(
                "listening on {addr}, other nodes cannot reach that address: pass --advertise {scheme}://HOST:{}",
                addr.port()
            )
        }
        None => format!("{scheme}://{addr}"),
    };
    if !members.is_empty() && !members.iter().any(|m| m.name == name) {
        bail!("--members does not list this node ({name}): add it, or set --advertise to the URL it is listed under");
    }
    let used = store.used();
    let node = Arc::new(Node::new(store, key, name.clone(), members, tls));
    let members = node.maglev().members().len();
    server::spawn_workers(addr, node, threads)
        .with_context(|| format!("cannot listen on {addr}: pick a free address with --listen"))?;
    drop(hold);
    println!(
        "berth cache node {name} serving {} ({} of {} used, {members} members, {threads} threads, key {})",
        data_dir.display(),
        format_bytes(used),
        format_bytes(a.capacity),
        key_file.display()
    );
    let stop = crate::daemon::shutdown_signal();
    crate::service::ready(&format!("serving {name}"));
    stop.await;
    crate::service::stopping();
    Ok(())
}

fn token(a: TokenArgs) -> anyhow::Result<ExitCode> {
    let key = Key::load(&a.key_file)?;
    let ttl = parse_duration(&a.ttl).map_err(|e| UsageError::error(format!("--ttl: {e}")))?;
    let t = key.sign(&Claims { sub: a.sub, projects: a.projects, admin: a.admin, exp: unix_now() + ttl as i64 });
    match a.out {
        // A new 0600 file renamed over the old one: an existing file readable by others
        // (truncating keeps its mode) never holds the token.
        Some(p) => berth_cache::private::write_atomic(&p, t.as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?,
        None => println!("{t}"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn stats(a: StatsArgs) -> anyhow::Result<ExitCode> {
    let c = CacheClient::new(&a.endpoint).await?;
    let (m, _) = c.members().await?;
    // a removed member is out of the cache for good, whatever its process still holds
    let listed = m.members().iter().filter(|mm| mm.state != berth_cache::maglev::MemberState::Removed);
    let answers = futures_util::stream::iter(listed.map(|mm| {
        let c = &c;
        let state = if mm.is_up() { "unreachable" } else { "down" };
        async move { (mm.name.clone(), c.get_json(&mm.name, "/v1/stats").await.map_err(|e| e.context(state))) }
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
                t.add_row(vec![node.clone(), format!("{e:#}")]);
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
