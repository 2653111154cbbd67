//! A job's code (`berth submit --code`): a fresh copy of its snapshot in the kernel's own work
//! dir, made from the manifest and the content-addressed files on the folder storage, owned
//! by the kernel's user. Links are made last, so no file is ever written through one, and a
//! path that would pass through a link is refused.

use std::path::{Component, Path};

use berth_model::code::{CodeCopy, CodeManifest};

/// Copies snapshot `copy` into `dest` (an empty directory), chowning what it makes to
/// `owner` (uid, gid) when given; the error says what failed, for the launch failure.
pub(crate) fn materialize(copy: &CodeCopy, dest: &Path, owner: Option<(u32, u32)>, node: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read(&copy.manifest).map_err(|e| {
        format!(
            "the job's code is not on node {node} ({}: {e}): mount the manager's folder storage (--folder-root) at \
             the same path on every node",
            copy.manifest
        )
    })?;
    let m: CodeManifest = serde_json::from_slice(&text)
        .map_err(|e| format!("the job's code manifest {} is damaged: {e}", copy.manifest))?;
    m.validate().map_err(|e| format!("the job's code manifest is invalid: {e}"))?;
    let chown = |p: &Path| match owner {
        Some((uid, gid)) => {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid)).map_err(|e| format!("cannot chown {}: {e}", p.display()))
        }
        None => Ok(()),
    };
    let blobs = Path::new(&copy.blobs);
    for f in m.files.iter().filter(|f| f.link.is_none()) {
        let to = dest.join(&f.path);
        make_parents(dest, Path::new(&f.path), &chown)?;
        let from = blobs.join(&f.sha256[..2]).join(&f.sha256);
        std::fs::copy(&from, &to)
            .map_err(|e| format!("cannot copy `{}` of the job's code from {}: {e}", f.path, from.display()))?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
        chown(&to)?;
    }
    for f in m.files.iter() {
        let Some(target) = &f.link else { continue };
        make_parents(dest, Path::new(&f.path), &chown)?;
        let at = dest.join(&f.path);
        std::os::unix::fs::symlink(target, &at).map_err(|e| format!("cannot make the link `{}`: {e}", f.path))?;
        chown(&at)?;
    }
    Ok(())
}

/// Makes the directories above `rel` under `dest`, refusing any that exists as a link.
fn make_parents(dest: &Path, rel: &Path, chown: &impl Fn(&Path) -> Result<(), String>) -> Result<(), String> {
    let mut at = dest.to_path_buf();
    let parents: Vec<Component> = rel.parent().map(|p| p.components().collect()).unwrap_or_default();
    for c in parents {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("`{}` in the job's code is not a directory", at.display())),
            Err(_) => {
                std::fs::create_dir(&at).map_err(|e| format!("cannot make {}: {e}", at.display()))?;
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
        assert!(e.unwrap_err().contains("--folder-root"));
    }
}
