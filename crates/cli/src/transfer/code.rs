//! `berth submit --code DIR`: a snapshot of DIR (what `git status` would see: `.gitignore`,
//! `.git/info/exclude` and `.berthignore` honoured, `.git` left out), its files sent to the
//! manager's code store by sha256 (only the ones it lacks), and the git commit it came from.

use std::path::Path;

use anyhow::{Context, bail};
use berth_model::code::{BlobList, CodeFile, CodeManifest, CodeSnapshot, GitState};
use futures_util::StreamExt;

use super::PARALLEL;
use crate::client::Client;

/// The files of `dir` as a manifest (hashed), sorted by path.
fn manifest(dir: &Path) -> anyhow::Result<CodeManifest> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = Vec::new();
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .add_custom_ignore_filename(".berthignore")
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for e in walk {
        let e = e.context("cannot read the code directory")?;
        if e.depth() == 0 {
            continue;
        }
        let Some(t) = e.file_type() else { continue };
        let rel = e.path().strip_prefix(dir).expect("under the root");
        let Some(path) = rel.to_str().map(str::to_string) else {
            bail!("{} is not UTF-8: rename it or list it in .berthignore", e.path().display());
        };
        if t.is_symlink() {
            let target = std::fs::read_link(e.path())?;
            let Some(target) = target.to_str().map(str::to_string) else {
                bail!("{} links to a non-UTF-8 path", e.path().display())
            };
            files.push(CodeFile { path, sha256: String::new(), size: 0, executable: false, link: Some(target) });
        } else if t.is_file() {
            let md = e.metadata()?;
            let sha = super::hash_file(e.path()).with_context(|| format!("cannot read {}", e.path().display()))?;
            let executable = md.permissions().mode() & 0o111 != 0;
            files.push(CodeFile { path, sha256: sha, size: md.len(), executable, link: None });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(CodeManifest { files })
}

/// The commit `dir` is at and whether it has changes, when it is in a git repository (and
/// git is installed).
fn git_state(dir: &Path) -> Option<GitState> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = git(&["status", "--porcelain", "--untracked-files=normal", "."]).is_some_and(|o| !o.stdout.is_empty());
    Some(GitState { commit, dirty })
}

/// Snapshots `dir`, sends what the store lacks and records the snapshot.
pub async fn upload(c: &Client, dir: &Path) -> anyhow::Result<CodeSnapshot> {
    if !dir.is_dir() {
        return Err(crate::UsageError::error(format!("--code {}: not a directory", dir.display())));
    }
    let d = dir.to_path_buf();
    let m = tokio::task::spawn_blocking(move || manifest(&d)).await??;
    let blobs: Vec<String> = {
        let mut b: Vec<String> = m.files.iter().filter(|f| f.link.is_none()).map(|f| f.sha256.clone()).collect();
        b.sort();
        b.dedup();
        b
    };
    let missing = c.code_missing(&BlobList { blobs }).await?.blobs;
    let send: Vec<&CodeFile> = {
        let mut seen = std::collections::HashSet::new();
        m.files.iter().filter(|f| f.link.is_none() && missing.contains(&f.sha256) && seen.insert(&f.sha256)).collect()
    };
    let sent_bytes: u64 = send.iter().map(|f| f.size).sum();
    let results: Vec<anyhow::Result<()>> = futures_util::stream::iter(send.iter().map(|f| async move {
        let data = tokio::fs::read(dir.join(&f.path)).await.with_context(|| format!("cannot read {}", f.path))?;
        c.code_blob(&f.sha256, data.into()).await.with_context(|| f.path.clone())
    }))
    .buffer_unordered(PARALLEL)
    .collect()
    .await;
    for r in results {
        r?;
    }
    let made = c.code_snapshot(&m).await?;
    let git = tokio::task::spawn_blocking({
        let d = dir.to_path_buf();
        move || git_state(&d)
    })
    .await?;
    let at = git
        .as_ref()
        .map(|g| format!("; git {}{}", &g.commit[..g.commit.len().min(12)], if g.dirty { " (dirty)" } else { "" }))
        .unwrap_or_default();
    eprintln!(
        "code: {} files ({}), sent {} ({}), the rest already there{at}",
        made.files,
        berth_model::format_bytes(made.bytes),
        send.len(),
        berth_model::format_bytes(sent_bytes)
    );
    Ok(CodeSnapshot { id: made.id, files: made.files, bytes: made.bytes, git })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_honours_gitignore_and_berthignore_and_keeps_links() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("src")).unwrap();
        std::fs::create_dir_all(p.join("data")).unwrap();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::write(p.join(".git/HEAD"), "x").unwrap();
        std::fs::write(p.join(".gitignore"), "data/\n*.ckpt\n").unwrap();
        std::fs::write(p.join(".berthignore"), "notes.txt\n").unwrap();
        std::fs::write(p.join("src/train.py"), "print(1)\n").unwrap();
        std::fs::write(p.join("data/big"), "x").unwrap();
        std::fs::write(p.join("model.ckpt"), "x").unwrap();
        std::fs::write(p.join("notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink("src/train.py", p.join("train.py")).unwrap();
        let m = manifest(p).unwrap();
        let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".berthignore", ".gitignore", "src/train.py", "train.py"]);
        assert_eq!(m.files[3].link.as_deref(), Some("src/train.py"));
        assert!(m.validate().is_ok());
    }
}
