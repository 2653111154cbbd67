//! Files in folders: listing, reading and resumable uploads, all through `cap-std`, so that a
//! path (or a symlink a job left in a folder) can never reach outside the folder, whatever it
//! holds: `..`, absolute paths and links that lead out fail as errors.
//!
//! An upload arrives in pieces; each is appended to a partial file outside the folder
//! (`<root>/.uploads/<folder id>/<sha256 of the path>`, so jobs never see half a file), and the
//! last one carries the whole file's sha256: the partial is checked against it and only then
//! renamed into place. A client that was interrupted asks how much the server has and sends
//! the rest.
//!
//! Only regular files and directories are ever opened: a FIFO, socket or device a job made is
//! listed as `other` and refused by name (opening a FIFO blocks until a writer comes, which
//! held a thread for good per request), and every open is `O_NONBLOCK | O_NOFOLLOW`, checked
//! again on the open file. Trees are walked by [`super::walk`]: at most [`MAX_DEPTH`] levels
//! for a listing, whose paths must stay usable.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use berth_model::folder::{EntryKind, FileEntry};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, FileType, FileTypeExt, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};

use super::partials::UPLOADS;
use super::walk::{Walk, WalkError, remove_tree};

/// Directory levels a listing goes down (a download or an upload lists first); a deeper tree
/// is refused, saying where: its paths would be too long to name anyway.
pub const MAX_DEPTH: usize = 256;
/// The longest path in a folder a request may name, and so a listing may show.
pub const MAX_PATH: usize = 4096;

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
    /// A tree deeper than [`MAX_DEPTH`] or a path longer than [`MAX_PATH`] (422).
    #[error("{0}")]
    TooDeep(String),
    /// Directories moved while the manager walked them (409: try again).
    #[error("{0}")]
    Moved(String),
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
    if path.len() > MAX_PATH
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
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        for p in gone {
            // However deep a job made it (std's remove_dir_all recurses).
            let name = p.file_name().and_then(OsStr::to_str).unwrap_or_default();
            let removed = Dir::open_ambient_dir(&root, ambient_authority()).and_then(|r| remove_tree(&r, name));
            if let Err(e) = removed {
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
/// with `sha256`, each regular file's checksum. Links and other kinds (FIFOs, sockets,
/// devices) are listed, never opened.
pub fn list(dir: &Path, rel: &Path, sha256: bool) -> Result<Vec<FileEntry>, FileError> {
    let folder = open_dir(dir)?;
    let mut out = Vec::new();
    if let Some(p) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        check_no_links(&folder, p)?;
    }
    let md = match rel.as_os_str().is_empty() {
        true => None,
        false => Some(folder.symlink_metadata(rel).map_err(|e| not_found(rel, e))?),
    };
    if let Some(md) = md.as_ref().filter(|m| !m.is_dir()) {
        let (parent, name) = split(&folder, rel)?;
        out.push(entry(&parent, name, rel, md, sha256)?);
        return Ok(out);
    }
    let top = match md {
        None => folder,
        Some(_) => super::walk::open_dir_nofollow(&folder, rel.as_os_str()).map_err(|e| not_found(rel, e))?,
    };
    let w = Walk { max_depth: MAX_DEPTH.saturating_sub(rel.components().count()), paths: true };
    let walked = w.run(top, |e| {
        let path = rel.join(e.path);
        if path.as_os_str().len() > MAX_PATH {
            return Err(FileError::TooDeep(format!(
                "`{}` in the folder has a path longer than {MAX_PATH} bytes: berth lists and transfers \
                 paths up to {MAX_PATH} bytes; rename or remove it in a job",
                shorten(&path)
            )));
        }
        out.push(entry(e.dir, e.name, &path, e.md, sha256)?);
        Ok(())
    });
    match walked {
        Ok(()) => {}
        Err(WalkError::Visit(e)) => return Err(e),
        Err(WalkError::Io(e)) => return Err(e.into()),
        Err(WalkError::TooDeep(p)) => {
            return Err(FileError::TooDeep(format!(
                "`{}` in the folder goes deeper than {MAX_DEPTH} levels of directories: berth lists and \
                 transfers at most {MAX_DEPTH} levels; move or remove that tree in a job (rm -rf)",
                shorten(&rel.join(p))
            )));
        }
        Err(WalkError::Moved(p)) => {
            return Err(FileError::Moved(format!(
                "`{}` in the folder moved while the manager listed it: try again",
                shorten(&rel.join(p))
            )));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `path` for a message: its first few levels.
fn shorten(path: &Path) -> String {
    const SHOWN: usize = 8;
    let parts: Vec<String> = path.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    match parts.len() > SHOWN {
        true => format!("{}/... ({} levels)", parts[..SHOWN].join("/"), parts.len()),
        false => parts.join("/"),
    }
}

/// The directory holding `rel` (opened without following links) and `rel`'s last name.
fn split<'a>(folder: &Dir, rel: &'a Path) -> Result<(Dir, &'a OsStr), FileError> {
    let name = rel.file_name().ok_or_else(|| FileError::Bad(format!("invalid path `{}`", rel.display())))?;
    let parent = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        None => folder.try_clone()?,
        Some(p) => super::walk::open_dir_nofollow(folder, p.as_os_str()).map_err(|e| not_found(rel, e))?,
    };
    Ok((parent, name))
}

/// Refuses `rel` if it or a directory on the way to it is a symbolic link.
fn check_no_links(folder: &Dir, rel: &Path) -> Result<(), FileError> {
    let mut at = PathBuf::new();
    for c in rel.components() {
        at.push(c);
        let md = folder.symlink_metadata(&at).map_err(|e| not_found(&at, e))?;
        if md.is_symlink() {
            return Err(FileError::Bad(format!(
                "`{}` is a symbolic link: berth never follows links in folders; download what it points at",
                at.display()
            )));
        }
    }
    Ok(())
}

/// What `ft` is, for a message about an entry that is neither a file nor a directory.
fn kind_name(ft: FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Opens regular file `name` of `d` for reading, never blocking (a FIFO swapped in since it was
/// looked at opens at once and is refused) and never through a link.
fn open_regular(d: &Dir, name: &Path) -> Result<std::fs::File, FileError> {
    let mut o = OpenOptions::new();
    o.read(true).custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW);
    let f = d.open_with(name, &o).map_err(|e| not_found(name, e))?;
    let ft = f.metadata()?.file_type();
    if !ft.is_file() {
        return Err(FileError::Bad(format!(
            "`{}` is {}, not a regular file: berth reads only regular files in folders",
            name.display(),
            kind_name(ft)
        )));
    }
    Ok(f.into_std())
}

fn entry(d: &Dir, name: &OsStr, path: &Path, md: &cap_std::fs::Metadata, sha256: bool) -> Result<FileEntry, FileError> {
    use cap_std::fs::MetadataExt;
    let kind = if md.is_symlink() {
        EntryKind::Symlink
    } else if md.is_dir() {
        EntryKind::Dir
    } else if md.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    };
    let sha = match (sha256, kind) {
        (true, EntryKind::File) => Some(hash(&mut open_regular(d, Path::new(name))?)?),
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

/// Opens a regular file of the folder for reading: never through a link (a 400 naming it),
/// never anything but a regular file (a FIFO would block the open for good).
pub fn open_file(dir: &Path, rel: &Path) -> Result<std::fs::File, FileError> {
    if rel.as_os_str().is_empty() {
        return Err(FileError::Bad("name a file in the folder, not the folder itself".into()));
    }
    let folder = open_dir(dir)?;
    check_no_links(&folder, rel)?;
    let md = folder.symlink_metadata(rel).map_err(|e| not_found(rel, e))?;
    if md.is_dir() {
        return Err(FileError::Bad(format!(
            "`{}` is not a file: download a directory with berth download",
            rel.display()
        )));
    }
    if !md.is_file() {
        return Err(FileError::Bad(format!(
            "`{}` is {}, not a regular file: berth reads only regular files in folders",
            rel.display(),
            kind_name(md.file_type())
        )));
    }
    let (parent, name) = split(&folder, rel)?;
    open_regular(&parent, Path::new(name)).map_err(|e| match e {
        FileError::Bad(_) => FileError::Bad(format!("`{}` changed while it was opened: try again", rel.display())),
        e => e,
    })
}

/// The partial file of an upload of `rel` to folder `id`.
pub(crate) fn partial_name(rel: &Path) -> String {
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
    o.write(true).create(offset == 0);
    let mut f = match ups.open_with(partial_name(rel), &o) {
        Ok(f) => f.into_std(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FileError::Offset { offset, have: 0 }),
        Err(e) => return Err(e.into()),
    };
    let have = f.metadata()?.len();
    if offset == 0 {
        f.set_len(0)?;
    } else if offset != have {
        return Err(FileError::Offset { offset, have });
    }
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(offset))?;
    Ok(f)
}

/// Drops the partial file of `rel` (an upload refused past the quota, or at its target).
pub fn drop_partial(root: &Path, id: i64, rel: &Path) {
    let _ = std::fs::remove_file(root.join(UPLOADS).join(id.to_string()).join(partial_name(rel)));
}

/// Checks the partial file of `rel` against `want` (sha256, hex) and puts it in place in the
/// folder at `dir` (making its parent directories), with `mtime` if given; returns its size.
/// A mismatch deletes the partial. What stands at `rel` must be a regular file or a link
/// (replaced, never followed): a directory, FIFO, socket or device is refused.
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
    if let Ok(m) = folder.symlink_metadata(rel)
        && !m.is_file()
        && !m.is_symlink()
    {
        return Err(FileError::Bad(format!(
            "`{}` is {} in the folder: upload to another path",
            rel.display(),
            kind_name(m.file_type())
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

    #[test]
    fn fifos_are_listed_as_other_and_never_opened() {
        let (_t, root, dir) = folder();
        std::fs::write(dir.join("ok"), "ok").unwrap();
        nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        // Each of these blocked for good on the FIFO's open before.
        let l = list(&dir, Path::new(""), true).unwrap();
        assert_eq!(l[0].path, "fifo");
        assert!(l[0].kind == EntryKind::Other && l[0].sha256.is_none() && l[0].size == 0, "{l:?}");
        assert!(l[1].kind == EntryKind::File && l[1].sha256.is_some(), "{l:?}");
        let one = list(&dir, Path::new("fifo"), true).unwrap();
        assert!(one.len() == 1 && one[0].kind == EntryKind::Other, "{one:?}");
        match open_file(&dir, Path::new("fifo")) {
            Err(FileError::Bad(m)) => assert!(m.contains("`fifo` is a FIFO (named pipe), not a regular file"), "{m}"),
            other => panic!("{other:?}"),
        }
        match upload(&root, &dir, "fifo", b"x") {
            Err(FileError::Bad(m)) => assert!(m.contains("`fifo` is a FIFO"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_download_through_a_link_is_refused_naming_it() {
        let (_t, _root, dir) = folder();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), "f").unwrap();
        std::os::unix::fs::symlink("sub", dir.join("subl")).unwrap();
        std::os::unix::fs::symlink("sub/f", dir.join("fl")).unwrap();
        for (path, link) in [("fl", "fl"), ("subl/f", "subl")] {
            match open_file(&dir, Path::new(path)) {
                Err(FileError::Bad(m)) => assert!(m.contains(&format!("`{link}` is a symbolic link")), "{m}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        assert!(matches!(list(&dir, Path::new("subl/f"), false), Err(FileError::Bad(_))));
        assert_eq!(list(&dir, Path::new("fl"), true).unwrap()[0].kind, EntryKind::Symlink);
        assert!(open_file(&dir, Path::new("sub/f")).is_ok());
    }

    #[test]
    fn a_listing_past_the_depth_bound_says_where_and_the_limit() {
        let (_t, _root, dir) = folder();
        let mut d = open_dir(&dir).unwrap();
        for _ in 0..MAX_DEPTH + 10 {
            d.create_dir("d").unwrap();
            d = d.open_dir("d").unwrap();
        }
        for rel in ["", "d/d"] {
            match list(&dir, Path::new(rel), false) {
                Err(FileError::TooDeep(m)) => {
                    assert!(
                        m.contains("`d/d/d/d/d/d/d/d/... (256 levels)`") && m.contains("deeper than 256 levels"),
                        "{m}"
                    )
                }
                other => panic!("{rel}: {other:?}"),
            }
        }
        // A tree exactly as deep as the bound lists whole.
        let mut e = open_dir(&dir).unwrap();
        for _ in 0..MAX_DEPTH {
            e.create_dir("e").unwrap();
            e = e.open_dir("e").unwrap();
        }
        assert_eq!(list(&dir, Path::new("e"), false).unwrap().len(), MAX_DEPTH - 1);
    }
}
