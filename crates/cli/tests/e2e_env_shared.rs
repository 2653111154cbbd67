//! Who decides what goes into a shared Python environment (issue 40 item 2): the node's admin,
//! never one of its users. Two real Unix users submit over the manager's socket; one of them
//! has a uv configuration that points at a trojan wheel. Through the real binary and uv.
//!
//! Needs root (Unix users), uv (`BERTH_TEST_UV`) and PyPI (the genuine `six`), like
//! e2e_env.rs; the trojan and the admin's wheels are made here.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::pyenv::{key_in, python_version, shared_uv, submit};
use support::users::UnixUser;
use support::{Berth, text};

/// Writes a pure-python wheel `<dir>/<name>-<version>-py3-none-any.whl` whose module is
/// `source` (Python's zipfile: a wheel is a zip with a dist-info).
fn wheel(dir: &Path, name: &str, version: &str, source: &str) {
    let script = r#"
import base64, hashlib, sys, zipfile
out, name, version, source = sys.argv[1:5]
di = f"{name}-{version}.dist-info"
files = {
    f"{name}.py": source,
    f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: berth-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, body in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(body.encode())}")
record.append(f"{di}/RECORD,,")
files[f"{di}/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(f"{out}/{name}-{version}-py3-none-any.whl", "w") as z:
    for path, body in files.items():
        z.writestr(path, body)
"#;
    let ok =
        Command::new("/usr/bin/python3").args(["-c", script, dir.to_str().unwrap(), name, version, source]).status();
    assert!(ok.unwrap().success(), "cannot write the {name} wheel");
}

/// A Unix user's home as the system knows it (`useradd` made none), created, theirs, removed
/// when dropped.
struct Home(PathBuf);

impl Home {
    fn create(user: &UnixUser) -> Home {
        let o = Command::new("getent").args(["passwd", &user.name]).output().unwrap();
        let home = PathBuf::from(text(&o.stdout).trim().split(':').nth(5).expect("a passwd line"));
        assert!(home.starts_with("/home") && !home.exists(), "{}", home.display());
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid)).unwrap();
        Home(home)
    }

    /// Writes `rel` under the home (with its directories), owned by `user`.
    fn write(&self, user: &UnixUser, rel: &str, body: &str) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        for p in path.ancestors().take_while(|p| p.starts_with(&self.0)) {
            std::os::unix::fs::chown(p, Some(user.uid), Some(user.gid)).unwrap();
        }
        path
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// User B's `~/.config/uv/uv.toml` says: no index, take wheels from B's directory, where a
/// trojan `six` 1.16.0 waits. B's job builds the shared environment of `six==1.16.0`; A's job
/// with the same inputs reuses it. Neither may import B's trojan: a shared build reads no
/// user's uv configuration. (Before the fix A printed `TROJAN`.)
#[test]
fn a_users_uv_config_never_reaches_a_shared_environment() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let b = Berth::up(&["--uv", uv.to_str().unwrap()]);
    let socket = b.data.join("berth.sock");
    let (atka, atkb) = (UnixUser::create("ea"), UnixUser::create("eb"));

    // B's trap: the trojan wheel and a uv.toml that makes every build of B's take it.
    let home_b = Home::create(&atkb);
    let trojan =
        "__version__ = '1.16.0'\nimport os\nprint('TROJAN six (planted by atkb) imported by uid', os.getuid())\n";
    let wheels = home_b.0.join("wheels");
    home_b.write(&atkb, "wheels/.keep", "");
    wheel(&wheels, "six", "1.16.0", trojan);
    std::os::unix::fs::chown(wheels.join("six-1.16.0-py3-none-any.whl"), Some(atkb.uid), Some(atkb.gid)).unwrap();
    let toml = format!("[pip]\nno-index = true\nfind-links = [\"{}\"]\n", wheels.display());
    home_b.write(&atkb, ".config/uv/uv.toml", &toml);

    // Each user submits from a directory of theirs holding the same requirements.
    let py = python_version();
    let check = "import os, six; print('six', six.__version__, six.__file__, os.getuid())";
    let mut jobs = Vec::new();
    for user in [&atkb, &atka] {
        let dir = shared.path().join(&user.name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("req.txt"), "six==1.16.0\n").unwrap();
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
        let id = submit(
            user,
            &socket,
            &dir,
            &["--python", &py, "--requirements", "req.txt", "--", "python", "-c", check],
            &[],
        );
        let d = b.wait_state(id, "SUCCEEDED");
        let out = b.ok(&["logs", &id.to_string()]);
        let setup = b.ok(&["logs", "--setup", &id.to_string()]);
        assert!(!out.contains("TROJAN"), "{}'s job ran B's trojan six:\n{out}\nsetup:\n{setup}\n{d:#}", user.name);
        assert!(out.starts_with("six 1.16.0 ") && out.contains("/envs/"), "{}: {out}", user.name);
        assert!(out.trim().ends_with(&format!(" {}", user.uid)), "{}: {out}", user.name);
        jobs.push((key_in(&setup), setup));
    }
    // One shared environment, built by B from the node's settings only, reused by A.
    let ((key_b, setup_b), (key_a, setup_a)) = (&jobs[0], &jobs[1]);
    assert!(setup_b.contains(&format!("built environment {key_b}")), "{setup_b}");
    assert!(setup_b.contains("shared:"), "{setup_b}");
    assert_eq!(key_a, key_b, "A did not reuse B's environment:\n{setup_a}");
    assert!(setup_a.contains(&format!("reused environment {key_a}")), "{setup_a}");

    // What it was built from is recorded, and what it holds verifiably: six's RECORD hash.
    let env = b.data.join("agent/envs").join(key_a);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.join(".berth/meta.json")).unwrap()).unwrap();
    assert!(meta["private"].is_null(), "{meta:#}");
    assert!(meta["inputs"]["interpreter"]["path"].as_str().unwrap().starts_with('/'), "{meta:#}");
    let six = meta["installed"].as_array().unwrap().iter().find(|p| p["name"] == "six").expect("six recorded").clone();
    assert_eq!(six["version"], "1.16.0", "{meta:#}");
    let o = Command::new("sha256sum").arg(env.join(six["record"].as_str().unwrap())).output().unwrap();
    assert!(text(&o.stdout).starts_with(six["record_sha256"].as_str().unwrap()), "{meta:#}");
}

/// A job that brings its own build settings (`UV_*` in its environment) builds with them, and
/// its user's uv configuration, in an environment private to its user: here B asks for B's
/// wheels on purpose and gets the trojan, A with the same requirements gets its own build.
/// The admin's index settings (`--uv-find-links`, `--uv-no-index`) are what shared builds use:
/// no network here.
#[test]
fn a_jobs_own_uv_settings_make_a_private_environment_and_the_admins_index_a_shared_one() {
    let shared = support::shared_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(uv) = shared_uv(shared.path()) else { return };
    let admin_wheels = shared.path().join("wheels");
    std::fs::create_dir(&admin_wheels).unwrap();
    wheel(&admin_wheels, "berthdemo", "1.0", "KIND = 'genuine'\n");
    std::fs::set_permissions(&admin_wheels, std::fs::Permissions::from_mode(0o755)).unwrap();
    let links = admin_wheels.to_str().unwrap();
    let b = Berth::up(&["--uv", uv.to_str().unwrap(), "--uv-find-links", links, "--uv-no-index"]);
    let socket = b.data.join("berth.sock");
    let (atka, atkb) = (UnixUser::create("fa"), UnixUser::create("fb"));
    let home_b = Home::create(&atkb);
    home_b.write(&atkb, "wheels/.keep", "");
    let own_wheels = home_b.0.join("wheels");
    wheel(&own_wheels, "berthdemo", "1.0", "KIND = 'own'\n");
    std::os::unix::fs::chown(own_wheels.join("berthdemo-1.0-py3-none-any.whl"), Some(atkb.uid), Some(atkb.gid))
        .unwrap();

    let py = python_version();
    let check = "import berthdemo; print(berthdemo.KIND)";
    let run = |user: &UnixUser, env: &[(&str, &str)]| {
        let dir = shared.path().join(format!("{}-{}", user.name, env.len()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("req.txt"), "berthdemo==1.0\n").unwrap();
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
        let args = ["submit", "-o", "json", "--python", &py, "--requirements", "req.txt", "--", "python", "-c", check];
        let o = user.berth(&socket, &dir, &args, env);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
        b.wait_state(id, "SUCCEEDED");
        let setup = b.ok(&["logs", "--setup", &id.to_string()]);
        (b.ok(&["logs", &id.to_string()]).trim().to_string(), key_in(&setup), setup)
    };
    let own = own_wheels.to_str().unwrap();
    let (kind_b, key_b, setup_b) = run(&atkb, &[("UV_FIND_LINKS", own)]);
    assert_eq!(kind_b, "own", "{setup_b}");
    assert!(
        setup_b.contains(&format!("private to user {}", atkb.name)) && setup_b.contains("UV_FIND_LINKS"),
        "{setup_b}"
    );
    let (kind_a, key_a, setup_a) = run(&atka, &[]);
    assert_eq!(kind_a, "genuine", "{setup_a}");
    assert_ne!(key_a, key_b);
    assert!(setup_a.contains(&format!("built environment {key_a}")) && setup_a.contains("shared:"), "{setup_a}");
    // B without settings shares A's environment: the admin's.
    let (kind_b2, key_b2, setup_b2) = run(&atkb, &[]);
    assert_eq!((kind_b2.as_str(), key_b2.as_str()), ("genuine", key_a.as_str()), "{setup_b2}");
}
