//! Dataset prefetch, a step of a kernel's setup (PREPARING): before the job runs, the files
//! of each of its datasets are copied from the bucket's origin into the node's dataset cache,
//! under the keys PFIO gives local files ([`berth_model::dataset::pfio_local_key`]), so the
//! job's reads through PFIO are hits from the first epoch on.
//!
//! - A file the cache already holds at the same size is not sent again (a `HEAD` first): a
//!   second job on the node, or a job requeued there, prefetches nothing.
//! - Progress goes out in bytes done of total, at most every [`PROGRESS_EVERY`].
//! - A dataset whose origin is missing on the node, or whose prefix matches no file, fails
//!   the kernel's setup with that message: a typo should not cost an epoch of misses. The
//!   cache failing (down, full, refusing) only costs hits: the job starts, the setup log says
//!   what was not cached, as a dead cache node never fails a job (docs/cache.md).

mod list;

use std::io::Write;
use std::time::{Duration, Instant};

use berth_model::dataset::{DatasetEnv, DatasetFetch, http_cache_url, object_url, pfio_local_key};
use berth_model::format_bytes;
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};

/// Files sent to the cache at once.
const PARALLEL: usize = 8;
/// Bytes read from an origin file at a time: a read is a hop to the blocking pool, so the
/// default 4 KiB of a reader stream made the copy CPU-bound (0.13 GB/s on a 1.2 GB/s disk).
const READ_CHUNK: usize = 1 << 20;
/// Longest gap between two progress reports while bytes move.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The HTTP client of prefetches, trusting what the agent trusts (`--ca-file`).
/// Why a dataset cannot be prefetched: what the job's owner must fix (its origin, its prefix).
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset `{dataset}`: listing failed: {source}")]
    Listing { dataset: String, source: tokio::task::JoinError },
    #[error("dataset `{dataset}`: {source}")]
    List { dataset: String, source: list::ListError },
    #[error(
        "dataset `{dataset}`: no file under {origin} matches the prefix `{prefix}`: check the name (S3-style: \
         `train/` is the directory train, `train` also matches train-extra/)"
    )]
    NoMatch { dataset: String, origin: String, prefix: String },
}

pub(crate) fn client(ca_file: Option<&std::path::Path>) -> anyhow::Result<reqwest::Client> {
    let tls = berth_tls::client::client_config(ca_file)?;
    Ok(reqwest::Client::builder().use_preconfigured_tls(tls).pool_max_idle_per_host(PARALLEL).build()?)
}

/// A kernel's prefetch: its datasets, and the cache and token it got from the manager.
pub(crate) struct Prefetch {
    pub http: reqwest::Client,
    pub datasets: Vec<DatasetFetch>,
    /// `BERTH_CACHE_URL` of the kernel; `None`: no cache is reachable, nothing is fetched.
    pub cache_url: Option<String>,
}

/// What happened to one file.
enum Outcome {
    Sent,
    Cached,
    Failed(String),
}

/// One file to fetch, with where it goes.
struct Item {
    token: std::sync::Arc<str>,
    dir: std::sync::Arc<cap_std::fs::Dir>,
    rel: String,
    size: u64,
    url: String,
}

impl Prefetch {
    /// The kernel's `BERTH_DATASETS` (a JSON list of [`DatasetEnv`]) and, for its first
    /// dataset, `BERTH_DATASET_PATH` and `BERTH_DATASET_HTTP_CACHE`: what a training script
    /// hands `pfio.v2.from_url(path, http_cache=...)`.
    pub fn env(&self) -> Vec<(String, String)> {
        let Some(cache) = &self.cache_url else { return Vec::new() };
        let list: Vec<DatasetEnv> = self
            .datasets
            .iter()
            .map(|f| DatasetEnv {
                dataset: f.dataset.to_string(),
                path: f.dataset.path_under(&f.origin),
                http_cache: http_cache_url(cache, &f.dataset.bucket),
            })
            .collect();
        let mut out = vec![("BERTH_DATASETS".to_string(), serde_json::to_string(&list).unwrap_or_default())];
        if let Some(first) = list.into_iter().next() {
            out.push(("BERTH_DATASET_PATH".into(), first.path));
            out.push(("BERTH_DATASET_HTTP_CACHE".into(), first.http_cache));
        }
        out
    }

    /// Runs the prefetch, writing what it does to `log` and reporting `(done, total)` bytes
    /// to `progress`. `Err` only for what the job's owner must fix (origin, prefix).
    pub async fn run(
        &self,
        log: &mut std::fs::File,
        progress: impl Fn(u64, u64, Option<String>),
    ) -> Result<(), DatasetError> {
        let started = Instant::now();
        let Some(cache) = &self.cache_url else {
            let _ =
                writeln!(log, "datasets: no dataset cache is reachable from this node; the job reads from the origin");
            return Ok(());
        };
        let mut items = Vec::new();
        for f in &self.datasets {
            let (origin, prefix) = (f.origin.clone(), f.dataset.prefix.clone());
            let listed = tokio::task::spawn_blocking(move || list::list(&origin, &prefix))
                .await
                .map_err(|source| DatasetError::Listing { dataset: f.dataset.to_string(), source })?;
            let (dir, files) =
                listed.map_err(|source| DatasetError::List { dataset: f.dataset.to_string(), source })?;
            if files.is_empty() {
                return Err(DatasetError::NoMatch {
                    dataset: f.dataset.to_string(),
                    origin: f.origin.clone(),
                    prefix: f.dataset.prefix.clone(),
                });
            }
            let bytes: u64 = files.iter().map(|x| x.size).sum();
            let _ = writeln!(
                log,
                "dataset {}: {} files, {} from {} into bucket `{}` at {cache}",
                f.dataset,
                files.len(),
                format_bytes(bytes),
                f.origin,
                f.dataset.bucket
            );
            let dir = std::sync::Arc::new(dir);
            let token: std::sync::Arc<str> = f.token.as_str().into();
            for x in files {
                let key = pfio_local_key(&list::absolute(&f.origin, &x.rel));
                let url = object_url(cache, &f.dataset.bucket, &key);
                items.push(Item { token: token.clone(), dir: dir.clone(), rel: x.rel, size: x.size, url });
            }
        }
        let total: u64 = items.iter().map(|i| i.size).sum();
        progress(0, total, None);
        let (mut done, mut sent, mut cached, mut failed) = (0u64, 0u64, 0u64, 0u64);
        let (mut sent_bytes, mut last) = (0u64, Instant::now());
        let mut results = futures_util::stream::iter(items)
            .map(|i| async move {
                let o = self.fetch_one(&i).await;
                (i, o)
            })
            .buffer_unordered(PARALLEL);
        while let Some((item, outcome)) = results.next().await {
            done += item.size;
            match outcome {
                Outcome::Sent => (sent, sent_bytes) = (sent + 1, sent_bytes + item.size),
                Outcome::Cached => cached += 1,
                Outcome::Failed(why) => {
                    failed += 1;
                    let _ = writeln!(log, "not cached: {}: {why}", item.rel);
                }
            }
            if last.elapsed() >= PROGRESS_EVERY || done == total {
                last = Instant::now();
                progress(done, total, Some(format!("{} files sent, {cached} cached", sent)));
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let rate = sent_bytes as f64 / secs.max(1e-3);
        let _ = writeln!(
            log,
            "prefetched {} in {secs:.2}s ({}/s): {sent} files sent, {cached} already cached, {failed} not cached",
            format_bytes(sent_bytes),
            format_bytes(rate as u64)
        );
        if failed > 0 {
            let _ = writeln!(log, "the job starts anyway: what is not cached is read from the origin");
        }
        Ok(())
    }

    /// Sends one file unless the cache holds it at its size.
    async fn fetch_one(&self, i: &Item) -> Outcome {
        let auth = |r: reqwest::RequestBuilder| r.bearer_auth(&*i.token);
        match auth(self.http.request(Method::HEAD, &i.url)).send().await {
            Ok(r) if r.status() == StatusCode::OK => {
                let len =
                    r.headers().get(reqwest::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                if len == Some(i.size) {
                    return Outcome::Cached;
                }
            }
            Ok(_) => {}
            Err(e) => return Outcome::Failed(format!("cannot reach the cache: {e}")),
        }
        let (dir, rel) = (i.dir.clone(), i.rel.clone());
        let file = match tokio::task::spawn_blocking(move || dir.open(&rel)).await {
            Ok(Ok(f)) => tokio::fs::File::from_std(f.into_std()),
            Ok(Err(e)) => return Outcome::Failed(format!("cannot read it: {e}")),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        // Streamed, never read whole (dataset files run to GiB); the cache needs the length.
        let put = auth(self.http.request(Method::PUT, &i.url))
            .header(reqwest::header::CONTENT_LENGTH, i.size)
            .body(reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, READ_CHUNK)))
            .send()
            .await;
        match put {
            Ok(r) if r.status() == StatusCode::CREATED || r.status() == StatusCode::OK => Outcome::Sent,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                Outcome::Failed(format!("the cache answered {status}: {}", body.trim()))
            }
            Err(e) => Outcome::Failed(format!("cannot send it to the cache: {e}")),
        }
    }
}
