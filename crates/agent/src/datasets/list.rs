//! The files of a dataset: every regular file under its bucket's origin whose path (relative
//! to the origin) starts with the dataset's prefix, S3's meaning of a prefix. The origin is
//! opened as a capability directory (`cap-std`): the agent runs as root, and a link a user
//! left in a shared origin must not lead it to copy `/etc/shadow` into a bucket. Links are
//! skipped, not followed, so a link inside the origin is not fetched twice either.

use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// Why a dataset's origin could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(
        "the origin {origin} does not exist on this node: mount the shared filesystem here, or fix the bucket's origin"
    )]
    NoOrigin { origin: String },
    #[error("cannot open the origin {origin}: {source}")]
    Origin { origin: String, source: std::io::Error },
    #[error("cannot open {origin}/{base}: {source}")]
    Open { origin: String, base: String, source: std::io::Error },
    #[error("cannot list {origin}/{base}: {source}")]
    List { origin: String, base: String, source: std::io::Error },
}

/// One file to fetch: its path under the origin and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OriginFile {
    pub rel: String,
    pub size: u64,
}

/// A dataset's files, sorted by path; `origin` must be a directory on this node.
pub(crate) fn list(origin: &str, prefix: &str) -> Result<(Dir, Vec<OriginFile>), ListError> {
    let cannot_open = |source: std::io::Error| ListError::Origin { origin: origin.to_string(), source };
    let root = Dir::open_ambient_dir(origin, ambient_authority()).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ListError::NoOrigin { origin: origin.to_string() },
        _ => cannot_open(e),
    })?;
    // Only the directory holding the prefix's last component can hold a match.
    let base = match prefix.rsplit_once('/') {
        Some((d, _)) => d,
        None => "",
    };
    let mut out = Vec::new();
    let start = if base.is_empty() {
        Some(root.try_clone().map_err(cannot_open)?)
    } else {
        match root.open_dir(base) {
            Ok(d) => Some(d),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ListError::Open { origin: origin.to_string(), base: base.to_string(), source }),
        }
    };
    if let Some(d) = start {
        walk(&d, base, prefix, &mut out).map_err(|source| ListError::List {
            origin: origin.to_string(),
            base: base.to_string(),
            source,
        })?;
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok((root, out))
}

/// Adds the files under `dir` (at `rel` under the origin) that match `prefix`.
fn walk(dir: &Dir, rel: &str, prefix: &str, out: &mut Vec<OriginFile>) -> std::io::Result<()> {
    for e in dir.entries()? {
        let e = e?;
        let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
        let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        let t = e.file_type()?;
        if t.is_dir() {
            // A directory can hold matches if it extends the prefix or the prefix extends it.
            let as_dir = format!("{path}/");
            if as_dir.starts_with(prefix) || prefix.starts_with(&as_dir) {
                walk(&e.open_dir()?, &path, prefix, out)?;
            }
        } else if t.is_file() && path.starts_with(prefix) {
            out.push(OriginFile { rel: path, size: e.metadata()?.len() });
        }
    }
    Ok(())
}

/// The absolute path of `rel` under `origin` (what PFIO in the job opens).
pub(crate) fn absolute(origin: &str, rel: &str) -> std::path::PathBuf {
    Path::new(origin).join(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[OriginFile]) -> Vec<&str> {
        v.iter().map(|f| f.rel.as_str()).collect()
    }

    #[test]
    fn a_prefix_selects_like_s3_and_links_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let o = d.path().join("origin");
        for f in ["train/a.bin", "train/sub/b.bin", "train-extra/c.bin", "val/d.bin", "top.txt"] {
            let p = o.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        std::fs::write(d.path().join("secret"), "no").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), o.join("train/link.bin")).unwrap();
        std::os::unix::fs::symlink(o.join("val"), o.join("train/val-link")).unwrap();
        let origin = o.to_str().unwrap();
        let (_, all) = list(origin, "").unwrap();
        assert_eq!(names(&all), ["top.txt", "train-extra/c.bin", "train/a.bin", "train/sub/b.bin", "val/d.bin"]);
        let (_, t) = list(origin, "train/").unwrap();
        assert_eq!(names(&t), ["train/a.bin", "train/sub/b.bin"]);
        let (_, t) = list(origin, "train").unwrap();
        assert_eq!(names(&t), ["train-extra/c.bin", "train/a.bin", "train/sub/b.bin"]);
        let (_, t) = list(origin, "train/s").unwrap();
        assert_eq!(names(&t), ["train/sub/b.bin"]);
        assert_eq!(t[0].size, "train/sub/b.bin".len() as u64);
        let (_, none) = list(origin, "nothing/").unwrap();
        assert!(none.is_empty());
        let e = list(d.path().join("missing").to_str().unwrap(), "").unwrap_err();
        assert!(
            matches!(e, ListError::NoOrigin { .. }) && e.to_string().contains("does not exist on this node"),
            "{e}"
        );
    }
}
