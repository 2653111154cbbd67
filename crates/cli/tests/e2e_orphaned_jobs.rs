//! Jobs a stopped `berth up` leaves running (issue 41): by design they outlive it for the next
//! start to take over, and `berth up` says so on Ctrl-C with the commands that end them; once
//! its data dir is removed nobody can take them over, and the kernel supervisor ends them
//! itself instead of leaving them running for good.

mod support;

use std::time::Duration;

use support::Berth;

/// Whether `pid` runs (a zombie does not: its parent has yet to reap it).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The parent of `pid` (field 4 of `/proc/PID/stat`).
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')').next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Kills the processes it names when the test ends, however it ends (a failed assertion must
/// not leave a `sleep 600` behind).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                // SAFETY: signalling a process this test started (through berth) and saw run.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}

/// Waits (generously) until `pid` no longer runs; whether it ended.
fn ends(pid: u32) -> bool {
    let t0 = std::time::Instant::now();
    while alive(pid) {
        if t0.elapsed() > support::PATIENCE {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

#[test]
fn jobs_of_a_stopped_berth_up_end_once_its_data_dir_is_removed() {
    let mut b = Berth::up(&[]);
    let id = b.submit(&["--cpus", "0.25", "--", "sh", "-c", "echo $$; exec sleep 600"]);
    b.wait_job(id, "its pid in the log", |_| !b.ok(&["logs", &id.to_string()]).trim().is_empty());
    let pid: u32 = b.ok(&["logs", &id.to_string()]).trim().parse().expect("the job printed its pid");
    let supervisor = parent(pid);
    let _guard = KillOnDrop(vec![pid]);

    b.stop();
    let said = std::fs::read_to_string(b.home.path().join("up.stdout")).unwrap();
    assert!(said.contains("berth: 1 job keeps running"), "{said}");
    assert!(said.contains("berth cancel --state RUNNING") && said.contains("--stop-jobs"), "{said}");
    assert!(alive(pid), "the job outlives berth up, for the next start to take over");

    std::fs::remove_dir_all(&b.data).unwrap();
    assert!(ends(pid), "the job of a removed data dir still runs");
    assert!(ends(supervisor), "the kernel supervisor {supervisor} ends with its last kernel");
}

/// What `berth up` says on Ctrl-C names commands that exist and work: `berth cancel --state
/// RUNNING` on the next start ends the job it took over.
#[test]
fn the_commands_a_stopping_berth_up_names_end_its_jobs() {
    let mut b = Berth::up(&[]);
    let id = b.submit(&["--cpus", "0.25", "--", "sh", "-c", "echo $$; exec sleep 600"]);
    b.wait_job(id, "its pid in the log", |_| !b.ok(&["logs", &id.to_string()]).trim().is_empty());
    let pid: u32 = b.ok(&["logs", &id.to_string()]).trim().parse().expect("the job printed its pid");
    let _guard = KillOnDrop(vec![pid]);
    b.restart();
    assert_eq!(b.state(id), "RUNNING", "taken over");
    b.ok(&["cancel", "--state", "RUNNING"]);
    b.wait_state(id, "CANCELLED");
    assert!(ends(pid), "the cancelled job's process ends");
}
