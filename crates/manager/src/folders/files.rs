//! Files in folders: listing, reading and resumable uploads, all through `cap-std`, so that a
//! path (or a symlink a job left in a folder) can never reach outside the folder, whatever it
//! holds: `..`, absolute paths and links that lead out fail as errors.
//!
//! An upload arrives in pieces; each is appended to a partial file outside the folder
//! (`<root>/.uploads/<folder id>/<sha256 of the path>`, so jobs never see half a file), and the
//! last one carries the whole file's sha256: the partial is checked against it and only then
//! renamed into place. A client that was interrupted asks how much the server has and sends
//! the rest.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use berth_model::folder::{EntryKind, FileEntry};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use sha2::{Digest, Sha256};

/// Where partial uploads wait, under the root.
const UPLOADS: &str = ".uploads";

/// Directories in a folder: every member's jobs (each its own uid) may add to them.
const DIR_MODE: u32 = 0o777;
/// Uploaded files: every member's jobs may read and rewrite them.
const FILE_MODE: u32 = 0o666;

/// What can go wrong with a file in a folder; `Bad` is the client's fault (400).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Bad(String),
    #[error("{0}")]
    NotFound(String),
    /// The piece does not start where the server's partial file ends.
    #[error("this piece starts at byte {offset}, but the server has {have} bytes of the file: send from byte {have}")]
    Offset { offset: u64, have: u64 },
    #[error("the file's checksum does not match: the server got sha256 {got}, the client said {want}; send it again")]
    Checksum { got: String, want: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A path inside a folder as clients send it (`a/b/c.txt`): relative, `/`-separated, only
/// normal components; `""` is the folder itself.
pub fn clean(path: &str) -> Result<PathBuf, FileError> {
    let bad = || {
        FileError::Bad(format!(
            "invalid path `{path}` in a folder: use a relative path like dir/file.txt, without `..` or `.` components"
        ))
    };
    if path.len() > 4096
        || path.contains('\0')
        || path.starts_with('/')
        || path.split('/').any(|c| c == "." || c == "..")
    {
        return Err(bad());
    }
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// Makes the root (0700: host users may not browse folders) and its upload area.
pub fn make_root(root: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join(UPLOADS))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(root.join(UPLOADS), std::fs::Permissions::from_mode(0o700))
}

/// Gives a new folder's directory its mode (every member's jobs, each under its own uid,
/// read and write it; the private root keeps host users out).
pub fn open_folder_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Moves folder `id`'s directory and partial uploads aside at once, and deletes them in the
/// background (a big folder takes a while).
pub fn remove_folder_dir(root: &Path, id: i64) {
    let gone: Vec<PathBuf> = [root.join(id.to_string()), root.join(UPLOADS).join(id.to_string())]
        .into_iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let aside = root.join(format!(".removed-{id}-{i}-{}", rand::random::<u32>()));
            std::fs::rename(&p, &aside).ok().map(|_| aside)
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        for p in gone {
            if let Err(e) = std::fs::remove_dir_all(&p) {
                tracing::warn!("cannot delete the removed folder's files at {}: {e}", p.display());
            }
        }
    });
}

fn open_dir(dir: &Path) -> Result<Dir, FileError> {
    Dir::open_ambient_dir(dir, ambient_authority()).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            FileError::NotFound(format!("the folder's directory {} is missing on the manager's machine", dir.display()))
        }
        _ => FileError::Io(e),
    })
}

fn not_found(rel: &Path, e: std::io::Error) -> FileError {
    match e.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound(format!("no `{}` in the folder", rel.display())),
        _ => FileError::Io(e),
    }
}

/// The entries at and under `rel` in the folder at `dir` (a file: itself), sorted by path;
/// with `sha256`, each file's checksum. Links are listed, never followed.
pub fn list(dir: &Path, rel: &Path, sha256: bool) -> Result<Vec<FileEntry>, FileError> {
    let folder = open_dir(dir)?;
    let mut out = Vec::new();
    if rel.as_os_str().is_empty() {
        walk(&folder, Path::new(""), sha256, &mut out)?;
    } else {
        let md = folder.symlink_metadata(rel).map_err(|e| not_found(rel, e))?;
        if md.is_dir() {
            let sub = folder.open_dir(rel).map_err(|e| not_found(rel, e))?;
            walk(&sub, rel, sha256, &mut out)?;
        } else {
            out.push(entry(&folder, rel, rel, &md, sha256)?);
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn walk(d: &Dir, at: &Path, sha256: bool, out: &mut Vec<FileEntry>) -> Result<(), FileError> {
    for e in d.entries()? {
        let e = e?;
        let name = PathBuf::from(e.file_name());
        let path = at.join(&name);
        let md = e.metadata()?;
        out.push(entry(d, &name, &path, &md, sha256)?);
        if md.is_dir() {
            walk(&d.open_dir(&name)?, &path, sha256, out)?;
        }
    }
    Ok(())
}

fn entry(d: &Dir, name: &Path, path: &Path, md: &cap_std::fs::Metadata, sha256: bool) -> Result<FileEntry, FileError> {
    use cap_std::fs::MetadataExt;
    let kind = if md.is_symlink() {
        EntryKind::Symlink
    } else if md.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::File
    };
    let sha = match (sha256, kind) {
        (true, EntryKind::File) => Some(hash(&mut d.open(name)?.into_std())?),
        _ => None,
    };
    Ok(FileEntry {
        path: path.to_string_lossy().into_owned(),
        kind,
        size: if kind == EntryKind::File { md.len() } else { 0 },
        mtime: md.mtime(),
        sha256: sha,
    })
}

/// The sha256 of what `r` reads, hex.
pub fn hash(r: &mut impl Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Opens a regular file of the folder for reading.
pub fn open_file(dir: &Path, rel: &Path) -> Result<std::fs::File, FileError> {
    if rel.as_os_str().is_empty() {
        return Err(FileError::Bad("name a file in the folder, not the folder itself".into()));
    }
    let f = open_dir(dir)?.open(rel).map_err(|e| not_found(rel, e))?.into_std();
    if !f.metadata()?.is_file() {
        return Err(FileError::Bad(format!(
            "`{}` is not a file: download a directory with berth download",
            rel.display()
        )));
    }
    Ok(f)
}

/// The partial file of an upload of `rel` to folder `id`.
fn partial_name(rel: &Path) -> String {
    hex::encode(Sha256::digest(rel.as_os_str().as_encoded_bytes()))
}

fn uploads_dir(root: &Path, id: i64) -> Result<Dir, FileError> {
    let d = root.join(UPLOADS).join(id.to_string());
    std::fs::create_dir_all(&d)?;
    open_dir(&d)
}

/// How many bytes of an upload of `rel` the server has (0: none).
pub fn partial_len(root: &Path, id: i64, rel: &Path) -> Result<u64, FileError> {
    match uploads_dir(root, id)?.metadata(partial_name(rel)) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Opens the partial file of `rel` for a piece starting at `offset`: at 0 it starts over,
/// anywhere else it must be where the partial ends.
pub fn open_partial(root: &Path, id: i64, rel: &Path, offset: u64) -> Result<std::fs::File, FileError> {
    let ups = uploads_dir(root, id)?;
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    let mut f = ups.open_with(partial_name(rel), &o)?.into_std();
    let have = f.metadata()?.len();
    if offset == 0 {
        f.set_len(0)?;
    } else if offset != have {
        return Err(FileError::Offset { offset, have });
    }
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(offset))?;
    Ok(f)
}

/// Checks the partial file of `rel` against `want` (sha256, hex) and puts it in place in the
/// folder at `dir` (making its parent directories), with `mtime` if given; returns its size.
/// A mismatch deletes the partial.
pub fn commit(root: &Path, id: i64, dir: &Path, rel: &Path, want: &str, mtime: Option<i64>) -> Result<u64, FileError> {
    if rel.as_os_str().is_empty() {
        return Err(FileError::Bad("an upload needs a file name in the folder".into()));
    }
    let ups = uploads_dir(root, id)?;
    let name = partial_name(rel);
    let mut f = ups.open(&name).map_err(|_| FileError::Bad("nothing of this file was uploaded yet".into()))?.into_std();
    let got = hash(&mut f)?;
    if !got.eq_ignore_ascii_case(want) {
        let _ = ups.remove_file(&name);
        return Err(FileError::Checksum { got, want: want.to_string() });
    }
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    if let Some(t) = mtime.and_then(|t| u64::try_from(t).ok()) {
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
        f.set_times(std::fs::FileTimes::new().set_modified(when))?;
    }
    let size = f.metadata()?.len();
    let folder = open_dir(dir)?;
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        make_dirs(&folder, parent)?;
    }
    if folder.symlink_metadata(rel).is_ok_and(|m| m.is_dir()) {
        return Err(FileError::Bad(format!(
            "`{}` is a directory in the folder: upload to another path",
            rel.display()
        )));
    }
    ups.rename(&name, &folder, rel)?;
    Ok(size)
}

/// `mkdir -p` inside the folder, each new directory [`DIR_MODE`].
fn make_dirs(folder: &Dir, rel: &Path) -> Result<(), FileError> {
    let mut at = PathBuf::new();
    for c in rel.components() {
        at.push(c);
        match folder.create_dir(&at) {
            Ok(()) => folder
                .set_permissions(&at, cap_std::fs::Permissions::from_std(std::fs::Permissions::from_mode(DIR_MODE)))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !folder.symlink_metadata(&at)?.is_dir() {
                    return Err(FileError::Bad(format!("`{}` in the folder is not a directory", at.display())));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn upload(root: &Path, dir: &Path, rel: &str, data: &[u8]) -> Result<u64, FileError> {
        let rel = clean(rel)?;
        open_partial(root, 1, &rel, 0)?.write_all(data)?;
        // Twice from the same task (as concurrent requests do): a directory made meanwhile.
        make_dirs(&open_dir(dir)?, Path::new("a/b"))?;
        commit(root, 1, dir, &rel, &hex::encode(Sha256::digest(data)), Some(1_700_000_000))
    }

    fn folder() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("folders");
        make_root(&root).unwrap();
        let dir = root.join("1");
        std::fs::create_dir(&dir).unwrap();
        open_folder_dir(&dir).unwrap();
        (t, root, dir)
    }

    #[test]
    fn paths_must_stay_inside() {
        assert_eq!(clean("a/b.txt").unwrap(), PathBuf::from("a/b.txt"));
        assert_eq!(clean("").unwrap(), PathBuf::new());
        for bad in ["../x", "a/../../x", "/etc/passwd", "./a", "a/./b", "a\0b"] {
            assert!(matches!(clean(bad), Err(FileError::Bad(_))), "{bad}");
        }
    }

    #[test]
    fn an_upload_lands_whole_with_its_checksum_and_a_resume_continues_it() {
        let (_t, root, dir) = folder();
        assert_eq!(upload(&root, &dir, "a/b/c.bin", b"hello").unwrap(), 5);
        assert_eq!(std::fs::read(dir.join("a/b/c.bin")).unwrap(), b"hello");
        let rel = clean("big").unwrap();
        open_partial(&root, 1, &rel, 0).unwrap().write_all(b"0123").unwrap();
        assert_eq!(partial_len(&root, 1, &rel).unwrap(), 4);
        assert!(matches!(open_partial(&root, 1, &rel, 2), Err(FileError::Offset { offset: 2, have: 4 })));
        open_partial(&root, 1, &rel, 4).unwrap().write_all(b"4567").unwrap();
        assert_eq!(partial_len(&root, 1, &rel).unwrap(), 8, "a piece is appended, not written over the start");
        let bad = commit(&root, 1, &dir, &rel, &"0".repeat(64), None);
        assert!(matches!(bad, Err(FileError::Checksum { .. })), "{bad:?}");
        assert_eq!(partial_len(&root, 1, &rel).unwrap(), 0, "a bad file is dropped");
        let list = list(&dir, Path::new(""), true).unwrap();
        let paths: Vec<&str> = list.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "a/b", "a/b/c.bin"]);
        assert_eq!(list[2].sha256.as_deref(), Some(hex::encode(Sha256::digest(b"hello")).as_str()));
        assert_eq!(list[2].mtime, 1_700_000_000);
    }

    #[test]
    fn links_out_of_the_folder_are_never_followed() {
        let (t, root, dir) = folder();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("secret")).unwrap();
        assert!(upload(&root, &dir, "out/x", b"x").is_err(), "a write through a link out of the folder");
        assert!(!outside.join("x").exists());
        assert!(open_file(&dir, Path::new("secret")).is_err(), "a read through a link out of the folder");
        assert!(open_file(&dir, Path::new("out/secret")).is_err());
        let l = list(&dir, Path::new(""), true).unwrap();
        let links: Vec<&FileEntry> = l.iter().filter(|e| e.kind != EntryKind::Dir).collect();
        assert!(links.len() == 2 && links.iter().all(|e| e.kind == EntryKind::Symlink && e.sha256.is_none()), "{l:?}");
    }
}
