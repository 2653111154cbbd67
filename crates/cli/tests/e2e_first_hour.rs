//! A new user's first hour (issue 14): the README's Quick start commands run literally, and a
//! job runs as the Unix user who submitted it, in the directory they submitted from, with
//! their environment, as `sbatch` does.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::users::UnixUser;
use support::{BIN, Berth, shared_tempdir, text};

/// These tests switch users: they need root, as the suite does (never a silent skip).
fn assert_root() {
    // SAFETY: geteuid cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root: it runs jobs as other users");
}

/// The commands of the README's Quick start that use berth once it is up: the second `sh`
/// block of the section, without comments.
fn quick_start_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme.find("## Quick start").expect("README has a Quick start");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let block = section.split("```sh").nth(2).expect("a second sh block in the Quick start");
    let block = &block[..block.find("```").unwrap()];
    block.lines().map(|l| l.split(" # ").next().unwrap().trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// The directory of the `berth` binary under test, to put on PATH as the README says.
fn bin_dir() -> PathBuf {
    Path::new(BIN).parent().unwrap().to_path_buf()
}

/// Runs `line` through `sh` in `dir`, as a user at a prompt with `path` and HOME `home`.
fn shell(line: &str, dir: &Path, home: &Path, path: &str) -> Output {
    Command::new("sh")
        .args(["-c", line])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("WANDB_MODE", "offline")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_readme_quick_start_works_as_written() {
    assert_root();
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &["--fake-gpus", "2"]);
    let home = b.home.path();
    // A project with its own virtualenv, active as the user's shell would have it.
    let proj = home.join("proj");
    std::fs::create_dir(&proj).unwrap();
    let venv = proj.join(".venv");
    let made = Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success(), "python3 -m venv failed");
    std::fs::write(
        proj.join("train.py"),
        "import os, sys\nprint('python', sys.executable)\nprint('wandb', os.environ.get('WANDB_MODE'))\n\
         open('model.ckpt', 'w').write('weights\\n')\n",
    )
    .unwrap();
    std::fs::write(proj.join("serve.py"), "import time\ntime.sleep(600)\n").unwrap();
    std::fs::write(proj.join("job.toml"), "command = [\"python\", \"-c\", \"print('from the job file')\"]\n").unwrap();
    std::fs::write(proj.join("check.sh"), "#!/bin/sh\ntest -s model.ckpt\n").unwrap();
    std::fs::set_permissions(proj.join("check.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}/bin:{}:/usr/local/bin:/usr/bin:/bin", venv.display(), bin_dir().display());

    let commands = quick_start_commands();
    assert!(commands.len() >= 8, "{commands:?}");
    eprintln!("quick start: {commands:#?}");
    for line in &commands {
        if line.contains("logs -f 1") {
            // Follows job 1 to its end: it must have started (the GPU job may wait for it).
            b.wait_state(1, "SUCCEEDED");
        }
        let o = shell(line, &proj, home, &path);
        assert!(o.status.success(), "`{line}` failed ({}): {}{}", o.status, text(&o.stdout), text(&o.stderr));
        if line.contains("python train.py") {
            assert_eq!(text(&o.stdout).trim(), "submitted job 1");
        }
    }

    // Job 1 ran the virtualenv's python, in the project, as the submitter (root here), with
    // the submitter's environment; its checkpoint lies next to train.py.
    let logs = b.ok(&["logs", "1"]);
    assert!(logs.contains(&format!("python {}/bin/python", venv.display())), "{logs}");
    assert!(logs.contains("wandb offline"), "the environment went along: {logs}");
    let ckpt = std::fs::metadata(proj.join("model.ckpt")).expect("model.ckpt next to train.py");
    assert_eq!(ckpt.uid(), 0, "written by the submitter");
    let job = b.job(1);
    assert_eq!(job["spec"]["workdir"], proj.to_str().unwrap());
    assert_eq!(job["submitter"]["uid"], 0);
    assert_eq!(b.state(2), "CANCELLED");
    assert_eq!(b.wait_state(3, "SUCCEEDED")["job"]["state"], "SUCCEEDED");
    assert!(b.ok(&["logs", "3"]).contains("from the job file"));
}

#[test]
fn a_local_user_s_job_runs_as_them_where_they_submitted_with_their_environment() {
    assert_root();
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &[]);
    let socket = b.data.join("berth.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "a root berth's socket is open to every local user");
    let alice = UnixUser::create_in("a", true);
    let (_, extra_gid) = alice.extra.clone().unwrap();
    let work = b.home.path().join("alice-work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(alice.uid), Some(alice.gid)).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700)).unwrap();

    let script = "id -u; id -g; pwd; echo \"$MY_SETTING\"; echo \"$USER\"; id -G; touch out";
    let o = alice.berth(&socket, &work, &["submit", "-o", "json", "--", "sh", "-c", script], &[("MY_SETTING", "42")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    let job = b.wait_state(id, "SUCCEEDED");
    assert_eq!(job["job"]["user"], alice.name.as_str(), "the berth user of the account's name, made on first use");
    let logs = b.ok(&["logs", &id.to_string()]);
    let expected = format!("{}\n{}\n{}\n42\n{}\n", alice.uid, alice.gid, work.display(), alice.name);
    assert!(logs.starts_with(&expected), "{logs}");
    let groups: Vec<u32> = logs.lines().nth(5).unwrap().split(' ').map(|g| g.parse().unwrap()).collect();
    assert!(groups.contains(&extra_gid) && groups.contains(&alice.gid), "her groups, as at login: {groups:?}");
    let out = std::fs::metadata(work.join("out")).expect("the job wrote into the submit dir");
    assert_eq!((out.uid(), out.gid()), (alice.uid, alice.gid));

    // --export NONE: none of the submitter's variables.
    let o = alice.berth(
        &socket,
        &work,
        &["submit", "-o", "json", "--export", "NONE", "--", "sh", "-c", "echo \"[$MY_SETTING]\""],
        &[("MY_SETTING", "42")],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "[]\n");

    // Another local user sees none of alice's jobs, and a directory only alice may enter
    // fails their job with a reason that says why.
    let bob = UnixUser::create("b");
    let o = alice.berth(&socket, &work, &["ps", "-o", "json"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = bob.berth(&socket, Path::new("/"), &["ps", "--all", "-o", "json"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(), serde_json::json!([]));
    let o = bob.berth(
        &socket,
        Path::new("/"),
        &["submit", "-o", "json", "--workdir", work.to_str().unwrap(), "--", "true"],
        &[],
    );
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    let job = b.wait_state(id, "FAILED");
    let reason = job["job"]["reason"].as_str().unwrap();
    assert!(reason.contains("launch failed") && reason.contains(&bob.name), "{reason}");
}

/// Issue 41: over the unix socket (a local user with no credentials file) `berth ui` printed
/// `http://localhost/ui/login?code=...`, with no port: a dead link.
#[test]
fn berth_ui_over_the_socket_links_to_the_managers_http_listener() {
    assert_root();
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &[]);
    let socket = b.data.join("berth.sock");
    let carol = UnixUser::create("u");
    let o = carol.berth(&socket, Path::new("/"), &["ui"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let link = text(&o.stdout).trim().to_string();
    assert!(link.starts_with(&format!("{}/ui/login?code=", b.url)), "{link} is not on {}", b.url);
    // The link works: it logs a browser in as carol.
    let addr = b.url.trim_start_matches("http://").to_string();
    let path = link.trim_start_matches(&b.url);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut s, format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 303") && answer.contains("berth_session="), "{answer}");
}

/// Issue 41: `berth logs` of a crashed script printed only `starting`; the traceback went to
/// the stderr log, which only `--stderr` showed.
#[test]
fn a_crashed_scripts_traceback_shows_in_berth_logs() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "python3", "-c", "print('starting', flush=True); import nonexistent_mod"]);
    b.wait_state(id, "FAILED");
    let o = b.cli(&["logs", &id.to_string()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Stdout on stdout (a pipe keeps it alone), the traceback on stderr.
    assert_eq!(text(&o.stdout), "starting\n");
    assert!(text(&o.stderr).contains("ModuleNotFoundError: No module named 'nonexistent_mod'"), "{}", text(&o.stderr));
    // One log alone, on stdout.
    let o = b.cli(&["logs", "--stdout", &id.to_string()]);
    assert_eq!((text(&o.stdout).as_str(), text(&o.stderr).as_str()), ("starting\n", ""));
    let err = b.ok(&["logs", "--stderr", &id.to_string()]);
    assert!(err.contains("Traceback") && !err.contains("starting"), "{err}");
    // Following both ends with the job.
    let o = b.cli(&["logs", "-f", &id.to_string()]);
    assert_eq!(text(&o.stdout), "starting\n");
    assert!(text(&o.stderr).contains("nonexistent_mod"), "{}", text(&o.stderr));
    assert_eq!(b.cli(&["logs", "--stdout", "--stderr", &id.to_string()]).status.code(), Some(2));
    // `show` points at the traceback: the last lines of stderr.
    let shown = b.ok(&["show", &id.to_string()]);
    let tail = shown.split("last lines of stderr").nth(1).unwrap_or_else(|| panic!("{shown}"));
    assert!(tail.contains(&format!("berth logs --stderr {id}")), "{shown}");
    assert!(tail.contains("  ModuleNotFoundError: No module named 'nonexistent_mod'"), "{shown}");
}

/// Issue 41: `berth logs --tail N` was missing (kubectl and `tail` have it).
#[test]
fn logs_tail_prints_the_last_lines_of_each_log_then_follows() {
    let b = Berth::up(&[]);
    let script = "import sys\nfor i in range(1, 1001): print('line', i)\nprint('oops 1', file=sys.stderr)\nprint('oops 2', file=sys.stderr)";
    let id = b.submit(&["--", "python3", "-c", script]);
    b.wait_state(id, "SUCCEEDED");
    let o = b.cli(&["logs", "--tail", "3", &id.to_string()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "line 998\nline 999\nline 1000\n");
    assert_eq!(text(&o.stderr), "oops 1\noops 2\n");
    assert_eq!(b.ok(&["logs", "--stdout", "--tail", "1", &id.to_string()]), "line 1000\n");
    // With -f: the tail, then what the job prints next, each line once.
    let go = b.home.path().join("submit").join("go");
    let id = b.submit(&["--", "sh", "-c", "echo a; echo b; while [ ! -e go ]; do sleep 0.1; done; echo c"]);
    let t0 = std::time::Instant::now();
    while !b.ok(&["logs", "--stdout", &id.to_string()]).contains("b\n") {
        assert!(t0.elapsed() < support::PATIENCE, "the job never printed b");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut follow = support::base_cmd(b.home.path())
        .args(["logs", "-f", "--tail", "1", "--stdout", &id.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(follow.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    assert_eq!(first, "b\n", "the last line so far");
    std::fs::write(&go, "").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(follow.wait().unwrap().success());
    assert_eq!(rest, "c\n", "then what came next, once");
}

/// Issue 41: `berth submit train.py` said ``cannot run `train.py`: no such file or directory``
/// (from the node, after queueing) although the file was right there: it is not executable
/// and not a command on PATH. The submit says so, and how to run it.
#[test]
fn submitting_a_plain_python_file_says_how_to_run_it() {
    let b = Berth::up(&[]);
    let dir = b.home.path().join("submit");
    std::fs::write(dir.join("train.py"), "print('hi')\n").unwrap();
    let o = b.cli(&["submit", "train.py"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(e.contains("not a command on PATH") && e.contains("berth submit -- python3 train.py"), "{e}");
    assert!(e.contains("#!/usr/bin/env python3") && e.contains("chmod +x train.py"), "{e}");
    let o = b.cli(&["submit", "./train.py"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("`./train.py` is not executable"), "{}", text(&o.stderr));
    assert_eq!(b.json(&["ps", "--all"]), serde_json::json!([]), "nothing was queued");
    // What the message says works.
    let id = b.submit(&["--", "python3", "train.py"]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hi\n");
}

/// Issue 41 (item 10): logged in as berth user bob from Unix user nc2, jobs ran as uid 200003
/// and could not write the submit directory; nothing said so until they failed. `submit` says
/// up front whom the job runs as, with the uid, and that it cannot write the directory.
#[test]
fn submitting_with_another_users_token_says_whom_the_job_runs_as() {
    assert_root();
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &[]);
    let token = b.create_user("bob");
    let me = UnixUser::create("t");
    let work = b.home.path().join(format!("work-{}", me.name));
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(me.uid), Some(me.gid)).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = me
        .command(&work, &["submit", "--", "true"])
        .env("BERTH_URL", &b.url)
        .env("BERTH_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    let who = b.cli_as(&token, &["whoami", "-o", "json"]);
    let bob_id = serde_json::from_slice::<serde_json::Value>(&who.stdout).unwrap()["id"].as_i64().unwrap();
    assert!(e.contains(&format!("runs as uid {}", 200_000 + bob_id)), "{e}");
    assert!(e.contains(&format!("not as you (`{}`, uid {})", me.name, me.uid)), "{e}");
    assert!(e.contains(&format!("it cannot write its directory {}", work.display())), "{e}");
    // Over the socket the job is theirs: nothing to say.
    let o = me.berth(&b.data.join("berth.sock"), &work, &["submit", "--", "true"], &[]);
    assert!(o.status.success() && !text(&o.stderr).contains("note:"), "{}", text(&o.stderr));
}

/// Issue 41: shell completion completed flags but not job ids (kubectl completes pods).
#[test]
fn completion_offers_the_users_job_ids_with_name_and_state() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--name", "train", "--", "true"]);
    b.wait_state(id, "SUCCEEDED");
    let o = support::base_cmd(b.home.path())
        .args(["--", "berth", "logs", ""])
        .env("BERTH_COMPLETE", "zsh")
        .env("_CLAP_COMPLETE_INDEX", "2")
        .env("_CLAP_IFS", "\n")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let offered = text(&o.stdout);
    assert!(offered.lines().any(|l| l == format!("{id}:train SUCCEEDED")), "{offered}");
    assert!(offered.contains("--tail"), "flags still come too: {offered}");
}
