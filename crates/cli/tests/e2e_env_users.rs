//! A Python environment built for one user, used by the next (issue 41 item 2): root built
//! the environment of `--python 3.11 --requirements requirements.txt`; another user's job
//! reused it, was told "ready", and failed `python: Permission denied` (exit 127), or with
//! their own venv active silently ran their python and their `six`. Through the real binary,
//! real Unix users and a real uv.
//!
//! Needs root (Unix users), uv (`BERTH_TEST_UV`) and PyPI (`six`), like e2e_env.rs.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use support::Berth;
use support::pyenv::{key_in, python_version, shared_uv, submit, user_dir};
use support::users::UnixUser;

/// Root builds the environment of `six==1.16.0`; a user whose own venv is active at submit
/// (its `bin` first on PATH, `VIRTUAL_ENV`, and `PYTHONPATH` at its site-packages, where a
/// `six` 1.17.0 is) submits the same: the job runs the environment's python and its pinned
/// `six`, and none of the venv's PATH; the setup log says what gave way.
#[test]
fn a_reused_environments_python_and_pins_come_before_the_submitters_venv() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let b = Berth::up(&["--uv", uv.to_str().unwrap()]);
    let py = python_version();
    let check = concat!(
        "import os, shutil, six, sys; ",
        "print(six.__version__, sys.prefix, shutil.which('python'), os.getuid(), os.environ.get('VIRTUAL_ENV'), ",
        "[p for p in os.environ['PATH'].split(':') if p.endswith('/venv/bin')])",
    );
    std::fs::write(b.home.path().join("submit/req.txt"), "six==1.16.0\n").unwrap();
    let args = ["--python", &py, "--requirements", "req.txt", "--", "python", "-c", check];
    let root_job = b.submit(&args);
    b.wait_state(root_job, "SUCCEEDED");
    let key = key_in(&b.ok(&["logs", "--setup", &root_job.to_string()]));
    let env = b.data.join("agent/envs").join(&key);

    // The user's own venv, with another six where its PYTHONPATH points.
    let user = UnixUser::create("va");
    let dir = user_dir(&user, shared.path(), &user.name);
    std::fs::write(dir.join("req.txt"), "six==1.16.0\n").unwrap();
    let venv = dir.join("venv");
    let made = Command::new(&uv).args(["venv", "-q", "--python", "/usr/bin/python3"]).arg(&venv).status().unwrap();
    assert!(made.success(), "uv venv");
    let site = venv.join(format!("lib/python{py}/site-packages"));
    std::fs::write(site.join("six.py"), "__version__ = '1.17.0'\n").unwrap();
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", venv.display());
    let active =
        [("PATH", path.as_str()), ("VIRTUAL_ENV", venv.to_str().unwrap()), ("PYTHONPATH", site.to_str().unwrap())];
    let id = submit(&user, &b.data.join("berth.sock"), &dir, &args, &active);
    let d = b.wait_state(id, "SUCCEEDED");
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(setup.contains(&format!("reused environment {key}")), "{setup}\n{d:#}");
    let out = b.ok(&["logs", &id.to_string()]);
    let e = env.display();
    let want = format!("1.16.0 {e} {e}/bin/python {} {e} []", user.uid);
    assert_eq!(out.trim(), want, "the job ran the submitter's python or packages; setup log:\n{setup}");
    assert!(setup.contains(&format!("VIRTUAL_ENV `{}` gives way", venv.display())), "{setup}");
    assert!(setup.contains(&format!("`{}` dropped", site.display())), "{setup}");
}

/// The cached environment's python is one the next user cannot run (here its `bin` is closed
/// to them; a mode changed since the build, an ACL or a library only root reads do the same):
/// their job fails in its setup saying so and how to fix it, never "ready" then exit 127. Once
/// the environment is usable again, the same job runs.
#[test]
fn a_cached_environment_its_user_cannot_run_fails_the_job_before_ready_with_the_fix() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let b = Berth::up(&["--uv", uv.to_str().unwrap()]);
    let py = python_version();
    let args = ["--python", &py, "--", "python", "-c", "import os; print(os.getuid())"];
    let root_job = b.submit(&args);
    b.wait_state(root_job, "SUCCEEDED");
    let key = key_in(&b.ok(&["logs", "--setup", &root_job.to_string()]));
    let bin = b.data.join("agent/envs").join(&key).join("bin");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o700)).unwrap();

    let user = UnixUser::create("vb");
    let dir = user_dir(&user, shared.path(), &user.name);
    let socket = b.data.join("berth.sock");
    let id = submit(&user, &socket, &dir, &args, &[]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap();
    let short = &key[..12];
    assert!(reason.starts_with(&format!("environment {short} cannot be used by user {}", user.name)), "{reason}");
    assert!(reason.contains(&format!("{}/python", bin.display())) && reason.contains("Permission denied"), "{reason}");
    let fix = format!(
        "`{}`, of the environment, is closed to them: remove this environment (`berth env rm {short}`)",
        bin.display()
    );
    assert!(reason.contains(&fix), "{reason}");
    assert_eq!(d["job"]["end_cause"], "launch_failed", "the job never ran: {d:#}");
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(!setup.contains("ready") && !setup.contains("reused environment"), "{setup}");

    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let again = submit(&user, &socket, &dir, &args, &[]);
    b.wait_state(again, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &again.to_string()]).trim(), user.uid.to_string());
}

/// The agent's uv is one only root can run (a uv in `/root/.local/bin`): a user's build
/// fails naming that uv, why, and the fix (`--uv`), not `cannot run uv ('uv'): Permission
/// denied`.
#[test]
fn a_uv_the_user_cannot_run_fails_their_build_saying_which_uv_and_the_fix() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let closed = tempfile::Builder::new().prefix("berth-closed-").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root_uv = closed.path().join("uv");
    std::fs::copy(&uv, &root_uv).unwrap();
    let b = Berth::up(&["--uv", root_uv.to_str().unwrap()]);
    let user = UnixUser::create("vc");
    let dir = user_dir(&user, shared.path(), &user.name);
    let id = submit(&user, &b.data.join("berth.sock"), &dir, &["--python", &python_version(), "--", "true"], &[]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap();
    let cause = format!("user {} cannot run uv (`{}`", user.name, root_uv.display());
    assert!(reason.starts_with(&format!("environment build failed: {cause}")), "{reason}");
    assert!(reason.contains("/usr/local/bin/uv") && reason.contains("--uv PATH"), "{reason}");
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(setup.contains(&cause) && !setup.contains("ready"), "{setup}");
}

/// Issue 41 item 2: the first Python on the agent's PATH is one only root can run (a copy in a
/// 0700 directory, as a pyenv under `/root` is). Root's job builds the environment of
/// `--python X.Y`; a Unix user's job with the same inputs reuses it and runs, because the
/// agent built it on an interpreter every user can run (not `Permission denied`, exit 127).
#[test]
fn an_environment_root_built_runs_for_every_user_who_reuses_it() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let py = python_version();
    let closed = tempfile::Builder::new().prefix("berth-closed-").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(closed.path().join("bin")).unwrap();
    let real = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let copy = closed.path().join(format!("bin/python{py}"));
    std::fs::copy(&real, &copy).unwrap();
    let path = format!("{}:{}", closed.path().join("bin").display(), std::env::var("PATH").unwrap_or_default());
    // SAFETY: nextest runs each test in a process of its own; no other thread reads PATH yet.
    unsafe { std::env::set_var("PATH", &path) };
    let b = Berth::up(&["--uv", uv.to_str().unwrap()]);
    let check = "import os, sys; print(os.getuid(), sys.prefix)";
    let root_job = b.submit(&["--python", &py, "--", "python", "-c", check]);
    b.wait_state(root_job, "SUCCEEDED");
    let setup_root = b.ok(&["logs", "--setup", &root_job.to_string()]);
    let key = key_in(&setup_root);
    assert!(!setup_root.contains(closed.path().to_str().unwrap()), "built on root's own python:\n{setup_root}");
    assert!(setup_root.contains("shared:"), "{setup_root}");

    let user = UnixUser::create("ga");
    let dir = user_dir(&user, shared.path(), &user.name);
    let id = submit(&user, &b.data.join("berth.sock"), &dir, &["--python", &py, "--", "python", "-c", check], &[]);
    let d = b.wait_state(id, "SUCCEEDED");
    let setup = b.ok(&["logs", "--setup", &id.to_string()]);
    assert!(setup.contains(&format!("reused environment {key}")), "{setup}\n{d:#}");
    let out = b.ok(&["logs", &id.to_string()]);
    assert!(out.starts_with(&format!("{} ", user.uid)) && out.contains(&key), "{out}");
}
