//! The cache's files are the daemon's alone: every directory it makes is 0700 and every file
//! 0600, owned by the daemon's user, so a job running as another user on the node cannot read
//! a private bucket's objects (or the key, or the settings) from disk, whatever the HTTP API
//! would refuse it.
//!
//! Modes are given at creation ([`create_dir`], [`create_file`]), never set afterwards, so no
//! file is ever readable by others, not even for an instant. A data directory made by an older
//! release (0755 directories, 0644 files) is fixed at start ([`secure_data_dir`], and
//! [`secure_open_file`] for the object files the start reads anyway), so an upgraded node is
//! safe too.

use std::fs::{DirBuilder, File, Metadata};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every directory of the cache.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file of the cache.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` 0700 if it is missing, and its missing parents as usual (they are not the
/// cache's: a data dir `/nvme/berth/cache` must not make `/nvme/berth` private).
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        r => r,
    }
}

/// Creates a new file (it must not exist), 0600, for writing.
pub fn create_file(path: &Path) -> std::io::Result<File> {
    File::options().write(true).create_new(true).mode(FILE_MODE).open(path)
}

/// Replaces `path` with `body`: written to a new 0600 temp file beside it, fsynced and renamed
/// over it, so a crash leaves the old or the new file, never half of one. The temp name is
/// unique, so concurrent writers never share a temp file (the last rename wins); leftovers of
/// a crash end in `.tmp` and are removed by [`secure_data_dir`].
pub fn write_atomic(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
    let write = || -> std::io::Result<()> {
        let mut f = create_file(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The user the daemon's files belong to (with modes 0600/0700 their group grants nothing).
fn owner() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Makes an open file of the cache 0600 and the daemon user's, if it is not (an older release
/// made it 0644): through its descriptor, so a file renamed meanwhile is never confused with
/// another. `meta` is its metadata (the caller usually has it already).
pub fn secure_open_file(f: &File, meta: &Metadata) -> std::io::Result<()> {
    if meta.uid() != owner() {
        std::os::unix::fs::fchown(f, Some(owner()), None)?;
    }
    if meta.mode() & 0o7777 != FILE_MODE {
        f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// What a data dir holds at its top level besides `objects/` (whose entries the store fixes
/// while it reads them) and `tmp/` (emptied at start): the files the cache writes.
const KNOWN_FILES: &[&str] = &["buckets.json", "deleting.json", "members.json", "cache.key"];

/// Makes a data dir made by an older release the daemon's: `root`, `objects/`, `tmp/` and
/// the cache's own files 0700/0600 and owned by the daemon's user; leftover temp files of
/// [`write_atomic`] (and of the releases before it, `NAME.json.tmp`) go. Only what the cache
/// itself writes is touched, never followed through a link and never anything else found in
/// `root` (a data dir pointed at the wrong directory must not have its files taken over).
/// Returns how many entries had to change, for the log.
pub fn secure_data_dir(root: &Path) -> std::io::Result<u64> {
    // the data dir may be a link to where the space is: its target is the data dir
    let root = root.canonicalize()?;
    let mut changed = secure_entry(&root)?;
    for e in std::fs::read_dir(&root)? {
        let e = e?;
        let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
        let path = e.path();
        let leftover =
            name.ends_with(".tmp") && (name.starts_with('.') || KNOWN_FILES.iter().any(|k| name == format!("{k}.tmp")));
        if leftover && e.file_type()?.is_file() {
            std::fs::remove_file(&path)?;
        } else if KNOWN_FILES.contains(&name.as_str()) || name == "objects" || name == "tmp" {
            changed += secure_entry(&path)?;
        }
    }
    Ok(changed)
}

/// Makes one directory (0700) or plain file (0600) the daemon's, without looking inside; a
/// link or anything else is left alone. 1 if something changed.
pub fn secure_entry(path: &Path) -> std::io::Result<u64> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        secure_path(path, &meta, DIR_MODE)
    } else if meta.is_file() {
        secure_path(path, &meta, FILE_MODE)
    } else {
        Ok(0)
    }
}

/// Opens a file of the cache for reading without following a link in its place.
pub fn open_nofollow(path: &Path) -> std::io::Result<File> {
    File::options().read(true).custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits()).open(path)
}

/// Owner and mode of one directory or plain file by path (`lchown`: a link put in its place
/// meanwhile is not followed; `chmod` would follow one, but a directory only the daemon can
/// write holds no link it did not make). 1 if something changed.
fn secure_path(path: &Path, meta: &Metadata, mode: u32) -> std::io::Result<u64> {
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut changed = 0;
    if meta.uid() != owner() {
        std::os::unix::fs::lchown(path, Some(owner()), None).map_err(named)?;
        changed = 1;
    }
    if meta.mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(named)?;
        changed = 1;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn created_files_and_directories_are_private() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("a/b");
        create_dir(&sub).unwrap();
        create_dir(&sub).unwrap();
        std::fs::create_dir(d.path().join("reference")).unwrap();
        assert_eq!(mode(&d.path().join("a")), mode(&d.path().join("reference")), "a parent is not the cache's");
        assert_eq!(mode(&sub), DIR_MODE);
        drop(create_file(&sub.join("f")).unwrap());
        assert_eq!(mode(&sub.join("f")), FILE_MODE);
        write_atomic(&sub.join("g.json"), b"[]").unwrap();
        assert_eq!(mode(&sub.join("g.json")), FILE_MODE);
        assert_eq!(std::fs::read(sub.join("g.json")).unwrap(), b"[]");
        // no temp file left behind
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 2);
    }

    #[test]
    fn an_old_data_dir_is_made_private_at_start() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("cache");
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::create_dir_all(root.join("objects/ab")).unwrap();
        std::fs::create_dir_all(root.join("unknown")).unwrap();
        let files = ["buckets.json", "members.json", "cache.key", "objects/ab/o", "unknown/f", "other.txt"];
        let leftovers = [".buckets.json.0123.tmp", "members.json.tmp"];
        for p in files.iter().chain(&leftovers) {
            std::fs::write(root.join(p), "z").unwrap();
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        for p in ["", "tmp", "objects", "objects/ab", "unknown"] {
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let outside = d.path().join("outside");
        std::fs::write(&outside, "o").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("cache.key.link")).unwrap();
        assert_eq!(secure_data_dir(&root).unwrap(), 6);
        for p in ["", "tmp", "objects"] {
            assert_eq!(mode(&root.join(p)), DIR_MODE, "{p}");
        }
        for p in ["buckets.json", "members.json", "cache.key"] {
            assert_eq!(mode(&root.join(p)), FILE_MODE, "{p}");
        }
        for p in leftovers {
            assert!(!root.join(p).exists(), "a crash's temp file {p} is removed");
        }
        // the store fixes objects as it reads them; what is not the cache's is left alone
        for p in ["objects/ab/o", "unknown/f", "other.txt"] {
            assert_eq!(mode(&root.join(p)), 0o644, "{p}");
        }
        assert_eq!(mode(&root.join("unknown")), 0o755);
        assert_eq!(mode(&outside), 0o644, "a link is not followed");
        assert_eq!(secure_data_dir(&root).unwrap(), 0, "nothing left to change");
    }
}
