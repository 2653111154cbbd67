//! Which interpreter an environment is built on, chosen by the agent, never by the build's
//! user (issue 40 item 2, issue 41 item 2).
//!
//! uv run as the kernel's user would pick whatever `python3.11` that user's HOME offers (a
//! uv-managed one in `~/.local/share/uv/python` is found first), and the environment's
//! `bin/python` links to it: a user could plant an interpreter every later user of a shared
//! environment runs. So the agent asks uv for the node's installed interpreters (its own PATH
//! and managed installs, as the agent), runs each to learn its real path and `sys.version`,
//! and passes the build an absolute path. Of the interpreters that fit the version asked for,
//! the first that every user can run is taken: its environment can be shared. Only when there
//! is none (a pyenv under `/root`), one the kernel's user can run makes an environment private
//! to that user; when the user can run none, the job fails saying so (not `Permission denied`,
//! exit 127, after "ready").

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_model::environment::Interpreter;
use serde::Deserialize;

use super::EnvError;
use super::error::UV_FIX;
use crate::runtime::RunUser;

/// How long what uv listed is trusted at most. Sooner, a change of the agent's PATH
/// directories (a Python installed there) or of an interpreter's file (an upgrade) makes it
/// list again; a Python installed elsewhere (a uv-managed one) is seen after this.
const MEMO_FOR: Duration = Duration::from_secs(600);

/// What a memo's validity is checked against: identity and change time of each directory on
/// the agent's PATH and of each file named.
type Stamp = Vec<(u64, i64, i64)>;

fn stamp<'a>(files: impl IntoIterator<Item = &'a Path>) -> Stamp {
    let one = |p: &Path| std::fs::metadata(p).map(|m| (m.ino(), m.ctime(), m.ctime_nsec())).unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut out: Stamp = std::env::split_paths(&path).map(|d| one(&d)).collect();
    out.extend(files.into_iter().map(one));
    out
}

/// The probe run with each interpreter (`-I`: no user site, no `PYTHON*` variables).
const PROBE: &str = "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix); \
                     print(sys.version.replace(chr(10), ' '))";

/// One installed interpreter that fits a version request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its real path and `sys.version`: what the key covers.
    pub interpreter: Interpreter,
    /// `sys.base_prefix`: its standard library lives there.
    pub prefix: PathBuf,
}

impl Found {
    /// Whether `user` may run it: execute the binary, reach and read its prefix.
    pub fn runnable_by(&self, who: &Who) -> bool {
        allowed(Path::new(&self.interpreter.path), who, 0o1) && allowed(&self.prefix, who, 0o5)
    }
}

/// The ids a permission check is made for.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Who {
    /// A user with no relation to any file: what every user may do.
    pub fn anyone() -> Who {
        Who { uid: u32::MAX - 1, gid: u32::MAX - 1, groups: Vec::new() }
    }

    pub fn of(user: &RunUser) -> Who {
        Who { uid: user.uid, gid: user.gid, groups: user.groups.clone() }
    }
}

/// Whether `who` may traverse every directory above `path` and has `bits` (of r=4, w=2, x=1)
/// on `path` itself. Root may do anything; a path that cannot be read is refused.
fn allowed(path: &Path, who: &Who, bits: u32) -> bool {
    first_closed(path, who, bits).is_none()
}

/// The first of the directories above `path` (from `/` down) that `who` may not traverse, or
/// `path` itself when they lack `bits` on it; `None` when they may.
pub(super) fn first_closed(path: &Path, who: &Who, bits: u32) -> Option<PathBuf> {
    if who.uid == 0 {
        return None;
    }
    let ok = |p: &Path, bits: u32| {
        let Ok(m) = std::fs::metadata(p) else { return false };
        let shift = if m.uid() == who.uid {
            6
        } else if m.gid() == who.gid || who.groups.contains(&m.gid()) {
            3
        } else {
            0
        };
        (m.mode() >> shift) & bits == bits
    };
    let dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    match dirs.into_iter().rev().find(|dir| !ok(dir, 0o1)) {
        Some(dir) => Some(dir.to_path_buf()),
        None => (!ok(path, bits)).then(|| path.to_path_buf()),
    }
}

#[derive(Deserialize)]
struct Listed {
    path: String,
}

/// When a request was listed, the stamp then, and what was found.
type Memo = (Instant, Stamp, Vec<Found>);

/// The node's interpreters per version request, as last listed.
#[derive(Default)]
pub(crate) struct Pythons {
    memo: Mutex<HashMap<String, Memo>>,
    uv_version: Mutex<Option<(Instant, Stamp, String)>>,
}

impl Pythons {
    /// The installed interpreters that fit `request` (`3.11`), in uv's order of preference,
    /// one per real path.
    pub async fn find(&self, uv: &Path, request: &str) -> Result<Vec<Found>, EnvError> {
        let files = |found: &[Found]| -> Stamp { stamp(found.iter().map(|f| Path::new(&f.interpreter.path))) };
        if let Some((at, was, found)) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get(request)
            && at.elapsed() < MEMO_FOR
            && *was == files(found)
        {
            return Ok(found.clone());
        }
        let out = agent_command(uv)
            .args(["python", "list", request, "--only-installed", "--output-format", "json"])
            .output()
            .await
            .map_err(|source| EnvError::FindPython { uv: uv.to_path_buf(), request: request.to_string(), source })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(EnvError::ListPythons(err.trim().to_string()));
        }
        let listed: Vec<Listed> = serde_json::from_slice(&out.stdout).map_err(EnvError::ListUnreadable)?;
        let mut found: Vec<Found> = Vec::new();
        for l in listed {
            if let Some(f) = probe(&l.path).await
                && !found.iter().any(|g| g.interpreter.path == f.interpreter.path)
            {
                found.push(f);
            }
        }
        self.memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request.to_string(), (Instant::now(), files(&found), found.clone()));
        Ok(found)
    }

    /// `uv --version`: another uv may resolve or install differently.
    pub async fn uv_version(&self, uv: &Path) -> Result<String, EnvError> {
        if let Some((at, was, v)) = &*self.uv_version.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < MEMO_FOR
            && *was == stamp([uv])
        {
            return Ok(v.clone());
        }
        let out = agent_command(uv).arg("--version").output().await.map_err(|e| EnvError::uv_failed(uv, e))?;
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || v.is_empty() {
            return Err(EnvError::NoUvVersion { uv: uv.to_path_buf() });
        }
        *self.uv_version.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), stamp([uv]), v.clone()));
        Ok(v)
    }
}

/// Whether `user` may run `uv`, as a build of theirs does (issue 41 item 2: a uv in root's
/// home failed every other user's build `Permission denied`), or why not and the fix.
pub(super) fn uv_runnable_by(uv: &Path, user: &RunUser) -> Result<(), EnvError> {
    match uv_closed_to(uv, &Who::of(user)).filter(|_| user.switch) {
        None => Ok(()),
        Some(what) => Err(EnvError::UvClosed { user: user.name.clone(), what }),
    }
}

/// What the agent says at its start when its uv is one only some users can run.
pub(super) fn uv_warning(uv: &Path) -> Option<String> {
    let what = uv_closed_to(uv, &Who::anyone())?;
    Some(format!("not every user can run uv ({what}): their jobs' environment builds will fail; {UV_FIX}"))
}

/// `` `uv` `` (and the file it links to) when `who` may not run it; `None` when they may, or
/// when `uv` was not found (the spawn says so). Both the path and its target are checked.
fn uv_closed_to(uv: &Path, who: &Who) -> Option<String> {
    if !uv.is_absolute() {
        return None;
    }
    let real = std::fs::canonicalize(uv).unwrap_or_else(|_| uv.to_path_buf());
    if allowed(uv, who, 0o1) && allowed(&real, who, 0o1) {
        return None;
    }
    let link = if real != uv { format!(" (a link to `{}`)", real.display()) } else { String::new() };
    Some(format!("`{}`{link}", uv.display()))
}

/// `uv`, or the `uv` the agent's PATH finds (an absolute path, so that what builds run, and
/// what an error names, is the uv the agent means); as given when there is none.
pub(super) fn resolve_uv(uv: &Path) -> std::path::PathBuf {
    if uv.components().count() != 1 {
        return uv.to_path_buf();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(uv))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
        .unwrap_or_else(|| uv.to_path_buf())
}

/// uv as the agent, with the agent's environment (its PATH and HOME are the admin's) but no
/// configuration files and no downloads.
fn agent_command(uv: &Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(uv);
    c.env("UV_NO_CONFIG", "1").env("UV_PYTHON_DOWNLOADS", "never").env("NO_COLOR", "1");
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

/// Runs `path` to learn what it really is; `None` if it does not run (a pyenv shim of a
/// version not installed, a broken link).
async fn probe(path: &str) -> Option<Found> {
    let run =
        tokio::process::Command::new(path).args(["-I", "-c", PROBE]).stdin(Stdio::null()).kill_on_drop(true).output();
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.ok()?.ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (real, prefix, version) = (lines.next()?, lines.next()?, lines.next()?);
    Some(Found {
        interpreter: Interpreter { path: real.to_string(), version: version.to_string() },
        prefix: PathBuf::from(prefix),
    })
}

/// The interpreter to build on for `user`, and whether everyone can run it (else the
/// environment is private to `user`), or why there is none.
pub(crate) fn choose<'a>(found: &'a [Found], user: &RunUser, request: &str) -> Result<(&'a Found, bool), EnvError> {
    if let Some(f) = found.iter().find(|f| f.runnable_by(&Who::anyone())) {
        return Ok((f, true));
    }
    if let Some(f) = found.iter().find(|f| f.runnable_by(&Who::of(user))) {
        return Ok((f, false));
    }
    if found.is_empty() {
        return Err(EnvError::NoPython { request: request.to_string() });
    }
    let paths: Vec<&str> = found.iter().map(|f| f.interpreter.path.as_str()).collect();
    Err(EnvError::NoPythonFor { request: request.to_string(), user: user.name.clone(), paths: paths.join(", ") })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn user(uid: u32) -> RunUser {
        RunUser { name: format!("u{uid}"), uid, gid: uid, home: String::new(), switch: true, groups: vec![] }
    }

    /// An interpreter at `<dir>/<name>/bin/python3` with its prefix, the dir's mode `mode`.
    fn fake(dir: &Path, name: &str, mode: u32) -> Found {
        let top = dir.join(name);
        std::fs::create_dir_all(top.join("bin")).unwrap();
        std::fs::write(top.join("bin/python3"), b"").unwrap();
        std::fs::set_permissions(top.join("bin/python3"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(mode)).unwrap();
        Found {
            interpreter: Interpreter { path: top.join("bin/python3").display().to_string(), version: "3.11.2".into() },
            prefix: top,
        }
    }

    #[test]
    fn an_interpreter_everyone_can_run_is_preferred_and_shared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = fake(dir.path(), "rootpyenv", 0o700);
        let open = fake(dir.path(), "usr", 0o755);
        let u = user(4242);
        // uv preferred the closed one; everyone can run the open one: that, shared
        let both = [closed.clone(), open.clone()];
        assert_eq!(choose(&both, &u, "3.11").unwrap(), (&open, true));
        // only the closed one, which its owner (root here) alone may run: the user cannot
        let e = choose(std::slice::from_ref(&closed), &u, "3.11").unwrap_err().to_string();
        assert!(e.contains("that user u4242 can run") && e.contains("rootpyenv"), "{e}");
        // ... but its owner can: private to them
        let owner = user(std::fs::metadata(&closed.prefix).unwrap().uid());
        if owner.uid != 0 {
            assert_eq!(choose(std::slice::from_ref(&closed), &owner, "3.11").unwrap(), (&closed, false));
        }
        // root runs anything, yet what only root can run is not shared
        assert_eq!(choose(std::slice::from_ref(&closed), &user(0), "3.11").unwrap(), (&closed, false));
        let e = choose(&[], &u, "3.12").unwrap_err().to_string();
        assert!(e.starts_with("no python 3.12 on this node"), "{e}");
    }

    /// Issue 41 item 2: a uv in root's home failed other users' builds `cannot run uv ('uv'):
    /// Permission denied`, naming neither which uv nor the fix.
    #[test]
    fn a_uv_the_builds_user_cannot_run_says_which_and_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = fake(dir.path(), "root-home", 0o700);
        let open = fake(dir.path(), "usr", 0o755);
        let (uv_closed, uv_open) = (Path::new(&closed.interpreter.path), Path::new(&open.interpreter.path));
        let link = dir.path().join("usr/bin/uv");
        std::os::unix::fs::symlink(uv_closed, &link).unwrap();
        let u = user(4242);
        let e = uv_runnable_by(uv_closed, &u).unwrap_err().to_string();
        assert!(e.starts_with(&format!("user u4242 cannot run uv (`{}`: ", uv_closed.display())), "{e}");
        assert!(e.contains("/usr/local/bin/uv") && e.contains("--uv PATH"), "{e}");
        // a link every user reaches, to a file they do not: the file is named too
        let e = uv_runnable_by(&link, &u).unwrap_err().to_string();
        assert!(e.contains(&format!("(a link to `{}`)", uv_closed.display())), "{e}");
        uv_runnable_by(uv_open, &u).unwrap();
        assert!(uv_warning(uv_closed).unwrap().starts_with("not every user can run uv"));
        assert_eq!(uv_warning(uv_open), None);
        // an agent that runs kernels as itself: its own uv is fine
        uv_runnable_by(uv_closed, &RunUser { switch: false, ..u }).unwrap();
        // found on PATH, or left to the spawn to report
        assert!(resolve_uv(Path::new("sh")).is_absolute());
        assert_eq!(resolve_uv(Path::new("berth-no-such-uv")), Path::new("berth-no-such-uv"));
        assert_eq!(resolve_uv(Path::new("./uv")), Path::new("./uv"));
    }

    #[test]
    fn a_changed_interpreter_file_makes_the_node_list_again() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("python3");
        std::fs::write(&f, b"a").unwrap();
        let before = stamp([f.as_path()]);
        assert_eq!(before, stamp([f.as_path()]));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&f, b"b").unwrap();
        assert_ne!(before, stamp([f.as_path()]));
    }

    #[test]
    fn permissions_are_checked_on_every_directory_above() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = fake(dir.path(), "grp", 0o750);
        let m = std::fs::metadata(&f.prefix).unwrap();
        let member = Who { uid: 4243, gid: 1, groups: vec![m.gid()] };
        let other = Who { uid: 4243, gid: 1, groups: vec![] };
        if m.gid() != 1 {
            assert!(f.runnable_by(&member));
            assert!(!f.runnable_by(&other));
        }
        assert!(!f.runnable_by(&Who::anyone()));
    }
}
