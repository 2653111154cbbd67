//! Python environments as several Unix users see them (e2e_env_shared.rs, e2e_env_users.rs):
//! a uv every user can run, the OS python's version, submitting as a user, the key a setup
//! log names. Needs root and `BERTH_TEST_UV` (scripts/test.sh installs uv from PyPI).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::text;
use super::users::UnixUser;

/// uv copied into `dir`, where every user can run it, or `None` after printing why the test
/// is skipped.
pub fn shared_uv(dir: &Path) -> Option<PathBuf> {
    let uv = std::env::var("BERTH_TEST_UV").ok().filter(|u| !u.is_empty());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let Some(uv) = uv.filter(|_| root) else {
        println!("SKIPPED: needs root and BERTH_TEST_UV (scripts/test.sh installs uv from PyPI)");
        return None;
    };
    let to = dir.join("uv");
    std::fs::copy(uv, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(to)
}

/// `3.11`: the version of the OS's python3, which every user can run.
pub fn python_version() -> String {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
        .output()
        .expect("/usr/bin/python3 runs");
    text(&out.stdout).trim().to_string()
}

/// `berth submit -o json <args>` as `user` from `dir` with `env` (exported, as `sbatch` does);
/// the job's id.
pub fn submit(user: &UnixUser, socket: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> i64 {
    let all: Vec<&str> = ["submit", "-o", "json"].iter().copied().chain(args.iter().copied()).collect();
    let o = user.berth(socket, dir, &all, env);
    assert!(o.status.success(), "submit as {}: {}", user.name, text(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap()
}

/// A directory of `user`'s under `parent`, named `name`.
pub fn user_dir(user: &UnixUser, parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
    dir
}

/// The environment key a setup log names (`environment <key>: python ...`).
pub fn key_in(setup_log: &str) -> String {
    let first = setup_log.lines().find(|l| l.starts_with("environment ")).unwrap_or_default();
    let key = first.strip_prefix("environment ").and_then(|r| r.split(':').next()).unwrap_or_default();
    assert_eq!(key.len(), 64, "no key in the setup log: {setup_log}");
    key.to_string()
}
