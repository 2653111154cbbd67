//! Whether a kernel's user can run its environment, checked before the environment is
//! declared ready (issue 41 item 2: a reused environment's `bin/python` linked into
//! `/root/.pyenv`; the setup log said "ready" and the job failed `python: Permission denied`,
//! exit 127, or silently ran another python found later on its PATH).
//!
//! The interpreter was chosen for the user by its permission bits ([`super::python`]), but
//! what decides is the kernel: ACLs, a `noexec` mount, a shared library only root can read, a
//! mode changed since the build. So the environment's own python is run, as the kernel's user,
//! with nothing to do (`python -I -c ''`: it starts, reads its `pyvenv.cfg`, its standard
//! library and its site-packages): some milliseconds, once per kernel.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::build::run_as;
use super::python::{Who, first_closed};
use super::{EnvError, short};
use crate::runtime::RunUser;

/// How long the interpreter may take to start (a cold network file system).
const START_WITHIN: Duration = Duration::from_secs(60);

/// Runs `<env>/bin/python` as `user`; why it does not run, with the fix, if so.
pub(super) async fn usable_by(env: &Path, key: &str, user: &RunUser) -> Result<(), EnvError> {
    let python = env.join("bin/python");
    let mut cmd = tokio::process::Command::new(&python);
    cmd.args(["-I", "-c", ""])
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    run_as(&mut cmd, user);
    let why = match cmd.spawn() {
        Err(e) => e.to_string(),
        Ok(mut child) => {
            let mut err = String::new();
            let mut stderr = child.stderr.take().expect("piped");
            let ran = tokio::time::timeout(START_WITHIN, async {
                let _ = stderr.read_to_string(&mut err).await;
                child.wait().await
            })
            .await;
            match ran {
                Ok(Ok(s)) if s.success() => return Ok(()),
                Ok(Ok(s)) => {
                    let err = err.split_whitespace().collect::<Vec<_>>().join(" ");
                    let err: String = err.chars().take(500).collect();
                    format!("it exits with {s}: {err}")
                }
                Ok(Err(e)) => format!("cannot wait for it: {e}"),
                Err(_) => format!("it did not finish starting within {}s", START_WITHIN.as_secs()),
            }
        }
    };
    Err(EnvError::Unusable(unusable(env, &python, key, user, &why)))
}

/// The reason and the fix, for the job's reason and the setup log. The fix depends on what
/// is closed to the user, as far as permission bits tell: the environment's own files (remove
/// it, the next job builds it anew), or the interpreter it links to (open it, or give the node
/// one every user can run); else (an ACL, a `noexec` mount, a library) both.
fn unusable(env: &Path, python: &Path, key: &str, user: &RunUser, why: &str) -> String {
    let target = std::fs::canonicalize(python).ok().filter(|t| t != python);
    let link = target.as_ref().map(|t| format!(" (a link to `{}`)", t.display())).unwrap_or_default();
    let interpreter = target.as_deref().unwrap_or(python);
    let who = Who::of(user);
    let rm = format!("remove this environment (`berth env rm {}`) so that the next job builds it anew", short(key));
    let open = format!("make `{}` and every directory above it runnable by them", interpreter.display());
    let fix = match (first_closed(python, &who, 0o1), first_closed(interpreter, &who, 0o1)) {
        (Some(closed), _) if closed.starts_with(env) => {
            format!("`{}`, of the environment, is closed to them: {rm}", closed.display())
        }
        (_, Some(closed)) => {
            format!("`{}` is closed to them: {open}, or install a python every user can run and {rm}", closed.display())
        }
        _ => format!("{open}, or install a python every user can run and {rm}"),
    };
    format!(
        "environment {} cannot be used by user {} (uid {}): `{}`{link} does not run as them: {why}; {fix}",
        short(key),
        user.name,
        user.uid,
        python.display(),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn me() -> RunUser {
        RunUser { name: "me".into(), uid: 0, gid: 0, home: String::new(), switch: false, groups: vec![] }
    }

    #[tokio::test]
    async fn an_environment_whose_python_does_not_run_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("env");
        std::fs::create_dir_all(env.join("bin")).unwrap();
        // No python at all: the reason names it and says how to fix it.
        let e = usable_by(&env, &"ab".repeat(32), &me()).await.unwrap_err().to_string();
        assert!(e.starts_with("environment abababababab cannot be used by user me (uid 0): "), "{e}");
        assert!(e.contains("bin/python` does not run as them: No such file") && e.contains("berth env rm"), "{e}");
        // One that fails: its own words.
        std::fs::write(env.join("bin/python"), "#!/bin/sh\necho 'Fatal Python error: no encodings' >&2\nexit 1\n")
            .unwrap();
        std::fs::set_permissions(env.join("bin/python"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = usable_by(&env, &"ab".repeat(32), &me()).await.unwrap_err().to_string();
        assert!(e.contains("exit status: 1: Fatal Python error: no encodings"), "{e}");
        // A link to one that runs: ready.
        std::fs::remove_file(env.join("bin/python")).unwrap();
        std::os::unix::fs::symlink("/bin/true", env.join("bin/python")).unwrap();
        usable_by(&env, &"ab".repeat(32), &me()).await.unwrap();
    }

    #[test]
    fn the_fix_depends_on_what_is_closed_to_the_user() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (env, closed) = (dir.path().join("env"), dir.path().join("root-pyenv"));
        std::fs::create_dir_all(env.join("bin")).unwrap();
        std::fs::create_dir_all(&closed).unwrap();
        std::fs::write(closed.join("python3"), b"").unwrap();
        std::fs::set_permissions(closed.join("python3"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let python = env.join("bin/python");
        std::os::unix::fs::symlink(closed.join("python3"), &python).unwrap();
        let u = RunUser { name: "u".into(), uid: 4242, gid: 4242, home: String::new(), switch: true, groups: vec![] };
        let key = "cd".repeat(32);
        // the interpreter it links to: open it, or another python and a rebuild
        let e = unusable(&env, &python, &key, &u, "Permission denied");
        let want = format!("`{}` is closed to them: make `{}/python3` and every", closed.display(), closed.display());
        assert!(e.contains(&want) && e.contains("berth env rm cdcdcdcdcdcd"), "{e}");
        // the environment's own files: a rebuild
        std::fs::set_permissions(env.join("bin"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = unusable(&env, &python, &key, &u, "Permission denied");
        let want = format!("`{}/bin`, of the environment, is closed to them: remove this environment", env.display());
        assert!(e.contains(&want), "{e}");
    }
}
