//! `berth upload NAME LOCAL [DEST]`: a file, or a directory tree, into a folder.
//!
//! `LOCAL` a file: it lands at `DEST/<its name>`. A directory: `DEST/<its name>/...`, or with a
//! trailing `/` its contents go straight into `DEST` (as rsync does). Links to files or
//! directories inside `LOCAL` are followed; a link that leads outside it stops the upload
//! before anything is sent, so nothing outside what the user named ever leaves the machine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use berth_model::folder::{EntryKind, FolderRef};
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use super::{PARALLEL, PIECE, Summary, join, progress};
use crate::client::Client;
use crate::client::Piece;

/// One local file to send.
#[derive(Debug, Clone)]
struct Local {
    path: PathBuf,
    /// Where it goes in the folder.
    dest: String,
    size: u64,
    mtime: i64,
}

/// The files under `local` and where each goes under `dest`.
fn plan(local: &Path, dest: &str, contents: bool) -> anyhow::Result<Vec<Local>> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(local).with_context(|| format!("cannot read {}", local.display()))?;
    let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if md.is_file() {
        return Ok(vec![Local { path: local.into(), dest: join(dest, &name), size: md.len(), mtime: md.mtime() }]);
    }
    let root = local.canonicalize().with_context(|| format!("cannot resolve {}", local.display()))?;
    let top = if contents { dest.to_string() } else { join(dest, &name) };
    let mut out = Vec::new();
    let mut stack = vec![(local.to_path_buf(), top)];
    while let Some((dir, at)) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type()?.is_symlink() {
                let target = p.canonicalize().with_context(|| format!("{} is a broken link", p.display()))?;
                if !target.starts_with(&root) {
                    bail!(
                        "{} is a link to {}, outside {}: berth uploads nothing outside the directory you name; \
                         remove the link or copy the file in",
                        p.display(),
                        target.display(),
                        local.display()
                    );
                }
            }
            let md = std::fs::metadata(&p)?;
            if md.is_dir() {
                stack.push((p, join(&at, &name)));
            } else if md.is_file() {
                out.push(Local { path: p, dest: join(&at, &name), size: md.len(), mtime: md.mtime() });
            }
        }
    }
    out.sort_by(|a, b| a.dest.cmp(&b.dest));
    Ok(out)
}

/// `DEST` as a folder path: relative, no `..` (a usage mistake otherwise).
pub fn clean_dest(dest: &str) -> anyhow::Result<String> {
    let d = dest.trim_matches('/');
    if d.split('/').any(|c| c == ".." || c == ".") || d.contains('\0') || d.contains("//") {
        return Err(crate::UsageError::error(format!(
            "invalid destination `{dest}` in the folder: use a relative path like data/train, without `..`"
        )));
    }
    Ok(d.to_string())
}

/// Uploads `local` to `dest` in folder `r`.
pub async fn run(c: &Client, r: &FolderRef, local: &Path, dest: &str) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let contents = local.as_os_str().to_string_lossy().ends_with('/');
    let files = tokio::task::spawn_blocking({
        let (local, dest) = (local.to_path_buf(), dest.to_string());
        move || plan(&local, &dest, contents)
    })
    .await??;
    if files.is_empty() {
        bail!("{} holds no files to upload", local.display());
    }
    // What the folder has under the paths we send: sizes first, checksums only if some match.
    let prefix = common_dir(&files);
    let mut remote: HashMap<String, (u64, Option<String>)> = HashMap::new();
    if let Some(list) = c.folder_list(r, &prefix, false).await? {
        let by_size: HashMap<&str, u64> = files.iter().map(|f| (f.dest.as_str(), f.size)).collect();
        let same_size = list.iter().any(|e| e.kind == EntryKind::File && by_size.get(e.path.as_str()) == Some(&e.size));
        let list = if same_size { c.folder_list(r, &prefix, true).await?.unwrap_or_default() } else { list };
        for e in list.into_iter().filter(|e| e.kind == EntryKind::File) {
            remote.insert(e.path, (e.size, e.sha256));
        }
    }
    let total: u64 = files.iter().map(|f| f.size).sum();
    let bar = progress::bar(total, &format!("uploading to {r}"));
    let results: Vec<anyhow::Result<Summary>> = futures_util::stream::iter(files.into_iter().map(|f| {
        let have = remote.get(&f.dest).cloned();
        let bar = bar.clone();
        async move { one(c, r, f, have, &bar).await }
    }))
    .buffer_unordered(PARALLEL)
    .collect()
    .await;
    bar.finish_and_clear();
    super::tally(results, "uploaded", started)
}

/// The deepest folder directory every file lies in (what to list).
fn common_dir(files: &[Local]) -> String {
    let mut parts: Option<Vec<&str>> = None;
    for f in files {
        let dir: Vec<&str> = f.dest.rsplit_once('/').map(|(d, _)| d.split('/').collect()).unwrap_or_default();
        parts = Some(match parts {
            None => dir,
            Some(p) => p.iter().zip(&dir).take_while(|(a, b)| a == b).map(|(a, _)| *a).collect(),
        });
    }
    parts.unwrap_or_default().join("/")
}

/// Sends one file, unless the folder has it already; resumes a big one the server has part of.
async fn one(
    c: &Client,
    r: &FolderRef,
    f: Local,
    remote: Option<(u64, Option<String>)>,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Summary> {
    let path = f.path.clone();
    let sha = tokio::task::spawn_blocking(move || super::hash_file(&path))
        .await?
        .with_context(|| format!("cannot read {}", f.path.display()))?;
    if let Some((size, Some(rsha))) = &remote
        && *size == f.size
        && rsha.eq_ignore_ascii_case(&sha)
    {
        bar.inc(f.size);
        return Ok(Summary { skipped: 1, ..Default::default() });
    }
    let mut from = 0;
    if f.size > PIECE {
        let have = c.upload_state(r, &f.dest).await?.have;
        if have > 0 && have < f.size {
            from = have;
        }
    }
    bar.inc(from);
    let mut file = tokio::fs::File::open(&f.path).await.with_context(|| format!("cannot open {}", f.path.display()))?;
    if from > 0 {
        use tokio::io::AsyncSeekExt;
        file.seek(std::io::SeekFrom::Start(from)).await?;
    }
    let mut offset = from;
    let mut sent = 0;
    loop {
        let n = (f.size - offset).min(PIECE);
        let mut buf = vec![0u8; n as usize];
        file.read_exact(&mut buf).await.with_context(|| format!("{} changed while it was sent", f.path.display()))?;
        let last = offset + n == f.size;
        let piece = Piece { offset, size: f.size, sha256: last.then(|| sha.clone()), mtime: last.then_some(f.mtime) };
        let state = c.upload_piece(r, &f.dest, piece, bytes::Bytes::from(buf)).await.with_context(|| f.dest.clone())?;
        offset += n;
        sent += n;
        bar.inc(n);
        if last {
            if !state.done {
                bail!("the server did not take {} whole", f.dest);
            }
            break;
        }
    }
    Ok(Summary { files: 1, bytes_sent: sent, resumed: u64::from(from > 0), ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_planned_under_its_name_or_its_contents_and_links_out_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let corpus = d.path().join("corpus");
        std::fs::create_dir_all(corpus.join("a")).unwrap();
        std::fs::write(corpus.join("a/x"), "x").unwrap();
        std::fs::write(corpus.join("y"), "yy").unwrap();
        std::os::unix::fs::symlink("y", corpus.join("inside")).unwrap();
        let p = plan(&corpus, "in", false).unwrap();
        let dests: Vec<&str> = p.iter().map(|f| f.dest.as_str()).collect();
        assert_eq!(dests, ["in/corpus/a/x", "in/corpus/inside", "in/corpus/y"]);
        let p = plan(&corpus, "", true).unwrap();
        assert_eq!(p.iter().map(|f| f.dest.as_str()).collect::<Vec<_>>(), ["a/x", "inside", "y"]);
        assert_eq!(common_dir(&p), "");
        std::fs::write(d.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), corpus.join("out")).unwrap();
        let e = plan(&corpus, "", true).unwrap_err().to_string();
        assert!(e.contains("outside") && e.contains("out"), "{e}");
        let one = plan(&corpus.join("y"), "dst", false).unwrap();
        assert_eq!((one[0].dest.as_str(), one[0].size), ("dst/y", 2));
    }
}
