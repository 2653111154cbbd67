//! The dataset cache inside the daemons: `berth up` runs a cache node in-process (and its
//! agent reports it to the manager), `berth manager` signs job tokens with the cache key and
//! pushes the member list and buckets to the cache nodes. The manager gets closures (mint a
//! token, push a list over HTTP), so it depends neither on the cache crate nor on reqwest.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use berth_cache::Store;
use berth_cache::server::{self, Node};
use berth_cache::token::{Claims, Key};
use berth_manager::cache_env::{CacheCallError, CacheEnv};
use berth_model::api::CachePrefixUsage;
use clap::Args;

use super::cache_client::{http_client, transport_error};
use crate::args::parse_size;
use crate::tls::node_tls;

const DEFAULT_CACHE_PORT: u16 = 7171;

/// How long a push of the member list to one cache node may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a cache node's usage answer (asked at submit of a job with datasets: a
/// slow node must not hold the submit up for long; it counts as holding nothing).
const USAGE_TIMEOUT: Duration = Duration::from_secs(2);

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

/// The cache flags of `berth manager`: the key to sign job tokens with (the cache nodes' key
/// file), and optionally a cache node for jobs on nodes without one of their own.
#[derive(Debug, Args)]
pub struct ManagerCacheArgs {
    /// A cache node's URL, handed to jobs as BERTH_CACHE_URL when their node reported no
    /// cache (`berth agent --cache-url`) and no other cache node is up.
    #[arg(long, requires = "cache_key_file")]
    pub cache_url: Option<String>,
    /// The cache nodes' key file: signs each job's BERTH_CACHE_TOKEN and the admin token the
    /// manager sends member lists and buckets to the cache nodes with.
    #[arg(long)]
    pub cache_key_file: Option<PathBuf>,
    /// PEM certificate(s) to trust for https:// cache nodes besides the public CAs (the
    /// manager pushes member lists and buckets to them).
    #[arg(long, env = "BERTH_CA_FILE", value_name = "CA.pem")]
    pub ca_file: Option<PathBuf>,
}

/// Job tokens and admin tokens signed with `key`, member lists pushed with `http`.
fn cache_env(url: Option<String>, key: Key, http: reqwest::Client) -> CacheEnv {
    let k = key.clone();
    let mint = move |sub: &str, projects: &[String], exp: i64| {
        k.sign(&Claims { sub: sub.to_string(), projects: projects.to_vec(), admin: false, exp })
    };
    let mint_admin =
        move |exp: i64| key.sign(&Claims { sub: "berth-manager".into(), projects: vec![], admin: true, exp });
    let http2 = http.clone();
    let push = move |base: String, token: String, body: Vec<u8>| {
        let req = http
            .put(format!("{base}/v1/members"))
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(PUSH_TIMEOUT)
            .body(body);
        Box::pin(async move {
            let r = req.send().await.map_err(|e| CacheCallError(format!("{:#}", transport_error(&base, e))))?;
            super::cache_client::answer(r).await.map(|_| ()).map_err(|e| CacheCallError(format!("{e:#}")))
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), CacheCallError>> + Send>>
    };
    let usage = move |base: String, token: String, bucket: String, prefix: Vec<u8>| {
        let req = http2
            .get(berth_model::api::prefix_usage_url(&base, &bucket, &prefix))
            .bearer_auth(token)
            .timeout(USAGE_TIMEOUT);
        Box::pin(async move {
            let r = req.send().await.map_err(|e| CacheCallError(format!("{:#}", transport_error(&base, e))))?;
            let v = super::cache_client::answer(r).await.map_err(|e| CacheCallError(format!("{e:#}")))?;
            serde_json::from_value::<CachePrefixUsage>(v)
                .map_err(|e| CacheCallError(format!("{base}: unreadable usage answer: {e}")))
        })
            as std::pin::Pin<Box<dyn std::future::Future<Output = Result<CachePrefixUsage, CacheCallError>> + Send>>
    };
    CacheEnv {
        url,
        mint: Arc::new(mint),
        mint_admin: Arc::new(mint_admin),
        push: Arc::new(push),
        usage: Arc::new(usage),
    }
}

impl ManagerCacheArgs {
    pub fn env(&self) -> anyhow::Result<Option<CacheEnv>> {
        let Some(k) = &self.cache_key_file else { return Ok(None) };
        let key = Key::load(k).with_context(|| format!("cannot use --cache-key-file {}", k.display()))?;
        let http = http_client(self.ca_file.as_deref())?;
        let url = self.cache_url.as_ref().map(|u| u.trim_end_matches('/').to_string());
        Ok(Some(cache_env(url, key, http)))
    }
}

/// A cache node running inside `berth up`.
pub struct Embedded {
    pub url: String,
    pub key_file: PathBuf,
    pub env: CacheEnv,
    pub task: tokio::task::JoinHandle<()>,
}

impl UpCacheArgs {
    /// Starts the local cache node in `<data_dir>/cache` unless `--no-cache`; with `tls` it
    /// serves HTTPS with the manager's certificate, and trusts `trusted` (that certificate)
    /// for its own pushes and forwards.
    pub async fn start(
        &self,
        data_dir: &Path,
        tls: Option<&berth_tls::server::TlsFiles>,
        trusted: Option<&Path>,
    ) -> anyhow::Result<Option<Embedded>> {
        if self.no_cache {
            return Ok(None);
        }
        let dir = data_dir.join("cache");
        let key_file = dir.join("cache.key");
        // the store first: it makes an older release's cache dir (and the key in it) private
        let (d, cap) = (dir.clone(), self.cache_capacity);
        let store = tokio::task::spawn_blocking(move || Store::open(&d, cap))
            .await?
            .with_context(|| format!("cannot open the dataset cache in {}", dir.display()))?;
        let key = Key::load_or_create(&key_file)
            .with_context(|| format!("cannot use the key file {}", key_file.display()))?;
        let node_tls = node_tls(tls, trusted)?;
        let scheme = if node_tls.server.is_some() { "https" } else { "http" };
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
        let url = format!("{scheme}://{addr}");
        let node = Arc::new(Node::new(Arc::new(store), key.clone(), url.clone(), vec![], node_tls));
        let task = tokio::spawn(async move {
            if let Err(e) = server::serve(listener, node).await {
                tracing::error!(error = %e, "the dataset cache stopped");
            }
        });
        let http = http_client(trusted)?;
        Ok(Some(Embedded { env: cache_env(Some(url.clone()), key, http), url, key_file, task }))
    }
}
