//! `berth cancel` by user, state, name or queue, like `scancel -u/-t/-n/-p`: only unfinished
//! jobs that match every filter (and the ids given, if any) are cancelled, an exact name is
//! needed, and it says how many.

mod support;

use support::{Berth, text};

#[test]
fn cancel_selects_jobs_by_name_user_and_state_and_says_how_many() {
    let b = Berth::up(&[]);
    let alice = b.create_user("alice");
    let sweep: Vec<i64> = (0..2).map(|_| b.submit(&["--name", "sweep", "--", "sleep", "600"])).collect();
    let other = b.submit(&["--name", "sweeper", "--", "sleep", "600"]);
    let hers = b.submit_as(&alice, &["--name", "sweep", "--", "sleep", "600"]);

    // an exact name: `sweeper` is not `sweep`; `-u admin` leaves alice's job alone
    let out = b.cli(&["cancel", "-n", "sweep", "-u", "admin"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().last(), Some("cancelled 2 jobs"), "{}", text(&out.stdout));
    // a running job passes through TERMINATING while its kernel stops
    for id in &sweep {
        b.wait_state(*id, "CANCELLED");
    }
    assert_ne!(b.state(other), "CANCELLED");
    assert_ne!(b.state(hers), "CANCELLED");

    // nothing left that matches: said, not an error
    let out = b.cli(&["cancel", "-n", "sweep", "-u", "admin"]);
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("no unfinished job matches"), "{}", text(&out.stderr));

    // ids and filters: only the ids that match
    let out = b.cli(&["cancel", "-n", "sweeper", &other.to_string(), &hers.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().last(), Some("cancelled 1 job"));
    b.wait_state(other, "CANCELLED");
    assert_ne!(b.state(hers), "CANCELLED");

    // alice cancels her own by state (it may have waited for a core until now)
    b.wait_state(hers, "RUNNING");
    let out = b.cli_as(&alice, &["cancel", "--state", "RUNNING"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    b.wait_state(hers, "CANCELLED");

    // a finished state is no selection; no id and no filter is a usage error
    let out = b.cli(&["cancel", "--state", "FAILED"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("have ended"), "{}", text(&out.stderr));
    let out = b.cli(&["cancel"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
