//! Interactive sessions through the real binary, with a real pseudo-terminal on the client's
//! side (issue 17): `berth exec -t` and `berth run -it` give the command a terminal whose
//! size follows the client's (`stty size` inside), Ctrl-C reaches the job's foreground
//! process, the exit code comes back, a detach leaves the job running and `berth attach`
//! finds its state again; `berth run -i` is plain streams; another user's attach gets the
//! 404 of a missing job.

mod support;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Berth, PATIENCE, base_cmd, text};

/// A `berth` command on a terminal of the test's: the terminal is its controlling one (so it
/// gets SIGWINCH), what it prints is collected, and keys are typed into it.
struct Term {
    master: std::fs::File,
    out: Arc<Mutex<Vec<u8>>>,
    /// Where the last expectation matched (the next one looks after it).
    seen: usize,
    child: Child,
}

impl Term {
    fn spawn(b: &Berth, args: &[&str], rows: u16, cols: u16) -> Term {
        Term::spawn_with(b, args, rows, cols, &[])
    }

    /// [`Term::spawn`] with `env` set (another user's `BERTH_URL` and `BERTH_TOKEN`).
    fn spawn_with(b: &Berth, args: &[&str], rows: u16, cols: u16, env: &[(&str, &str)]) -> Term {
        let pair = nix::pty::openpty(None, None).unwrap();
        let master: OwnedFd = pair.master;
        let slave: OwnedFd = pair.slave;
        set_size(&master, rows, cols);
        let mut cmd = base_cmd(b.home.path());
        cmd.args(args)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and one ioctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let master = std::fs::File::from(master);
        let out = Arc::new(Mutex::new(Vec::new()));
        let (mut r, o) = (master.try_clone().unwrap(), out.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the command and everything it started have closed the terminal.
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                o.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Term { master, out, seen: 0, child }
    }

    fn output(&self) -> String {
        text(&self.out.lock().unwrap())
    }

    /// Waits until `needle` appears after what earlier expectations matched; returns the text
    /// from there up to and including it.
    fn expect(&mut self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let all = self.output();
            if let Some(i) = all.get(self.seen..).and_then(|rest| rest.find(needle)) {
                let got = all[self.seen..self.seen + i + needle.len()].to_string();
                self.seen += i + needle.len();
                return got;
            }
            assert!(start.elapsed() < PATIENCE, "no `{needle}` on the terminal; it shows:\n{all}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `line` again until `needle` shows (for what may race with a resize on its way).
    fn retype_until(&mut self, line: &str, needle: &str) {
        let start = Instant::now();
        loop {
            self.send(line.as_bytes());
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if self.output().get(self.seen..).is_some_and(|rest| rest.contains(needle)) {
                    self.expect(needle);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(start.elapsed() < PATIENCE, "no `{needle}` after `{line}`; it shows:\n{}", self.output());
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    /// Whether the terminal is in raw mode now (no line editing, no echo).
    fn raw(&self) -> bool {
        use nix::sys::termios::LocalFlags;
        let t = nix::sys::termios::tcgetattr(&self.master).unwrap();
        !t.local_flags.intersects(LocalFlags::ICANON | LocalFlags::ECHO)
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling a child this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    fn resize(&self, rows: u16, cols: u16) {
        let fd = self.master.try_clone().unwrap();
        set_size(&OwnedFd::from(fd), rows, cols);
    }

    /// The command's exit code, once it has exited.
    fn exit_code(mut self) -> Option<i32> {
        match support::wait_timeout(&mut self.child, PATIENCE) {
            Some(s) => s.code(),
            None => {
                let _ = self.child.kill();
                panic!("berth did not exit; the terminal shows:\n{}", self.output());
            }
        }
    }
}

fn set_size(fd: &OwnedFd, rows: u16, cols: u16) {
    let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    assert_eq!(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) }, 0);
}

/// The job id in `submitted job N`.
fn submitted_id(t: &mut Term) -> i64 {
    t.expect("submitted job ");
    let digits = t.expect("\n");
    digits.trim().parse().unwrap_or_else(|_| panic!("no job id in `{digits}`"))
}

/// A prompt of our own, so that the shell's output is easy to wait for.
const PROMPT: &str = "PS1='$ '\r";

#[test]
fn exec_t_follows_the_window_size_takes_ctrl_c_and_returns_the_exit_code() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "sleep", "300"]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();

    let mut t = Term::spawn(&b, &["exec", "-it", &ids, "--", "sh"], 30, 100);
    t.send(PROMPT.as_bytes());
    t.retype_until("stty size\r", "30 100");
    t.send(b"tty\r");
    t.expect("/dev/pts/");
    t.resize(40, 120);
    t.retype_until("stty size\r", "40 120");
    assert!(t.raw(), "raw while attached");
    t.send(b"echo job=$BERTH_JOB_ID; exit 5\r");
    t.expect(&format!("job={id}"));
    let master = t.master.try_clone().unwrap();
    assert_eq!(t.exit_code(), Some(5));
    let cooked = nix::sys::termios::tcgetattr(&master).unwrap();
    assert!(cooked.local_flags.contains(nix::sys::termios::LocalFlags::ICANON), "the mode is restored");

    // SIGTERM: berth restores the terminal on its way out, and the command goes with it.
    let mut t = Term::spawn(&b, &["exec", "-it", &ids, "--", "sh", "-c", "echo up=$((2+3)); exec sleep 302"], 24, 80);
    t.expect("up=5");
    assert!(t.raw());
    t.signal(libc::SIGTERM);
    let master = t.master.try_clone().unwrap();
    assert_eq!(t.exit_code(), Some(128 + libc::SIGTERM));
    let cooked = nix::sys::termios::tcgetattr(&master).unwrap();
    assert!(cooked.local_flags.contains(nix::sys::termios::LocalFlags::ICANON), "the mode is restored");
    let start = Instant::now();
    while !text(&std::process::Command::new("pgrep").args(["-f", "^sleep 302$"]).output().unwrap().stdout).is_empty() {
        assert!(start.elapsed() < PATIENCE, "the exec'd command outlived its client");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Ctrl-C is a byte for the terminal, which signals the foreground process group.
    let trap = "trap 'echo got-int; exit 3' INT; echo ready; while :; do sleep 1; done";
    let mut t = Term::spawn(&b, &["exec", "-it", &ids, "--", "sh", "-c", trap], 24, 80);
    t.expect("ready");
    t.send(&[3]);
    t.expect("got-int");
    assert_eq!(t.exit_code(), Some(3));
    b.ok(&["cancel", &ids]);
}

#[test]
fn run_it_detaches_and_attach_finds_the_session_again() {
    let b = Berth::up(&[]);
    let mut t = Term::spawn(&b, &["run", "-it", "--", "sh"], 30, 100);
    let id = submitted_id(&mut t);
    let ids = id.to_string();
    t.expect("detach with ctrl-p,ctrl-q");
    t.send(PROMPT.as_bytes());
    t.send(b"X=kept; stty size\r");
    t.expect("30 100");
    // Detach: berth exits 0, the job runs on.
    t.send(&[0x10, 0x11]);
    t.expect(&format!("detached from job {id}"));
    assert_eq!(t.exit_code(), Some(0));
    assert_eq!(b.state(id), "RUNNING");

    // Back, from a terminal of another size: the shell's variable is still there.
    let mut t = Term::spawn(&b, &["attach", &ids], 25, 90);
    t.expect("attached to job");
    t.retype_until("stty size\r", "25 90");
    t.send(b"echo X=$X\r");
    t.expect("X=kept");
    // Ctrl-C to the job's foreground process (a child of the shell).
    t.send(b"sh -c 'trap \"echo got-int; exit 4\" INT; echo ready; while :; do sleep 1; done'; echo status=$?\r");
    t.expect("ready");
    t.send(&[3]);
    t.expect("got-int");
    t.expect("status=4");
    // The job's exit code is berth's own.
    t.send(b"exit 7\r");
    assert_eq!(t.exit_code(), Some(7));
    b.wait_state(id, "FAILED");
    assert!(b.ok(&["logs", &ids]).contains("X=kept"), "the terminal's output is in the log too");

    // A job that has ended: its end, and its exit code.
    let o = b.cli(&["attach", &ids]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("has ended"), "{}", text(&o.stderr));

    // Another user learns nothing.
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["attach", &ids]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains(&format!("job {id} not found")), "{}", text(&o.stderr));
}

#[test]
fn another_user_cannot_attach_to_a_running_session() {
    let b = Berth::up(&[]);
    let mut t = Term::spawn(&b, &["run", "-it", "--", "sh"], 24, 80);
    let id = submitted_id(&mut t);
    t.expect("detach with");
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["attach", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains(&format!("job {id} not found")), "{}", text(&o.stderr));
    t.send(b"exit\r");
    assert_eq!(t.exit_code(), Some(0));
}

/// Runs `berth run -i ...` with `input` on its stdin.
fn run_with_input(b: &Berth, args: &[&str], input: &str) -> std::process::Output {
    b.cli_with_input(&[&["run", "-i"], args].concat(), input)
}

#[test]
fn run_i_streams_stdin_and_stdout_apart_and_attach_follows_other_jobs() {
    let b = Berth::up(&[]);
    let o = b.cli(&["run", "-it", "--detach-keys", "ctrl-1", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    assert!(text(&o.stderr).contains("invalid detach key `ctrl-1`"), "{}", text(&o.stderr));
    // Without a terminal, SIGTERM ends berth as it ends any program (nothing to restore), and
    // Ctrl-C (SIGINT) leaves the job running.
    let mut cli = base_cmd(b.home.path()).args(["run", "-i", "--", "cat"]).stdin(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    let cat = loop {
        assert!(start.elapsed() < PATIENCE, "the cat job never ran");
        let jobs = b.json(&["ps"]);
        let running =
            jobs.as_array().and_then(|a| a.iter().find(|j| j["name"] == "cat" && j["state"] == "RUNNING").cloned());
        if let Some(j) = running {
            break j["id"].as_i64().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    unsafe { libc::kill(cli.id() as i32, libc::SIGTERM) };
    let status = support::wait_timeout(&mut cli, PATIENCE).expect("berth ended on SIGTERM");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let mut cli = base_cmd(b.home.path())
        .args(["attach", &cat.to_string()])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = cli.stderr.take().unwrap();
    unsafe { libc::kill(cli.id() as i32, libc::SIGINT) };
    let status = support::wait_timeout(&mut cli, PATIENCE).expect("berth ended on SIGINT");
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    assert!(status.code() == Some(130) || status.signal() == Some(libc::SIGINT), "{status:?}: {said}");
    assert_eq!(b.state(cat), "RUNNING");
    b.ok(&["cancel", &cat.to_string()]);
    let o = run_with_input(&b, &["--", "echo", "early"], "");
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "early\n".into()),
        "output before the attach: {}",
        text(&o.stderr)
    );
    let o = run_with_input(&b, &["--", "wc", "-c"], "data");
    assert_eq!((o.status.code(), text(&o.stdout).trim()), (Some(0), "4"), "{}", text(&o.stderr));
    let o = run_with_input(&b, &["--", "sh", "-c", "cat; echo err >&2; exit 3"], "hi\n");
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(3), "hi\n".to_string()), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("err\n"), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let id = err.split("submitted job ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_string();
    assert_eq!(b.ok(&["logs", &id]), "hi\n", "the output is in the log");

    // A job without a terminal or input: attach shows its output until it ends.
    // In the directory submitted from, which the job shares (its /tmp is its own).
    let flag = b.home.path().join("submit/flag");
    let script = "echo hello; while [ ! -e flag ]; do sleep 0.1; done; echo bye";
    let id = b.submit(&["--", "sh", "-c", script]);
    b.wait_state(id, "RUNNING");
    let mut attach = base_cmd(b.home.path())
        .args(["attach", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = attach.stdout.take().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !text(&got).contains("hello") {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "attach ended before the job's output: {}", text(&got));
        got.extend_from_slice(&buf[..n]);
    }
    std::fs::write(&flag, "").unwrap();
    out.read_to_end(&mut got).unwrap();
    assert!(attach.wait().unwrap().success());
    assert_eq!(text(&got), "hello\nbye\n");
}

#[test]
fn exec_t_and_run_it_in_a_container() {
    if !support::docker_ready("exec_t_and_run_it_in_a_container") {
        return;
    }
    let node = format!("pty{}", std::process::id());
    let _cleanup = RemoveContainers(node.clone());
    let b = Berth::cluster("", &[(&node, &[])]);
    let id = b.submit(&["--image", "berth-test/busybox:1", "--", "sleep", "300"]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();
    let mut t = Term::spawn(&b, &["exec", "-it", &ids, "--", "sh"], 30, 100);
    // The first size may land just after the shell has started (Docker resizes on its own).
    t.retype_until("stty size\r", "30 100");
    t.resize(33, 101);
    t.retype_until("stty size\r", "33 101");
    t.send(b"exit 6\r");
    assert_eq!(t.exit_code(), Some(6));
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");

    // A container job on a terminal Docker holds, and one with plain input.
    let mut t = Term::spawn(&b, &["run", "-it", "--image", "berth-test/busybox:1", "--", "sh"], 30, 100);
    let id = submitted_id(&mut t);
    t.expect("detach with");
    t.retype_until("stty size\r", "30 100");
    t.send(&[0x10, 0x11]);
    t.expect("detached from job");
    assert_eq!(t.exit_code(), Some(0));
    let mut t = Term::spawn(&b, &["attach", &id.to_string()], 31, 99);
    t.retype_until("stty size\r", "31 99");
    t.send(b"exit 4\r");
    assert_eq!(t.exit_code(), Some(4));
    let o = b.cli_with_input(&["run", "-i", "--image", "berth-test/busybox:1", "--", "wc", "-c"], "data");
    assert_eq!((o.status.code(), text(&o.stdout).trim()), (Some(0), "4"), "{}", text(&o.stderr));
}

/// Removes a test's containers when it ends, failed or not.
struct RemoveContainers(String);

impl Drop for RemoveContainers {
    fn drop(&mut self) {
        support::remove_containers(&self.0);
    }
}

#[test]
fn a_session_outlives_a_restart_of_its_agent() {
    let mut b = Berth::up(&[]);
    let mut t = Term::spawn(&b, &["run", "-it", "--detach-keys", "ctrl-x", "--", "sh"], 24, 80);
    let id = submitted_id(&mut t);
    let ids = id.to_string();
    t.expect("detach with ctrl-x");
    t.send(PROMPT.as_bytes());
    t.send(b"X=kept; echo sum=$((1+1))\r");
    t.expect("sum=2");
    t.send(&[0x18]);
    t.expect("detached from job");
    assert_eq!(t.exit_code(), Some(0));

    // The kernel supervisor kept the terminal: the restarted agent takes it back.
    b.restart();
    assert_eq!(b.state(id), "RUNNING");
    let mut t = Term::spawn(&b, &["attach", &ids], 24, 80);
    t.expect("attached to job");
    t.send(b"echo X=$X\r");
    t.expect("X=kept");
    t.send(b"exit 9\r");
    assert_eq!(t.exit_code(), Some(9));
    b.wait_state(id, "FAILED");
}

#[test]
fn run_says_why_it_waits_and_ctrl_c_cancels_a_queued_job() {
    let b = Berth::up(&[]);
    let nodes = b.json(&["nodes"]);
    let cpus = nodes[0]["cpus_total"].as_u64().unwrap().to_string();
    let blocker = b.submit(&["--cpus", &cpus, "--", "sleep", "300"]);
    b.wait_state(blocker, "RUNNING");
    let mut t = Term::spawn(&b, &["run", "-it", "--cpus", &cpus, "--", "sh"], 24, 80);
    let id = submitted_id(&mut t);
    t.expect(&format!("job {id} is waiting: "));
    t.signal(libc::SIGINT);
    t.expect(&format!("cancelled job {id} before it started"));
    assert_eq!(t.exit_code(), Some(130));
    b.wait_state(id, "CANCELLED");
    b.ok(&["cancel", &blocker.to_string()]);
}

#[test]
fn an_attached_client_hears_of_an_agent_crash_and_the_session_goes_on() {
    let node = format!("pc{}", std::process::id());
    let mut b = Berth::cluster("", &[(&node, &[])]);
    let mut t = Term::spawn(&b, &["run", "-it", "--", "sh"], 24, 80);
    let id = submitted_id(&mut t);
    t.expect("detach with");
    t.send(PROMPT.as_bytes());
    t.send(b"X=kept; echo sum=$((1+1))\r");
    t.expect("sum=2");

    // The agent crashes: the client's stream breaks, the job (and its terminal) live on.
    b.kill_agent(0);
    t.expect(&format!("lost the stream to job {id}"));
    assert_eq!(t.exit_code(), Some(1));
    b.add_agent(&node, &[]);
    let start = Instant::now();
    let mut t = loop {
        // Until the manager has the new agent's connection.
        let mut t = Term::spawn(&b, &["attach", &id.to_string()], 24, 80);
        t.send(b"echo X=$X\r");
        let attached = loop {
            let out = t.output();
            if out.contains("X=kept") {
                break true;
            }
            if out.contains("error:") {
                break false;
            }
            assert!(start.elapsed() < PATIENCE, "never attached again: {out}");
            std::thread::sleep(Duration::from_millis(20));
        };
        if attached {
            break t;
        }
        // The node is not connected yet (or was, and its new connection is not in yet).
        assert_eq!(t.exit_code(), Some(1));
    };
    t.send(b"exit 3\r");
    assert_eq!(t.exit_code(), Some(3));
    b.wait_state(id, "FAILED");
}

#[test]
fn another_users_session_runs_as_them_on_its_own_terminal() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let env = [("BERTH_URL", b.url.as_str()), ("BERTH_TOKEN", bob.as_str())];
    let mut t = Term::spawn_with(&b, &["run", "-it", "--", "sh"], 30, 100, &env);
    let id = submitted_id(&mut t);
    t.expect("detach with");
    t.send(PROMPT.as_bytes());
    t.send(b"echo uid=$(id -u); stty size\r");
    let uid = t.expect("30 100");
    assert!(!uid.contains("uid=0"), "bob's session does not run as root: {uid}");
    // An exec of bob's into his job gets a terminal of its own, as his user.
    let ids = id.to_string();
    let mut e = Term::spawn_with(&b, &["exec", "-it", &ids, "--", "sh", "-c", "id -u; tty; exit 2"], 24, 80, &env);
    let uid = e.expect("/dev/pts/");
    assert!(!uid.lines().any(|l| l.trim() == "0"), "bob's exec does not run as root: {uid}");
    assert_eq!(e.exit_code(), Some(2));
    t.send(b"exit\r");
    assert_eq!(t.exit_code(), Some(0));
}
