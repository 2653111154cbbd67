//! A job's code (`berth submit --code`): a fresh copy of its snapshot in the kernel's own work
//! dir, made from the manifest and the content-addressed files on the folder storage, owned
//! by the kernel's user. Links are made last, so no file is ever written through one, and a
//! path that would pass through a link is refused.

use std::path::{Component, Path, PathBuf};

use berth_model::code::{CodeCopy, CodeManifest};

/// Why a job's code could not be copied into its kernel's work dir.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodeError {
    #[error(
        "the job's code is not on node {node} ({manifest}: {source}): mount the manager's folder storage \
         (--folder-root) at the same path on every node"
    )]
    Missing { node: String, manifest: String, source: std::io::Error },
    #[error("the job's code manifest {manifest} is damaged: {source}")]
    Damaged { manifest: String, source: serde_json::Error },
    #[error("the job's code manifest is invalid: {0}")]
    Invalid(String),
    #[error("cannot chown {}: {source}", path.display())]
    Chown { path: PathBuf, source: std::io::Error },
    #[error("cannot copy `{path}` of the job's code from {}: {source}", from.display())]
    Copy { path: String, from: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Mode(std::io::Error),
    #[error("cannot make the link `{path}`: {source}")]
    Link { path: String, source: std::io::Error },
    #[error("`{}` in the job's code is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot make {}: {source}", path.display())]
    MakeDir { path: PathBuf, source: std::io::Error },
}

/// Copies snapshot `copy` into `dest` (an empty directory), chowning what it makes to
/// `owner` (uid, gid) when given; the error says what failed, for the launch failure.
pub(crate) fn materialize(
    copy: &CodeCopy,
    dest: &Path,
    owner: Option<(u32, u32)>,
    node: &str,
) -> Result<(), CodeError> {
    use std::os::unix::fs::PermissionsExt;
    let manifest = || copy.manifest.clone();
    let text = std::fs::read(&copy.manifest).map_err(|source| CodeError::Missing {
        node: node.to_string(),
        manifest: manifest(),
        source,
    })?;
    let m: CodeManifest =
        serde_json::from_slice(&text).map_err(|source| CodeError::Damaged { manifest: manifest(), source })?;
    m.validate().map_err(|e| CodeError::Invalid(e.to_string()))?;
    let chown = |p: &Path| match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(p, Some(uid), Some(gid))
            .map_err(|source| CodeError::Chown { path: p.to_path_buf(), source }),
        None => Ok(()),
    };
    let blobs = Path::new(&copy.blobs);
    for f in m.files.iter().filter(|f| f.link.is_none()) {
        let to = dest.join(&f.path);
        make_parents(dest, Path::new(&f.path), &chown)?;
        let from = blobs.join(&f.sha256[..2]).join(&f.sha256);
        std::fs::copy(&from, &to).map_err(|source| CodeError::Copy { path: f.path.clone(), from, source })?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).map_err(CodeError::Mode)?;
        chown(&to)?;
    }
    for f in m.files.iter() {
        let Some(target) = &f.link else { continue };
        make_parents(dest, Path::new(&f.path), &chown)?;
        let at = dest.join(&f.path);
        std::os::unix::fs::symlink(target, &at).map_err(|source| CodeError::Link { path: f.path.clone(), source })?;
        chown(&at)?;
    }
    Ok(())
}

/// Makes the directories above `rel` under `dest`, refusing any that exists as a link.
fn make_parents(dest: &Path, rel: &Path, chown: &impl Fn(&Path) -> Result<(), CodeError>) -> Result<(), CodeError> {
    let mut at = dest.to_path_buf();
    let parents: Vec<Component> = rel.parent().map(|p| p.components().collect()).unwrap_or_default();
    for c in parents {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(CodeError::NotADirectory(at)),
            Err(_) => {
                std::fs::create_dir(&at).map_err(|source| CodeError::MakeDir { path: at.clone(), source })?;
                chown(&at)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::code::CodeFile;
    use sha2::Digest;

    #[test]
    fn a_snapshot_is_copied_with_modes_and_links_last() {
        let d = tempfile::tempdir().unwrap();
        let blobs = d.path().join("blobs");
        let put = |data: &[u8]| {
            let sha = hex::encode(sha2::Sha256::digest(data));
            std::fs::create_dir_all(blobs.join(&sha[..2])).unwrap();
            std::fs::write(blobs.join(&sha[..2]).join(&sha), data).unwrap();
            sha
        };
        let (a, b) = (put(b"print(1)\n"), put(b"#!/bin/sh\necho hi\n"));
        let file = |path: &str, sha: &str, size, executable| CodeFile {
            path: path.into(),
            sha256: sha.into(),
            size,
            executable,
            link: None,
        };
        let link = CodeFile {
            path: "lib".into(),
            sha256: String::new(),
            size: 0,
            executable: false,
            link: Some("src".into()),
        };
        let m = CodeManifest { files: vec![link, file("run.sh", &b, 18, true), file("src/a.py", &a, 9, false)] };
        let manifest = d.path().join("m.json");
        std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
        let dest = d.path().join("work");
        std::fs::create_dir(&dest).unwrap();
        let copy = CodeCopy { manifest: manifest.display().to_string(), blobs: blobs.display().to_string() };
        materialize(&copy, &dest, None, "n1").unwrap();
        assert_eq!(std::fs::read(dest.join("src/a.py")).unwrap(), b"print(1)\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dest.join("run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::read_link(dest.join("lib")).unwrap(), Path::new("src"));
        let e = materialize(&CodeCopy { manifest: "/nonexistent/m.json".into(), blobs: copy.blobs }, &dest, None, "n1");
        let e = e.unwrap_err();
        assert!(matches!(e, CodeError::Missing { .. }) && e.to_string().contains("--folder-root"), "{e}");
    }
}
