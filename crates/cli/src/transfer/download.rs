//! `berth download NAME PATH [LOCAL]`: a file, or a directory tree, out of a folder.
//!
//! A file lands at `LOCAL` (a directory: `LOCAL/<its name>`; none: `./<its name>`); a
//! directory as `LOCAL/<its name>/...` (none: `./<its name>`; the folder itself, `/` or `""`:
//! into `LOCAL`). Each file is written to `NAME.berth-part`, checked against the folder's
//! sha256 and then renamed; an interrupted one continues from the part's end. Links in the
//! folder are skipped, and nothing is written through a link on this side.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use berth_model::folder::{EntryKind, FileEntry, FolderRef};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::{PARALLEL, Summary, progress};
use crate::client::Client;

/// Downloads `path` of folder `r` to `local`.
pub async fn run(c: &Client, r: &FolderRef, path: &str, local: Option<&Path>) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let path = path.trim_matches('/');
    let Some(list) = c.folder_list(r, path, true).await? else {
        bail!("folder {r} has no `{path}`: see `berth folder show {r}`");
    };
    let name = path.rsplit('/').next().unwrap_or("").to_string();
    let single = list.len() == 1 && list[0].kind == EntryKind::File && list[0].path == path;
    let links = list.iter().filter(|e| e.kind == EntryKind::Symlink).count();
    let others = list.iter().filter(|e| e.kind == EntryKind::Other).count();
    let (base, strip) = if single {
        let to = match local {
            Some(l) if l.is_dir() => l.join(&name),
            Some(l) => l.to_path_buf(),
            None => PathBuf::from(&name),
        };
        (to, path.to_string())
    } else {
        let root = local.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let to = if path.is_empty() || (local.is_some() && !root.exists()) { root } else { root.join(&name) };
        (to, path.to_string())
    };
    let files: Vec<(FileEntry, PathBuf)> = list
        .into_iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| {
            let rel = if single {
                String::new()
            } else {
                e.path.strip_prefix(&strip).unwrap_or(&e.path).trim_start_matches('/').to_string()
            };
            let to = if rel.is_empty() { base.clone() } else { base.join(&rel) };
            (e, to)
        })
        .collect();
    for (e, to) in &files {
        safe_target(&base, to).with_context(|| format!("cannot download {}", e.path))?;
    }
    let total: u64 = files.iter().map(|(e, _)| e.size).sum();
    let bar = progress::bar(total, &format!("downloading from {r}"));
    let results: Vec<anyhow::Result<Summary>> = futures_util::stream::iter(files.into_iter().map(|(e, to)| {
        let bar = bar.clone();
        async move { one(c, r, e, to, &bar).await }
    }))
    .buffer_unordered(PARALLEL)
    .collect()
    .await;
    bar.finish_and_clear();
    if links > 0 {
        eprintln!("skipped {links} symbolic link(s) in the folder: berth never follows links out of a folder");
    }
    if others > 0 {
        eprintln!("skipped {others} FIFO(s), socket(s) or device(s) in the folder: berth moves only regular files");
    }
    super::tally(results, "downloaded", started)
}

/// `to` lies under `base` and no directory on the way from `base` is a link (a link there
/// would send the file elsewhere on this machine).
fn safe_target(base: &Path, to: &Path) -> anyhow::Result<()> {
    let rel = to.strip_prefix(base).map_err(|_| anyhow!("{} is not under {}", to.display(), base.display()))?;
    if rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        bail!("the folder sent a path with `..`: {}", rel.display());
    }
    let mut at = base.to_path_buf();
    for c in rel.parent().into_iter().flat_map(|p| p.components()) {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!("{} is a symbolic link on this machine: download somewhere else", at.display());
        }
    }
    Ok(())
}

async fn one(
    c: &Client,
    r: &FolderRef,
    e: FileEntry,
    to: PathBuf,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Summary> {
    let want = e.sha256.clone().ok_or_else(|| anyhow!("the folder sent no checksum for {}", e.path))?;
    if std::fs::metadata(&to).is_ok_and(|m| m.is_file() && m.len() == e.size) {
        let p = to.clone();
        let have = tokio::task::spawn_blocking(move || super::hash_file(&p)).await??;
        if have == want {
            bar.inc(e.size);
            return Ok(Summary { skipped: 1, ..Default::default() });
        }
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent).await.with_context(|| format!("cannot make {}", parent.display()))?;
    }
    let mut part_name = to.file_name().unwrap_or_default().to_os_string();
    part_name.push(".berth-part");
    let part = to.with_file_name(part_name);
    let from = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let from = if from <= e.size { from } else { 0 };
    bar.inc(from);
    let resp = c.download_from(r, &e.path, from).await.with_context(|| e.path.clone())?;
    let resumed = from > 0 && resp.status() == reqwest::StatusCode::PARTIAL_CONTENT;
    let mut out = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(resumed)
        .truncate(!resumed)
        .open(&part)
        .await
        .with_context(|| format!("cannot write {}", part.display()))?;
    if !resumed {
        bar.dec(from);
    }
    let mut sent = 0;
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| format!("the download of {} was cut off: run it again to resume", e.path))?;
        out.write_all(&chunk).await?;
        sent += chunk.len() as u64;
        bar.inc(chunk.len() as u64);
    }
    out.flush().await?;
    drop(out);
    let p = part.clone();
    let got = tokio::task::spawn_blocking(move || super::hash_file(&p)).await??;
    if got != want {
        let _ = std::fs::remove_file(&part);
        bail!("{} arrived with sha256 {got}, not the folder's {want}: run the download again", e.path);
    }
    let f = std::fs::File::options().write(true).open(&part)?;
    if let Ok(secs) = u64::try_from(e.mtime) {
        let _ = f.set_times(
            std::fs::FileTimes::new().set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)),
        );
    }
    std::fs::rename(&part, &to).with_context(|| format!("cannot put {} in place", to.display()))?;
    Ok(Summary { files: 1, bytes_sent: sent, resumed: u64::from(resumed), ..Default::default() })
}
