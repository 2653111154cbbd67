//! `berth cache warm DIR --bucket B`: loads every file under DIR into the cache before a job
//! reads it, sending each file straight to its owner (Maglev over `/v1/members`, the same
//! table the nodes build) with a few uploads in flight, and a progress bar in bytes. A bucket
//! placed per node (`placement: node`, read from the node's `/v1/buckets`) has no owners:
//! everything goes to the node `--url` names, which keeps its own copies.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth_model::api::BucketPlacement;
use berth_model::format_bytes;
use clap::Args;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Method, StatusCode};

use super::cache_client::{CacheClient, Endpoint, answer, object_url};
use crate::UsageError;

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

/// Every regular file under `dir` (symlinked directories are not followed: no loops).
fn files_under(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() || (t.is_symlink() && e.path().is_file()) {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `path` made absolute and normalised like Python's `os.path.normpath` (what PFIO names
/// local files by), without resolving symlinks.
fn normalised_absolute(path: &Path) -> anyhow::Result<PathBuf> {
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

enum Outcome {
    Stored(u64),
    Skipped(u64),
    Failed,
}

pub async fn warm(a: WarmArgs) -> anyhow::Result<ExitCode> {
    if !a.dir.is_dir() {
        return Err(UsageError::error(format!("{} is not a directory: give the dataset's directory", a.dir.display())));
    }
    let c = CacheClient::new(&a.endpoint).await?;
    let bucket = c.bucket(&a.bucket).await.with_context(|| format!("cannot read bucket `{}`'s settings", a.bucket))?;
    let Some(bucket) = bucket else {
        return Err(UsageError::error(format!(
            "the cache node {} has no bucket `{}`: create it with `berth cache bucket create {}`",
            c.base, a.bucket, a.bucket
        )));
    };
    let per_node = bucket.placement == BucketPlacement::Node;
    let (maglev, _) = c.members().await?;
    let root = normalised_absolute(&a.dir)?;
    let files = files_under(&root)?;
    let mut total = 0u64;
    let mut jobs = vec![];
    for f in files {
        let size = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
        total += size;
        let key: Vec<u8> = match &a.prefix {
            Some(p) => {
                let rel = f.strip_prefix(&root).expect("files are under the root");
                [p.as_bytes(), rel.as_os_str().as_bytes()].concat()
            }
            None => berth_model::dataset::pfio_local_key(&f),
        };
        let owner = match maglev.owner(&a.bucket, &key) {
            Some(m) if !per_node => m.name.clone(),
            _ => c.base.clone(),
        };
        jobs.push((f, size, object_url(&owner, &a.bucket, &key)));
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .expect("valid template"),
    );
    let (c, bar_ref, force) = (&c, &bar, a.force);
    let outcomes: Vec<Outcome> = futures_util::stream::iter(jobs)
        .map(|(path, size, url)| async move {
            let o = upload(c, &path, size, &url, force).await;
            if let Err(e) = &o {
                bar_ref.suspend(|| eprintln!("error: {}: {e:#}", path.display()));
            }
            bar_ref.inc(size);
            o.unwrap_or(Outcome::Failed)
        })
        .buffer_unordered(a.jobs.max(1))
        .collect()
        .await;
    bar.finish_and_clear();
    let (mut stored, mut stored_b, mut skipped, mut skipped_b, mut failed) = (0, 0, 0, 0, 0);
    for o in outcomes {
        match o {
            Outcome::Stored(b) => (stored, stored_b) = (stored + 1, stored_b + b),
            Outcome::Skipped(b) => (skipped, skipped_b) = (skipped + 1, skipped_b + b),
            Outcome::Failed => failed += 1,
        }
    }
    let whom = if per_node {
        format!("on {} (placement node: its own copies)", c.base)
    } else {
        format!("on {} nodes", maglev.members().iter().filter(|m| m.is_up()).count())
    };
    println!(
        "warmed bucket `{}` {whom}: {stored} files stored ({}), {skipped} already cached ({}), {failed} failed",
        a.bucket,
        format_bytes(stored_b),
        format_bytes(skipped_b)
    );
    Ok(if failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

async fn upload(c: &CacheClient, path: &Path, size: u64, url: &str, force: bool) -> anyhow::Result<Outcome> {
    if !force {
        let r = c.req(Method::HEAD, url).send().await.context("cannot reach the key's owner")?;
        // reqwest's content_length() is the body's (none for HEAD): read the header
        let len = r.headers().get(reqwest::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if r.status() == StatusCode::OK && len == Some(size) {
            return Ok(Outcome::Skipped(size));
        }
    }
    // Streamed from the file, never read whole into memory (datasets hold files of many GiB);
    // the length is declared, as the cache requires, from the size listed.
    let file = tokio::fs::File::open(path).await.with_context(|| format!("cannot read {}", path.display()))?;
    let r = c
        .req(Method::PUT, url)
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20)))
        .send()
        .await
        .with_context(|| format!("cannot send {} to the key's owner", path.display()))?;
    if r.status() == StatusCode::CREATED { Ok(Outcome::Stored(size)) } else { answer(r).await.map(|_| Outcome::Failed) }
}
