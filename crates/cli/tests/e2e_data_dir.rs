//! Where berth keeps its data, and whose credentials a `berth up` writes (issue 14): the data
//! dir never depends on the current directory, and a second `berth up` never silently takes
//! the credentials file from a first one that still works.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::users::UnixUser;
use support::{BIN, Berth, PATIENCE, text};

/// A `berth up` started by hand (beside a harness one), stopped with SIGINT on drop.
struct Up {
    child: Child,
    /// Its stdout up to and including the `data dir:` line.
    said: String,
}

impl Up {
    /// Runs `cmd` (a `berth up`), reading its stdout until it names its data dir.
    fn start(cmd: Command) -> Up {
        Self::start_logging(cmd, Stdio::null())
    }

    /// Like [`Up::start`], its log (stderr) going to `stderr`.
    fn start_logging(mut cmd: Command, stderr: Stdio) -> Up {
        let mut child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut said = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                said.push_str(&line);
                said.push('\n');
                if line.starts_with("data dir: ") || line.starts_with("Error") {
                    let _ = tx.send(said.clone());
                }
            }
            let _ = tx.send(said);
        });
        let said = rx.recv_timeout(PATIENCE).expect("berth up said where its data is");
        Up { child, said }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: signalling a child this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        if support::wait_timeout(&mut self.child, PATIENCE).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `berth <args>` with HOME `home` and, if given, `BERTH_CREDENTIALS`.
fn berth(home: &Path, creds: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(args).env("HOME", home).env_remove("BERTH_URL").env_remove("BERTH_TOKEN").env_remove("XDG_CONFIG_HOME");
    if let Some(p) = creds {
        c.env("BERTH_CREDENTIALS", p);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

fn up_cmd(home: &Path, data: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["up", "--listen", "127.0.0.1:0", "--no-cache", "--data-dir"]).arg(data);
    c.env("HOME", home).env_remove("XDG_CONFIG_HOME").env_remove("BERTH_URL").env_remove("BERTH_TOKEN");
    c
}

#[test]
fn a_second_berth_up_elsewhere_leaves_the_first_ones_credentials_alone() {
    let mut first = Berth::up(&[]);
    let home = first.home.path().to_path_buf();
    let home = home.as_path();
    let file = home.join(".config/berth/credentials");
    let before = std::fs::read_to_string(&file).unwrap();

    let other = tempfile::tempdir().unwrap();
    let second = Up::start(up_cmd(home, &other.path().join("data")));
    assert!(second.said.contains("kept "), "{}", second.said);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "the first berth's credentials are untouched");
    let ours = std::fs::canonicalize(other.path().join("data")).unwrap().join("credentials");
    assert!(second.said.contains(&format!("export BERTH_CREDENTIALS={}", ours.display())), "{}", second.said);
    assert_eq!(std::fs::metadata(&ours).unwrap().permissions().mode() & 0o777, 0o600);

    // Both stay usable: each sees only its own job.
    let o = berth(home, Some(&ours), &["submit", "--", "true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = berth(home, Some(&ours), &["ps", "--all", "-o", "json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(first.json(&["ps", "--all"]), serde_json::json!([]), "the first berth has no job");

    // Once the first berth is gone, its file no longer works: the next start replaces it
    // and says so.
    first.stop();
    drop(second);
    let third = Up::start(up_cmd(home, &other.path().join("data")));
    assert!(third.said.contains("which does not answer"), "{}", third.said);
    let now = std::fs::read_to_string(&file).unwrap();
    assert!(now.contains("data_dir = ") && now.contains("127.0.0.1:"), "{now}");
    let o = berth(home, None, &["ps", "--all", "-o", "json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn a_users_berth_keeps_its_data_in_their_data_home_whatever_the_directory() {
    let user = UnixUser::create("d");
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let own = |p: &Path| std::os::unix::fs::chown(p, Some(user.uid), Some(user.gid)).unwrap();
    own(home.path());
    let elsewhere = home.path().join("somewhere/else");
    std::fs::create_dir_all(&elsewhere).unwrap();
    own(&elsewhere);
    own(&home.path().join("somewhere"));

    let start = |dir: &Path, env: &[(&str, &str)]| {
        let mut c = user.command(dir, &["up", "--listen", "127.0.0.1:0", "--no-cache"]);
        c.env("HOME", home.path());
        for (k, v) in env {
            c.env(k, v);
        }
        Up::start(c)
    };
    let expected: PathBuf = home.path().join(".local/share/berth");
    let up = start(home.path(), &[]);
    assert!(up.said.contains(&format!("data dir: {}\n", expected.display())), "{}", up.said);
    drop(up);
    // From another directory: the same cluster.
    let up = start(&elsewhere, &[]);
    assert!(up.said.contains(&format!("data dir: {}\n", expected.display())), "{}", up.said);
    drop(up);
    let xdg = home.path().join("xdg");
    let up = start(&elsewhere, &[("XDG_DATA_HOME", xdg.to_str().unwrap())]);
    assert!(up.said.contains(&format!("data dir: {}\n", xdg.join("berth").display())), "{}", up.said);
    drop(up);

    // A data dir of an older berth in the current directory is not silently left behind.
    let legacy = elsewhere.join("berth-data");
    std::fs::create_dir(&legacy).unwrap();
    std::fs::write(legacy.join("berth.db"), "").unwrap();
    let o = user
        .command(&elsewhere, &["up", "--listen", "127.0.0.1:0", "--no-cache"])
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("fresh"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("from an older berth") && e.contains("--data-dir"), "{e}");
}

#[test]
fn a_restart_on_the_same_data_dir_rewrites_the_credentials_without_a_word() {
    let mut b = Berth::up(&[]);
    b.restart();
    let file = std::fs::read_to_string(b.home.path().join(".config/berth/credentials")).unwrap();
    assert!(file.contains(&b.url), "the new address is written: {file}");
    let said = std::fs::read_to_string(b.home.path().join("up.stdout")).unwrap();
    assert!(said.contains("token written to") && !said.contains("kept") && !said.contains("does not answer"), "{said}");
    assert!(b.ok(&["whoami"]).contains("admin"));
}

#[test]
fn a_second_berth_up_on_the_same_data_dir_says_only_why_it_stops() {
    let first = Berth::up(&["--no-cache"]);
    let o = up_cmd(first.home.path(), &first.data).stdin(Stdio::null()).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(e.contains("another berth already serves this data dir") && e.contains("--data-dir"), "{e}");
    // Regression (issue 41): it logged "standing by: another manager leads" first, as if it
    // would wait to take over.
    assert!(!e.contains("standing by"), "{e}");
    assert!(first.ok(&["whoami"]).contains("admin"), "the first berth still serves");
}

/// A `berth up` of a user who is not root cannot bind data folders into jobs (that needs a
/// mount namespace): it says so when it starts, not only when a `--folder` job fails (issue 41).
#[test]
fn a_users_berth_up_warns_at_start_that_it_cannot_mount_folders() {
    let user = UnixUser::create("f");
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(home.path(), Some(user.uid), Some(user.gid)).unwrap();
    let log = home.path().join("up.stderr");
    let mut c = user.command(home.path(), &["up", "--listen", "127.0.0.1:0", "--no-cache"]);
    c.env("HOME", home.path()).env("RUST_LOG", "info");
    let _up = Up::start_logging(c, Stdio::from(std::fs::File::create(&log).unwrap()));
    let t0 = std::time::Instant::now();
    let warned = loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("cannot mount data folders into process kernels") || t0.elapsed() > PATIENCE {
            break said;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        warned.contains("cannot mount data folders into process kernels")
            && warned.contains("--image")
            && warned.contains("as root"),
        "{warned}"
    );
}

/// Regression (issue 41): a user's `berth up` took a process job with `--folder`, which then
/// failed at launch (binding folders needs a root agent). Its submit is refused instead,
/// saying why and how to fix it, and nothing is queued; a container job is still taken.
#[test]
fn a_users_berth_up_refuses_a_folder_job_at_submit_instead_of_failing_it_at_launch() {
    let user = UnixUser::create("g");
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(home.path(), Some(user.uid), Some(user.gid)).unwrap();
    let mut c = user.command(home.path(), &["up", "--listen", "127.0.0.1:0", "--no-cache"]);
    c.env("HOME", home.path());
    let _up = Up::start(c);
    let run = |args: &[&str]| user.command(home.path(), args).stdin(Stdio::null()).output().unwrap();
    // The check counts nodes whose agent has registered: wait for the node.
    let t0 = std::time::Instant::now();
    loop {
        let o = run(&["nodes", "-o", "json"]);
        let nodes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if nodes.as_array().is_some_and(|n| !n.is_empty()) {
            break;
        }
        assert!(t0.elapsed() < PATIENCE, "no node registered: {}", text(&o.stderr));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = run(&["folder", "create", "d"]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let o = run(&["submit", "--folder", "d", "--", "true"]);
    assert!(!o.status.success(), "{}", text(&o.stdout));
    let e = text(&o.stderr);
    assert!(
        e.contains("folder d: no node of queue default can mount folders into a process job")
            && e.contains("--image")
            && e.contains("as root"),
        "{e}"
    );
    let o = run(&["ps", "--all", "-o", "json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(jobs, serde_json::json!([]), "nothing is queued");
    // Without folders, or in a container (Docker binds them), the job is taken.
    let o = run(&["submit", "--", "true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&["submit", "--image", "busybox:1", "--folder", "d", "--", "true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}
