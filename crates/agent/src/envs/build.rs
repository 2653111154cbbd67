//! One environment build: `uv venv` then `uv pip install`, run as the kernel's user in a temp
//! dir of the cache, then sealed (root-owned, read-only) and renamed into place.
//!
//! Why as the kernel's user: installing runs packages' build scripts, arbitrary code that must
//! not run as root. Why sealed: the environment outlives the kernel and other users' kernels
//! reuse it, so its builder must not be able to change it afterwards. Files with several links
//! are copied first, so sealing cannot take over an inode the builder keeps elsewhere.
//!
//! `UV_PYTHON_DOWNLOADS=never`: a Python uv downloaded would live in the build user's home,
//! outside the sealed environment (its `bin/python` links to the interpreter), and nodes often
//! have no route to where uv downloads from; the node's own Pythons (`python3.11` on PATH) are
//! used instead, and a missing version fails the build with uv's message.
//!
//! What uv reads is the agent's choice ([`super::inputs`]): the interpreter as an absolute
//! path, the admin's index settings as arguments, and for a shared build no configuration
//! files (`UV_NO_CONFIG`, HOME a directory of the build) and no `UV_*`/`PIP_*` variable but
//! the agent's own fixed ones. Only a job's own settings reach uv, for a private environment.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use berth_model::environment::{EnvSpec, IndexSettings};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use super::inputs::Plan;
use super::seal::seal;
use super::{EnvCache, Meta, Status, short};
use crate::runtime::RunUser;

/// Phases a build reports: venv, resolved, downloaded, installed.
pub(crate) const PHASES: u32 = 4;

/// The most lines of uv's output kept for the setup log.
const MAX_OUTPUT_LINES: usize = 400;

/// A finished build.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub secs: f64,
    /// What uv said, for the setup logs of the kernels that waited.
    pub output: Arc<str>,
}

#[derive(Debug, Clone)]
pub(crate) enum BuildError {
    /// Nobody waits for it any more (every kernel that needed it was stopped).
    Cancelled,
    /// uv failed (or could not run): `message` is for the job's reason, `output` for the log.
    Failed { message: String, output: Arc<str> },
}

/// The phase a line of uv's output ends, if any (uv prints these without a terminal).
pub(crate) fn phase_of(line: &str) -> Option<u32> {
    let l = line.trim_start();
    if l.starts_with("Resolved ") {
        Some(2)
    } else if l.starts_with("Prepared ") || l.starts_with("Downloaded ") {
        Some(3)
    } else if l.starts_with("Installed ") || l.starts_with("Audited ") {
        Some(4)
    } else {
        None
    }
}

/// The part of uv's output that says why it failed, on one line: from its `error:` line on
/// (its causes follow it), else the last lines; whitespace collapsed, at most 2000 characters.
pub(crate) fn failure_text(output: &[String]) -> String {
    let start = output.iter().rposition(|l| l.trim_start().starts_with("error:"));
    let lines = match start {
        Some(i) => &output[i..],
        None => &output[output.len().saturating_sub(5)..],
    };
    let text = lines.iter().flat_map(|l| l.split_whitespace()).collect::<Vec<_>>().join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    match text.char_indices().nth(2000) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None if text.is_empty() => "uv failed without a message".into(),
        None => text.to_string(),
    }
}

/// Builds `spec` as environment `key`, reporting on `tx`, and ends with `Done` sent while the
/// cache's book no longer lists the build (so a kernel either subscribes before or finds the
/// environment after).
pub(crate) async fn run(cache: EnvCache, plan: Plan, spec: EnvSpec, user: RunUser, tx: Arc<watch::Sender<Status>>) {
    let started = Instant::now();
    let key = plan.key.clone();
    let tmp = cache.root.join(format!(".build-{}-{}", short(&key), rand::random::<u32>()));
    let mut output = Vec::new();
    let result = build(&cache, &tmp, &plan, &spec, &user, &tx, &mut output).await;
    let result = match result {
        Ok(()) => {
            let mut inputs = plan.inputs.clone();
            inputs.index = inputs.index.redacted();
            let meta = Meta {
                python: spec.python.clone(),
                kind: spec.kind,
                size_bytes: 0,
                inputs: Some(inputs),
                private: plan.private_why.clone(),
                installed: Vec::new(),
            };
            let env = tmp.join("env");
            match tokio::task::spawn_blocking(move || seal(&env, meta)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(failed(format!("cannot seal the environment: {e}"), &output)),
                Err(e) => Err(failed(format!("cannot seal the environment: {e}"), &output)),
            }
        }
        Err(e) => Err(e),
    };
    let output: Arc<str> = output.join("\n").into();
    let mut broken = None;
    {
        let mut book = cache.book();
        let result = result.and_then(|()| {
            // A directory of that key without a description (a copy cut short by hand, a
            // crash of an older agent) would block the rename: it goes.
            if cache.dir(&key).exists() {
                broken = cache.to_trash(&key).ok();
            }
            std::fs::rename(tmp.join("env"), cache.dir(&key))
                .map_err(|e| failed(format!("cannot move the environment into the cache: {e}"), &[]))
        });
        book.builds.remove(&key);
        let status = match result {
            Ok(()) => Ok(Built { secs: started.elapsed().as_secs_f64(), output }),
            Err(BuildError::Failed { message, .. }) => Err(BuildError::Failed { message, output }),
            Err(BuildError::Cancelled) => Err(BuildError::Cancelled),
        };
        tx.send_replace(Status::Done(status));
    }
    let cache2 = cache.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for dir in std::iter::once(&tmp).chain(&broken) {
            let _ = std::fs::remove_dir_all(dir);
        }
        cache2.evict();
    })
    .await;
}

fn failed(message: String, output: &[String]) -> BuildError {
    BuildError::Failed { message, output: output.join("\n").into() }
}

async fn build(
    cache: &EnvCache,
    tmp: &Path,
    plan: &Plan,
    spec: &EnvSpec,
    user: &RunUser,
    tx: &watch::Sender<Status>,
    output: &mut Vec<String>,
) -> Result<(), BuildError> {
    let io = |what: &str, p: &Path, e: std::io::Error| failed(format!("cannot {what} `{}`: {e}", p.display()), &[]);
    // uv runs as the kernel's user: one in root's home would fail `Permission denied`.
    if let Err(e) = super::python::uv_runnable_by(&cache.uv_program(), user) {
        return Err(failed(e.to_string(), &[]));
    }
    std::fs::create_dir(tmp).map_err(|e| io("create", tmp, e))?;
    let input = tmp.join(spec.kind.file_name());
    std::fs::write(&input, &spec.contents).map_err(|e| io("write", &input, e))?;
    // uv's own cache, one per uid: a package one user's build left there is never installed
    // into another user's environment.
    let uv_cache = cache.root.join(".uv-cache").join(user.uid.to_string());
    std::fs::create_dir_all(&uv_cache).map_err(|e| io("create", &uv_cache, e))?;
    let _ = std::fs::set_permissions(cache.root.join(".uv-cache"), std::fs::Permissions::from_mode(0o711));
    // HOME of a build that reads no user's configuration: empty, the build's own.
    let home = tmp.join("home");
    std::fs::create_dir(&home).map_err(|e| io("create", &home, e))?;
    for (p, mode) in [(tmp, 0o700), (input.as_path(), 0o600), (uv_cache.as_path(), 0o700), (home.as_path(), 0o700)] {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        if user.switch {
            std::os::unix::fs::chown(p, Some(user.uid), Some(user.gid)).map_err(|e| io("chown", p, e))?;
        }
    }
    let env = tmp.join("env");
    let env_s = env.to_string_lossy().into_owned();
    let python = plan.python.to_string_lossy().into_owned();
    let venv = ["venv", "--relocatable", "--python", python.as_str(), env_s.as_str()];
    uv(cache, tmp, &uv_cache, plan, user, &venv, tx, output).await?;
    tx.send_replace(Status::Running { done: 1, detail: Some("created the venv".into()) });
    let python = env.join("bin/python").to_string_lossy().into_owned();
    let input = input.to_string_lossy().into_owned();
    let mut install: Vec<&str> = vec!["pip", "install", "--python", python.as_str(), "-r", input.as_str()];
    let index = index_args(&cache.opts.index, &plan.inputs.user_settings);
    install.extend(index.iter().map(String::as_str));
    uv(cache, tmp, &uv_cache, plan, user, &install, tx, output).await
}

/// The admin's index settings as uv's arguments, but for those the job's own settings set
/// (a job's `UV_INDEX_URL` is its private environment's index).
fn index_args(index: &IndexSettings, job: &[(String, String)]) -> Vec<String> {
    let set = |names: &[&str]| job.iter().any(|(k, _)| names.contains(&k.as_str()));
    let mut kept = index.clone();
    if set(&["UV_INDEX_URL", "UV_DEFAULT_INDEX"]) {
        kept.index_url = None;
    }
    if set(&["UV_EXTRA_INDEX_URL", "UV_INDEX"]) {
        kept.extra_index_urls.clear();
    }
    if set(&["UV_FIND_LINKS"]) {
        kept.find_links.clear();
    }
    if set(&["UV_NO_INDEX"]) {
        kept.no_index = false;
    }
    kept.uv_args()
}

/// Runs uv with `args` as `user` in `dir`, adding its output to `output` and its phases to
/// `tx`; killed (with anything it started) when nobody waits for the build any more.
#[allow(clippy::too_many_arguments)]
async fn uv(
    cache: &EnvCache,
    dir: &Path,
    uv_cache: &Path,
    plan: &Plan,
    user: &RunUser,
    args: &[&str],
    tx: &watch::Sender<Status>,
    output: &mut Vec<String>,
) -> Result<(), BuildError> {
    let program = cache.uv_program();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args).current_dir(dir).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Proxies and CA bundles the site set for the agent reach uv: how to reach an index, not
    // which one. The agent's own UV_* and PIP_* variables do not (the key could not cover them).
    for (k, v) in std::env::vars() {
        let pass = k == "PATH"
            || k.to_ascii_lowercase().ends_with("_proxy")
            || matches!(k.as_str(), "SSL_CERT_FILE" | "SSL_CERT_DIR");
        if pass {
            cmd.env(k, v);
        }
    }
    // A job's own settings: its variables and its user's uv configuration, for its private
    // environment. Otherwise no configuration file is read, the user's or the system's.
    let own_home = dir.join("home").to_string_lossy().into_owned();
    let home = if plan.user_configured() {
        for (k, v) in &plan.inputs.user_settings {
            cmd.env(k, v);
        }
        if user.home.is_empty() { own_home } else { user.home.clone() }
    } else {
        cmd.env("UV_NO_CONFIG", "1");
        own_home
    };
    cmd.env("HOME", home)
        .env("USER", &user.name)
        .env("LANG", "C.UTF-8")
        .env("UV_CACHE_DIR", uv_cache)
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env("UV_NO_PROGRESS", "1")
        .env("NO_COLOR", "1")
        // its own group, so that a cancel kills the build scripts it started too
        .process_group(0)
        .kill_on_drop(true);
    run_as(&mut cmd, user);
    let mut child = cmd.spawn().map_err(|e| failed(super::EnvError::uv_failed(&program, e).to_string(), output))?;
    let pgid = child.id().map(|p| p as i32);
    // Whatever ends this build (a cancel, an error, the agent shutting down and dropping the
    // task) ends the whole group: build scripts must not outlive it.
    let _group = GroupGuard(pgid);
    let mut out = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut err = BufReader::new(child.stderr.take().expect("piped")).lines();
    let (mut out_open, mut err_open) = (true, true);
    let keep = |line: String, output: &mut Vec<String>| {
        if let Some(done) = phase_of(&line) {
            let detail = Some(line.trim().to_lowercase());
            tx.send_replace(Status::Running { done, detail });
        }
        if output.len() < MAX_OUTPUT_LINES {
            output.push(line);
        }
    };
    while out_open || err_open {
        tokio::select! {
            l = out.next_line(), if out_open => match l {
                Ok(Some(l)) => keep(l, output),
                _ => out_open = false,
            },
            l = err.next_line(), if err_open => match l {
                Ok(Some(l)) => keep(l, output),
                _ => err_open = false,
            },
            _ = tx.closed() => {
                kill_group(pgid);
                let _ = child.wait().await;
                return Err(BuildError::Cancelled);
            }
        }
    }
    let status = tokio::select! {
        s = child.wait() => s,
        _ = tx.closed() => {
            kill_group(pgid);
            let _ = child.wait().await;
            return Err(BuildError::Cancelled);
        }
    };
    // Whatever its build scripts left running in the group goes with it.
    kill_group(pgid);
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(failed(failure_text(output), output)),
        Err(e) => Err(failed(format!("cannot wait for uv: {e}"), output)),
    }
}

/// Makes `cmd` run as `user` (when the agent switches users: it is root).
pub(super) fn run_as(cmd: &mut tokio::process::Command, user: &RunUser) {
    if user.switch {
        let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
        // All three here, in this order: the std spawn's own uid switch comes before pre_exec
        // closures, after which setgroups is no longer allowed.
        // SAFETY: setgroups, setgid and setuid are async-signal-safe; `groups` was allocated
        // before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len() as _, groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Kills a build's process group when dropped.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

fn kill_group(pgid: Option<i32>) {
    if let Some(p) = pgid.filter(|p| *p > 0) {
        // SAFETY: a plain signal to a process group this build created.
        unsafe { libc::kill(-p, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uv_lines_give_the_phases() {
        assert_eq!(phase_of("Resolved 5 packages in 120ms"), Some(2));
        assert_eq!(phase_of("Prepared 1 package in 4ms"), Some(3));
        assert_eq!(phase_of("Installed 5 packages in 2ms"), Some(4));
        assert_eq!(phase_of("Audited 1 package in 1ms"), Some(4));
        assert_eq!(phase_of(" + six==1.16.0"), None);
        assert_eq!(phase_of("Using Python 3.11.7 environment at: env"), None);
    }

    #[test]
    fn a_failure_is_uvs_error_and_causes_on_one_line() {
        let out: Vec<String> = [
            "Using Python 3.11.7 environment at: env",
            "  × No solution found when resolving dependencies:",
            "error: No solution found when resolving dependencies",
            "  cause: Because berth-no-such-package-xyz was not found in the package registry",
            "         and you require berth-no-such-package-xyz==1.0, we can conclude ...",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            failure_text(&out),
            "No solution found when resolving dependencies cause: Because berth-no-such-package-xyz was not \
             found in the package registry and you require berth-no-such-package-xyz==1.0, we can conclude ..."
        );
        // no error line: the last lines
        let out: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
        assert_eq!(failure_text(&out), "line 5 line 6 line 7 line 8 line 9");
        assert_eq!(failure_text(&[]), "uv failed without a message");
        let long = vec![format!("error: {}", "x".repeat(5000))];
        assert_eq!(failure_text(&long).len(), 2003);
    }
}
