//! `berth admin backup` and `restore` through the real binary (issue 18): an online backup of
//! a running berth is private and complete; restored while berth is stopped, it brings the
//! store back to that moment; a restore refuses a running manager and a half-written or
//! foreign file, and changes nothing then; only admins may take a backup.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::{Berth, text};

#[test]
fn a_backup_taken_online_restores_the_store_to_that_moment() {
    let mut b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let done: Vec<i64> = (0..3).map(|_| b.submit(&["--", "true"])).collect();
    for id in &done {
        b.wait_state(*id, "SUCCEEDED");
    }
    let file = b.home.path().join("berth-backup.db");
    let out = b.ok(&["admin", "backup", file.to_str().unwrap()]);
    assert!(out.contains("3 jobs") && out.contains("2 users"), "{out}");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "a backup holds token hashes");
    let o = b.cli_as(&bob, &["admin", "backup", "/tmp/never-written.db"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!std::path::Path::new("/tmp/never-written.db").exists());

    // After the backup: one more job, and another user.
    let later = b.submit(&["--", "true"]);
    b.wait_state(later, "SUCCEEDED");
    b.create_user("carol");

    // Not while berth runs.
    let restore = |b: &Berth, f: &std::path::Path| {
        b.cli(&["admin", "restore", f.to_str().unwrap(), "--data-dir", b.data.to_str().unwrap()])
    };
    let o = restore(&b, &file);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("a manager is running"), "{}", text(&o.stderr));

    b.stop();
    // A half-written file and a file that is no store: refused, nothing changed.
    let bytes = std::fs::read(&file).unwrap();
    let half = b.home.path().join("half.db");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let o = restore(&b, &half);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("cannot restore") && (err.contains("integrity") || err.contains("not a berth store")),
        "{err}"
    );
    let foreign = b.home.path().join("notes.txt");
    std::fs::write(&foreign, "not a database\n").unwrap();
    let o = restore(&b, &foreign);
    assert!(text(&o.stderr).contains("not a berth store"), "{}", text(&o.stderr));
    assert!(!b.data.join("berth.db.before-restore").exists(), "nothing was changed");

    let o = restore(&b, &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("3 jobs"), "{}", text(&o.stdout));
    b.start_up();
    assert_eq!(b.listed_ids(), done, "the jobs of the backup's moment, not the later one");
    let users = b.ok(&["admin", "user", "list"]);
    assert!(users.contains("bob") && !users.contains("carol"), "{users}");
    // And it goes on from there.
    let next = b.submit(&["--", "true"]);
    b.wait_state(next, "SUCCEEDED");
}
