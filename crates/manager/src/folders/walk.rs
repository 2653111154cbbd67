//! Walking a folder's tree without recursion, without long paths and with few open files, so
//! that a tree a job made thousands of levels deep can neither overflow a thread's stack (it
//! killed `berth up`) nor fail with "File name too long" (a path past `PATH_MAX`).
//!
//! The walk holds one directory open at a time and moves by file descriptor: down by name
//! (`openat(dir, name, O_NOFOLLOW)`), back up through `..`, checked against the device and
//! inode it left, so a tree a job moves around meanwhile is noticed, never walked out of.
//! What it remembers per level is the names of subdirectories still to visit, so its memory
//! grows with the tree's depth (a few bytes a level), never its stack or its descriptors.
//!
//! Removal flattens instead: every subdirectory is moved up to the top directory being deleted
//! (a rename, by descriptor), emptied there and removed, so its depth never matters either.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};

/// An entry the walk met.
pub(crate) struct Entry<'a> {
    /// The open directory that holds it (to open it, by `name`).
    pub dir: &'a Dir,
    pub name: &'a std::ffi::OsStr,
    /// Relative to where the walk started (empty unless the walk keeps paths).
    pub path: &'a Path,
    /// `lstat`: links are themselves, never what they point at.
    pub md: &'a Metadata,
}

/// How a walk may fail: the visitor's own error, or the tree changed under it.
pub(crate) enum WalkError<E> {
    Visit(E),
    Io(std::io::Error),
    /// A directory deeper than the walk's bound: its path (or as much as is kept).
    TooDeep(PathBuf),
    /// The way back up did not lead where the walk came from: a job moved directories.
    Moved(PathBuf),
}

impl<E> From<std::io::Error> for WalkError<E> {
    fn from(e: std::io::Error) -> Self {
        WalkError::Io(e)
    }
}

/// What the walk looks at.
pub(crate) struct Walk {
    /// Directories deeper than this (entries at top level are depth 1) fail the walk.
    pub max_depth: usize,
    /// Keep each entry's path (a listing needs it; measuring does not, and a path of a tree
    /// 100,000 levels deep is megabytes).
    pub paths: bool,
}

struct Level {
    /// Device and inode of this directory: the way back up must lead here.
    id: (u64, u64),
    /// Subdirectories not visited yet.
    pending: Vec<OsString>,
}

/// Opens subdirectory `name` of `dir`, never through a link.
pub(crate) fn open_dir_nofollow(dir: &Dir, name: &std::ffi::OsStr) -> std::io::Result<Dir> {
    let mut o = OpenOptions::new();
    o.read(true).custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW);
    Ok(Dir::from_std_file(dir.open_with(name, &o)?.into_std()))
}

fn id_of(d: &Dir) -> std::io::Result<(u64, u64)> {
    let md = d.dir_metadata()?;
    Ok((md.dev(), md.ino()))
}

impl Walk {
    /// Calls `visit` for every entry under `top` (not `top` itself), depth first.
    pub(crate) fn run<E>(&self, top: Dir, mut visit: impl FnMut(&Entry) -> Result<(), E>) -> Result<(), WalkError<E>> {
        let mut cur = top;
        let mut path = PathBuf::new();
        let first = self.read(&cur, &path, 1, &mut visit)?;
        let mut levels = vec![Level { id: id_of(&cur)?, pending: first }];
        loop {
            let depth = levels.len();
            let Some(level) = levels.last_mut() else { return Ok(()) };
            match level.pending.pop() {
                Some(name) => {
                    let child = match open_dir_nofollow(&cur, &name) {
                        Ok(d) => d,
                        // Removed, or replaced by a file or a link, since it was read: skip it.
                        Err(e) if gone(&e) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    if self.paths {
                        path.push(&name);
                    }
                    let id = id_of(&child)?;
                    cur = child;
                    let pending = self.read(&cur, &path, depth + 1, &mut visit)?;
                    levels.push(Level { id, pending });
                }
                None => {
                    levels.pop();
                    let Some(up) = levels.last() else { return Ok(()) };
                    let parent = cur.open_parent_dir(ambient_authority())?;
                    if id_of(&parent)? != up.id {
                        return Err(WalkError::Moved(path));
                    }
                    cur = parent;
                    path.pop();
                }
            }
        }
    }

    /// Visits the entries of `dir` (at `depth`) and returns its subdirectories.
    fn read<E>(
        &self,
        dir: &Dir,
        path: &Path,
        depth: usize,
        visit: &mut impl FnMut(&Entry) -> Result<(), E>,
    ) -> Result<Vec<OsString>, WalkError<E>> {
        let mut subdirs = Vec::new();
        for e in dir.entries()? {
            let e = e?;
            let name = e.file_name();
            let md = match e.metadata() {
                Ok(m) => m,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            if depth > self.max_depth {
                return Err(WalkError::TooDeep(path.to_path_buf()));
            }
            let at = if self.paths { path.join(&name) } else { PathBuf::new() };
            visit(&Entry { dir, name: &name, path: &at, md: &md }).map_err(WalkError::Visit)?;
            if md.is_dir() {
                subdirs.push(name);
            }
        }
        Ok(subdirs)
    }
}

/// An entry that went away (or changed kind) between reading its name and opening it.
fn gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(nix::libc::ENOENT | nix::libc::ENOTDIR | nix::libc::ELOOP))
}

/// Deletes directory `name` of `parent` and everything in it, however deep: subdirectories
/// are moved up into it (one rename each), emptied and removed, so at most two directories
/// are open at once and no path is ever longer than two names.
pub(crate) fn remove_tree(parent: &Dir, name: &str) -> std::io::Result<()> {
    let top = open_dir_nofollow(parent, name.as_ref())?;
    let mut n = 0u64;
    loop {
        let mut subdirs = Vec::new();
        for e in top.entries()? {
            let e = e?;
            match e.file_type()?.is_dir() {
                true => subdirs.push(e.file_name()),
                false => top.remove_file(e.file_name())?,
            }
        }
        if subdirs.is_empty() {
            break;
        }
        for s in subdirs {
            let d = open_dir_nofollow(&top, &s)?;
            for e in d.entries()? {
                let e = e?;
                if !e.file_type()?.is_dir() {
                    d.remove_file(e.file_name())?;
                    continue;
                }
                // A fresh name in `top`; a name taken by a non-empty directory is skipped (an
                // empty one is replaced, which deletes it as well).
                loop {
                    n += 1;
                    match d.rename(e.file_name(), &top, format!(".berth-flat-{n}")) {
                        Ok(()) => break,
                        Err(e)
                            if matches!(
                                e.raw_os_error(),
                                Some(nix::libc::ENOTEMPTY | nix::libc::EEXIST | nix::libc::ENOTDIR)
                            ) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            drop(d);
            top.remove_dir(&s)?;
        }
    }
    drop(top);
    parent.remove_dir(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &Path) -> Dir {
        Dir::open_ambient_dir(p, ambient_authority()).unwrap()
    }

    /// `levels` nested `d` directories under `top`, a file at the bottom, made by descriptor.
    fn nest(top: &Path, levels: usize) {
        let mut d = open(top);
        for _ in 0..levels {
            d.create_dir("d").unwrap();
            d = d.open_dir("d").unwrap();
        }
        d.write("f", b"deep").unwrap();
    }

    #[test]
    fn a_tree_far_deeper_than_path_max_is_walked_and_removed() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir(&top).unwrap();
        // 5,000 levels: a path of 10,000 bytes, and a recursive walk's stack.
        nest(&top, 5000);
        let (mut files, mut bytes, mut dirs) = (0, 0, 0);
        let w = Walk { max_depth: usize::MAX, paths: false };
        let done: Result<(), WalkError<()>> = w.run(open(&top), |e| {
            if e.md.is_file() {
                files += 1;
                bytes += e.md.len();
            } else if e.md.is_dir() {
                dirs += 1;
            }
            Ok(())
        });
        assert!(done.is_ok());
        assert_eq!((files, bytes, dirs), (1, 4, 5000));

        let bounded = Walk { max_depth: 256, paths: true };
        match bounded.run(open(&top), |_| Ok::<(), ()>(())) {
            Err(WalkError::TooDeep(p)) => assert_eq!(p.components().count(), 256),
            _ => panic!("a walk past its bound must fail"),
        }

        remove_tree(&open(t.path()), "top").unwrap();
        assert!(!top.exists());
    }

    #[test]
    fn a_walk_lists_paths_and_never_follows_links() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/c"), "c").unwrap();
        std::os::unix::fs::symlink("/usr", t.path().join("a/usr")).unwrap();
        let mut seen = Vec::new();
        let w = Walk { max_depth: 256, paths: true };
        let done: Result<(), WalkError<()>> = w.run(open(t.path()), |e| {
            seen.push((e.path.display().to_string(), e.md.is_symlink()));
            Ok(())
        });
        assert!(done.is_ok());
        seen.sort();
        let want = [("a", false), ("a/b", false), ("a/b/c", false), ("a/usr", true)];
        assert_eq!(seen, want.map(|(p, l)| (p.to_string(), l)));
    }
}
