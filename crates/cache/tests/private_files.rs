//! Only the cache daemon can read its files (issue 13, item 4): a job running as another user
//! on the node, refused a private bucket over HTTP, must not read the object from disk either.
//! Every directory of the data dir is 0700 and every file 0600, owned by the daemon's user,
//! also in a data dir an older release left readable by everyone. Needs root (to act as
//! `nobody`); skipped otherwise.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use support::{Srv, walk};

const NOBODY: u32 = 65534;
const SECRET: &str = "the-private-bytes-of-visp";

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIPPED: needs root to read files as another user");
    false
}

/// Runs `cmd` as `nobody` (user, group, no supplementary groups, like a job of another
/// user): whether it succeeded, and its output.
fn as_nobody(cmd: &str, args: &[&Path]) -> (bool, String) {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    let mut c = Command::new(cmd);
    c.args(args);
    // SAFETY: only async-signal-safe system calls between fork and exec
    unsafe {
        c.pre_exec(|| {
            setgroups(&[])?;
            setgid(Gid::from_raw(NOBODY))?;
            setuid(Uid::from_raw(NOBODY))?;
            Ok(())
        });
    }
    let out = c.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// A node with private bucket `visp` holding one object, members and a deleted bucket (so
/// that every kind of file the daemon writes is there); returns the object's file.
fn node_with_a_private_object() -> (Srv, std::path::PathBuf) {
    let s = Srv::start(1 << 30);
    // the test's own temp dir traversable by everyone: only the cache's modes may stop nobody
    std::fs::set_permissions(s.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let admin = s.token(&[], true);
    for b in ["visp", "gone"] {
        let (st, body) = s.request("PUT", &format!("/v1/buckets/{b}"), Some(&admin), br#"{"projects":["visp"]}"#);
        assert_eq!(st, 200, "{body}");
    }
    let (st, body) = s.request("PUT", "/v1/objects/visp/train/0001.jpg", Some(&admin), SECRET.as_bytes());
    assert_eq!(st, 201, "{body}");
    let members = format!(r#"[{{"name":"{}","weight":2}}]"#, s.node.name);
    let (st, body) = s.request("PUT", "/v1/members", Some(&admin), members.as_bytes());
    assert!(st == 200 || st == 204, "{st} {body}");
    let (st, body) = s.request("DELETE", "/v1/buckets/gone", Some(&admin), b"");
    assert_eq!(st, 200, "{body}");
    // a job of another project is refused over HTTP...
    let other = s.token(&["speech"], false);
    assert_eq!(s.request("GET", "/v1/objects/visp/train/0001.jpg", Some(&other), b"").0, 403);
    let found = s.node.store.lookup("visp", b"train/0001.jpg", false).unwrap();
    let file = s.node.store.path_of(&found);
    (s, file)
}

/// Every directory under `root` is 0700, every file 0600, all the daemon's.
fn assert_private(root: &Path) {
    let me = nix::unistd::geteuid().as_raw();
    for p in walk(root) {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let want = if m.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(m.mode() & 0o7777, want, "{} is {:o}", p.display(), m.mode() & 0o7777);
        assert_eq!(m.uid(), me, "{} is not the daemon's", p.display());
    }
}

#[test]
fn private_objects_are_unreadable_by_other_users_on_disk() {
    if !is_root() {
        return;
    }
    let (s, file) = node_with_a_private_object();
    let names: Vec<String> =
        walk(&s.dir).iter().map(|p| p.strip_prefix(&s.dir).unwrap().display().to_string()).collect();
    for f in ["cache.key", "buckets.json", "deleting.json", "members.json"] {
        assert!(names.iter().any(|n| n == f), "{f} not in {names:?}");
    }
    assert_private(&s.dir);

    // sanity: nobody reads a file of the test's temp dir, so only the cache's modes stop it
    let control = s.tmp.path().join("control");
    std::fs::write(&control, "readable").unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(as_nobody("cat", &[&control]), (true, "readable".into()));

    // ...and cannot read the object, list the data dir or find the bytes in it
    for (cmd, path) in
        [("cat", file.as_path()), ("ls", &s.dir), ("ls", &s.dir.join("objects")), ("cat", &s.dir.join("cache.key"))]
    {
        let (ok, out) = as_nobody(cmd, &[path]);
        assert!(!ok && out.contains("Permission denied"), "nobody ran {cmd} {}: {out}", path.display());
    }
    let (ok, out) = as_nobody("grep", &[Path::new("-r"), Path::new(SECRET), &s.dir]);
    assert!(!ok && !out.contains(SECRET) && out.contains("Permission denied"), "{out}");

    // what the daemon writes later is private from the start too
    let admin = s.token(&[], true);
    let (st, _) = s.request("PUT", "/v1/objects/visp/val/0002.jpg", Some(&admin), b"more");
    assert_eq!(st, 201);
    assert_private(&s.dir);
}

#[test]
fn a_data_dir_left_readable_by_an_older_release_is_made_private_at_start() {
    if !is_root() {
        return;
    }
    let (s, file) = node_with_a_private_object();
    let Srv { tmp, dir, .. } = s;
    // what a release before the fix left: 0755 directories, 0644 files, and one file of
    // another user (copied in by hand)
    for p in walk(&dir) {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::os::unix::fs::chown(dir.join("buckets.json"), Some(NOBODY), Some(NOBODY)).unwrap();
    assert!(as_nobody("cat", &[&file]).1.contains(SECRET), "the old layout is readable: the test means something");

    let s = Srv::start_in(tmp, dir, 1 << 30);
    assert_private(&s.dir);
    let (ok, out) = as_nobody("cat", &[&file]);
    assert!(!ok && out.contains("Permission denied"), "{out}");
    // and the node still serves its objects and buckets
    let reader = s.token(&["visp"], false);
    assert_eq!(s.request("GET", "/v1/objects/visp/train/0001.jpg", Some(&reader), b""), (200, SECRET.to_string()));
}
