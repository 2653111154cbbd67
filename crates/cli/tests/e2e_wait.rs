//! `berth submit --wait` against the real binary: the job's stdout and stderr come out on ours
//! while it runs and completely at the end (byte-exact), the exit code is the job's, and
//! `--quiet` shows none of the output.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;

use support::{Berth, text};

#[test]
fn wait_streams_stdout_and_stderr_and_exits_with_the_code() {
    let b = Berth::up(&[]);
    let o = b.cli(&["submit", "--wait", "--", "sh", "-c", "echo out; echo err >&2; sleep 1; echo more; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    // Stdout is the job's alone: `submitted job N` goes to stderr with --wait.
    assert_eq!(text(&o.stdout), "out\nmore\n");
    let err = text(&o.stderr);
    assert_eq!(err.lines().filter(|l| *l == "err").count(), 1, "stderr once: {err}");
    assert!(err.contains("submitted job"), "{err}");
    assert!(err.contains("FAILED: exit code 3"), "the failure line: {err}");
}

#[test]
fn quiet_wait_shows_no_output_of_the_job() {
    let b = Berth::up(&[]);
    let o = b.cli(&["submit", "--wait", "-q", "--", "sh", "-c", "echo out; echo err >&2; exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    let err = text(&o.stderr);
    assert!(!err.lines().any(|l| l == "err"), "{err}");
    assert!(err.contains("exit code 4"), "{err}");
    // --quiet alone is a usage error: it only makes sense with --wait.
    let o = b.cli(&["submit", "-q", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn wait_passes_large_binary_output_through_byte_exact() {
    use std::os::unix::fs::PermissionsExt;
    let b = Berth::up(&[]);
    // Where the job (another uid, with a private /tmp) can read it.
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = shared.path().join("blob");
    // 3 MiB that is not UTF-8 and spans several 1 MiB log pieces.
    let blob: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&src, &blob).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).unwrap();
    let src = src.to_str().unwrap();
    let o = b.cli(&["submit", "--wait", "--", "sh", "-c", &format!("head -c 3145728 {src}; head -c 1000 {src} >&2")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout == blob, "stdout differs: {} bytes, want {}", o.stdout.len(), blob.len());
    let tail = &o.stderr[o.stderr.len() - 1000..];
    assert!(tail == &blob[..1000], "stderr ends with the job's 1000 bytes");
}

/// `berth submit --wait` of a job that prints `ready`, then waits for the file `gate` to exist,
/// prints `done` and exits 0; returns once `ready` has come out on our stdout, with the
/// process, the rest of its stdout and the gate dir (shared: the job's uid can look into it).
struct Gated {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    gate: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn submit_gated(b: &Berth) -> Gated {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::shared_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let gate = dir.path().join("gate");
    let job = format!("echo ready; while [ ! -e {} ]; do sleep 0.1; done; echo done", gate.display());
    let mut child = support::base_cmd(b.home.path())
        .args(["submit", "--wait", "--", "sh", "-c", &job])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // The job cannot end before the gate opens: `ready` can only come from a live stream.
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    Gated { child, out, gate, _dir: dir }
}

#[test]
fn wait_shows_output_while_the_job_still_runs() {
    let b = Berth::up(&[]);
    let mut g = submit_gated(&b);
    std::fs::write(&g.gate, "").unwrap();
    let mut rest = String::new();
    g.out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "done\n");
    assert_eq!(support::wait_timeout(&mut g.child, support::PATIENCE).and_then(|s| s.code()), Some(0));
}

#[test]
fn ctrl_c_stops_the_waiting_not_the_job() {
    let b = Berth::up(&[]);
    let mut g = submit_gated(&b);
    // SAFETY: signalling a child this test spawned and has not reaped.
    unsafe { libc::kill(g.child.id() as i32, libc::SIGINT) };
    let status = support::wait_timeout(&mut g.child, support::PATIENCE).expect("berth submit ends on Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let mut err = String::new();
    g.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let id: i64 = err.split_whitespace().nth(2).and_then(|w| w.parse().ok()).expect("submitted job N");
    assert!(err.contains(&format!("job {id} keeps running")), "{err}");
    assert_eq!(b.state(id), "RUNNING");
    std::fs::write(&g.gate, "").unwrap();
    b.wait_state(id, "SUCCEEDED");
}

#[test]
fn a_pending_wait_says_once_why_it_waits_and_then_shows_the_output() {
    let b = Berth::up(&[]);
    let cpus = b.json(&["nodes"])[0]["cpus_total"].as_u64().expect("cpus_total").to_string();
    // Holds every CPU; bounded so that a broken notice cannot hang the test for long.
    let blocker = b.submit(&["--cpus", &cpus, "--", "sleep", "120"]);
    b.wait_state(blocker, "RUNNING");
    let mut child = support::base_cmd(b.home.path())
        .args(["submit", "--wait", "--cpus", &cpus, "--", "echo", "ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("queued and waiting") {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "no pending notice: {seen}");
        seen.push_str(&line);
    }
    b.ok(&["cancel", &blocker.to_string()]);
    let status = support::wait_timeout(&mut child, support::PATIENCE).expect("the waiting job ran");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{seen}{rest}");
    assert!(!rest.contains("queued and waiting"), "once: {seen}{rest}");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert_eq!(out, "ran\n", "nothing on stdout while pending");
}

/// Issue 41: `sbatch --mail-type` told users to `berth wait JOB`, which did not exist.
#[test]
fn berth_wait_exits_with_the_jobs_code_and_the_worst_of_several() {
    let b = Berth::up(&[]);
    let ok = b.submit(&["--", "sh", "-c", "sleep 1"]);
    let bad = b.submit(&["--", "sh", "-c", "sleep 1; exit 5"]);
    let o = b.cli(&["wait", &ok.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(b.state(ok), "SUCCEEDED", "wait returned before the job ended");
    let o = b.cli(&["wait", &ok.to_string(), &bad.to_string()]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&format!("job {bad} FAILED: exit code 5")), "{}", text(&o.stderr));
    // --follow shows the output of one job.
    let shown = b.submit(&["--", "sh", "-c", "echo hello from the job"]);
    let o = b.cli(&["wait", "--follow", &shown.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "hello from the job\n");
    // A job that does not exist fails at once, and the usage mistake is a 2.
    let o = b.cli(&["wait", &ok.to_string(), "999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("999999"), "{}", text(&o.stderr));
    assert_eq!(b.cli(&["wait"]).status.code(), Some(2));
}

/// Issue 41: `--wait` on a job that failed during setup printed `cannot show the rest of job
/// N's stderr: node vm has no stderr log` beside the failure: a job that never ran has no logs.
#[test]
fn wait_on_a_job_that_fails_in_setup_says_only_why() {
    let b = Berth::up(&[]);
    let o = b.cli(&["submit", "--wait", "--python", "3.99", "--", "true"]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("FAILED"), "the failure line: {err}");
    assert!(!err.contains("cannot show the rest"), "{err}");
}
