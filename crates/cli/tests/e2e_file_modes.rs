//! What a job can read off the node's disk (issue 13): another user's job reads neither the
//! manager's store (every job's spec and environment), nor the tokens beside it, nor other
//! kernels' files, and every file berth keeps is its own (0600/0700), through the real binary.
//!
//! Needs root (kernels of different users run as different uids); `CI=true` without root fails.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use support::{Berth, text};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: needs root (kernels of two users, two uids)");
    eprintln!("SKIPPED: {test}: needs root (kernels of two users, two uids)");
    true
}

/// Every path under `dir` that others (group or world) may read or change, skipping the
/// kernels' own work dirs (the job's files, the job's modes).
fn open_to_others(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().map_while(Result::ok) {
        let (p, m) = (e.path(), e.metadata().unwrap());
        if m.is_dir() {
            // A dir may let others pass (x), never list (r) or change (w) it.
            if m.permissions().mode() & 0o066 != 0 {
                out.push(format!("{} {:o}", p.display(), m.permissions().mode() & 0o7777));
            }
            if p.file_name().is_some_and(|n| n == "work") && m.uid() != 0 {
                continue;
            }
            open_to_others(&p, out);
        } else if m.is_file() && m.permissions().mode() & 0o077 != 0 {
            out.push(format!("{} {:o}", p.display(), m.permissions().mode() & 0o7777));
        }
    }
}

/// Regression (issue 13): `berth.db` and its `-wal`/`-shm` were 0644 in a 0755 data dir, and
/// another user's job read a job's `--env SECRET=...` out of it with `grep -a`.
#[test]
fn another_users_job_reads_nothing_of_the_store_or_other_kernels() {
    if skip_unless_root("another_users_job_reads_nothing_of_the_store_or_other_kernels") {
        return;
    }
    // Outside /tmp (kernels get a private one) and open to all up to the data dir, as
    // /var/lib is: what guards berth's files must be berth's own modes.
    let home = support::shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &["--no-docker"]);
    let alice = b.create_user("alice");
    let bob = b.create_user("bob");
    let secret = format!("s3cr3t{}", std::process::id());
    let a =
        b.submit_as(&alice, &["--env", &format!("SECRET={secret}"), "--", "sh", "-c", "echo $SECRET > mine; sleep 60"]);
    b.wait_state(a, "RUNNING");

    // Bob's job looks for the secret (spelt so that his own spec does not hold it) everywhere
    // under the data dir, and tries the obvious files by name.
    let data = b.data.display().to_string();
    let (head, tail) = secret.split_at(3);
    let script = format!(
        "grep -a -r -l '{head}''{tail}' {data} 2>/dev/null | sed 's/^/FOUND /'; \
         ls {data} >/dev/null 2>&1 && echo LISTED data; \
         ls {data}/agent/kernels >/dev/null 2>&1 && echo LISTED kernels; \
         for f in berth.db berth.db-wal admin-token join-token; do cat {data}/$f >/dev/null 2>&1 && echo READ $f; done; \
         cat {data}/agent/kernels/{a}.0.0/stdout >/dev/null 2>&1 && echo READ alice-log; \
         cat {data}/agent/kernels/{a}.0.0/work/mine >/dev/null 2>&1 && echo READ alice-file; \
         test -e {data}/berth.db && echo REACHED; \
         echo done"
    );
    let spy = b.submit_as(&bob, &["--", "sh", "-c", &script]);
    b.wait_state(spy, "SUCCEEDED");
    let o = b.cli_as(&bob, &["logs", &spy.to_string()]);
    let log = text(&o.stdout);
    assert!(log.contains("done"), "bob's job did not run to its end: {log}{}", text(&o.stderr));
    // The control: bob's job does reach the data dir, so what stopped it was the modes.
    assert!(log.contains("REACHED"), "bob's job cannot even reach the data dir: the test proves nothing\n{log}");
    for needle in ["FOUND", "LISTED", "READ"] {
        assert!(!log.contains(needle), "another user's job got at what is not its own:\n{log}");
    }

    let mut open = Vec::new();
    open_to_others(&b.data, &mut open);
    assert!(open.is_empty(), "berth's files open to other users: {open:#?}");
    let mode = std::fs::metadata(&b.data).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o711, "the data dir lets kernels pass, nothing more");
    b.ok(&["cancel", &a.to_string()]);
}
