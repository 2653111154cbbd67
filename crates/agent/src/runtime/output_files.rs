//! A job's output files (Slurm's `--output`, `--error`, `--open-mode`; [`berth_model::output`]):
//! the kernel that runs the command writes its standard output and error there instead of to
//! its logs. Kernels that only hold their node (`launch = first`, past kernel 0) write none.
//!
//! The paths are expanded here, when the kernel starts, with the kernel's own facts: the job
//! id, its array, name and owner, this node (`%N`), and the kernel's index (`%n`, and `%t`
//! for a `launch = every` job, whose kernels are its tasks; a batch script is task 0).
//!
//! Who opens them: the job's user, never root. A process kernel's files are opened by the
//! agent before the kernel is forked, on a thread of its own that first takes the user's
//! file-system identity (`setfsuid`/`setfsgid` and the user's groups, which Linux keeps per
//! thread; the raw system calls, since the C library would apply them to every thread): the
//! kernel checks every step of the path as that user, so a symlink planted by another user
//! or a directory the user may not write gets the user's own answer, and the file is the
//! user's. The thread ends right after. Opening in the agent, in the node's own mount
//! namespace (a kernel's private `/tmp` comes later), also lets a path that cannot be opened
//! fail the kernel's start with a message that says which file and why, instead of a job that
//! runs with its output lost. Container kernels open theirs inside the container, as its
//! user, through [`WRAPPER`], since the path is the container's.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use berth_model::JobSpec;
use berth_model::output::{Context, OpenMode, Paths, job_name, resolve};
use berth_model::protocol::KernelKey;

use super::RunUser;
use crate::disk::errno_text;

/// Why a kernel's output files could not be named or opened; the text is its launch failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OutputError {
    /// A path template that does not parse (a spec that skipped validation).
    #[error(transparent)]
    Template(#[from] berth_model::SpecError),
    #[error("cannot take user {user}'s identity to open the job's output files on node {node}: {}", errno_text(source))]
    Identity { user: String, node: String, source: std::io::Error },
    #[error("{}", cannot_open(path, source, as_user.as_deref(), node))]
    Open { path: PathBuf, node: String, as_user: Option<String>, source: std::io::Error },
    #[error("cannot share the job's output file: {0}")]
    Share(std::io::Error),
}

/// The paths kernel `key` of `spec` writes on `node` (not yet joined to its working
/// directory); `None` when it writes to its logs. `env` holds the manager's variables
/// (`BERTH_USER`, the job's owner).
pub(crate) fn paths(
    key: &KernelKey,
    spec: &JobSpec,
    env: &BTreeMap<String, String>,
    node: &str,
) -> Result<Option<Paths>, OutputError> {
    if !spec.output.has_files() || spec.holds_only(key.index) {
        return Ok(None);
    }
    let name = job_name(spec.name.as_deref(), key.job_id);
    let user = env.get("BERTH_USER").map(String::as_str).unwrap_or_default();
    let task = if spec.launch == berth_model::Launch::First { 0 } else { key.index };
    let array = spec.array_task.map(|t| (t.array_id, t.index));
    let c = Context { job_id: key.job_id, array, name: &name, user, node, node_index: key.index, task, step: None };
    Ok(Some(spec.output.expand(&c)?))
}

/// The opened files: `None` for a stream that goes to its log. Both are the same open file
/// when stderr goes with stdout.
pub(crate) struct Opened {
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

/// Opens `paths` (relative ones under `workdir`) as `user` would, `mode` deciding whether they
/// are emptied; the error is the kernel's launch failure.
pub(crate) fn open(
    paths: &Paths,
    mode: OpenMode,
    workdir: &Path,
    user: &RunUser,
    node: &str,
) -> Result<Opened, OutputError> {
    let out = paths.stdout.as_deref().map(|p| resolve(p, workdir));
    let err = paths.stderr.as_deref().map(|p| resolve(p, workdir));
    let shared = out.is_some() && out == err;
    let mut wanted: Vec<PathBuf> = out.iter().cloned().collect();
    if !shared {
        wanted.extend(err.iter().cloned());
    }
    let switch = user.switch.then(|| (user.uid, user.gid, user.groups.clone()));
    let opened = open_as(switch, wanted.clone(), mode).map_err(|source| OutputError::Identity {
        user: user.name.clone(),
        node: node.to_string(),
        source,
    })?;
    let mut files = Vec::new();
    for (path, r) in wanted.into_iter().zip(opened) {
        files.push(r.map_err(|source| OutputError::Open {
            path,
            node: node.to_string(),
            as_user: user.switch.then(|| user.name.clone()),
            source,
        })?);
    }
    let mut files = files.into_iter();
    let stdout = out.as_ref().and_then(|_| files.next());
    let stderr = match (&stdout, shared) {
        (Some(f), true) => Some(f.try_clone().map_err(OutputError::Share)?),
        _ => err.as_ref().and_then(|_| files.next()),
    };
    Ok(Opened { stdout, stderr })
}

/// Why `path` could not be opened, with what to do about it.
fn cannot_open(path: &Path, e: &std::io::Error, as_user: Option<&str>, node: &str) -> String {
    let as_user = as_user.map(|u| format!(" as user {u}")).unwrap_or_default();
    let hint = match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            ": create the directory `{}` first (berth creates none, as Slurm does not)",
            path.parent().unwrap_or(Path::new("/")).display()
        ),
        std::io::ErrorKind::PermissionDenied => " (the job's user must be able to write there)".to_string(),
        _ => String::new(),
    };
    format!("cannot open the job's output file `{}` on node {node}{as_user}: {}{hint}", path.display(), errno_text(e))
}

/// Opens each of `paths` for writing (created 0644, emptied or appended to per `mode`) on a
/// thread that first becomes `switch` (uid, gid, groups) for file access; the outer error is
/// the switch's.
fn open_as(
    switch: Option<(u32, u32, Vec<u32>)>,
    paths: Vec<PathBuf>,
    mode: OpenMode,
) -> std::io::Result<Vec<std::io::Result<File>>> {
    let switching = switch.is_some();
    let open = move || -> std::io::Result<Vec<std::io::Result<File>>> {
        if let Some((uid, gid, groups)) = &switch {
            become_for_files(*uid, *gid, groups)?;
        }
        Ok(paths
            .iter()
            .map(|p| {
                let mut o = std::fs::OpenOptions::new();
                // Non-blocking for the open only: a FIFO nobody reads fails (ENXIO) instead of
                // holding the agent up; never the controlling terminal of anyone.
                o.write(true).create(true).mode(0o644).custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK);
                match mode {
                    OpenMode::Truncate => o.truncate(true),
                    OpenMode::Append => o.append(true),
                };
                let f = o.open(p)?;
                let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
                // SAFETY: fcntl on a descriptor this function owns.
                unsafe {
                    let flags = libc::fcntl(fd, libc::F_GETFL);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(f)
            })
            .collect())
    };
    if !switching {
        return open();
    }
    // A thread of its own: its identity changes and it ends, no other code ever runs on it.
    std::thread::Builder::new()
        .name("output-files".into())
        .spawn(open)?
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the thread opening the output files panicked")))
}

/// Gives the calling thread (only it) the file-system identity of `uid`/`gid` with `groups`:
/// from then on, the kernel checks its file accesses as that user's (`setfsuid` drops root's
/// file capabilities), and files it creates are the user's.
fn become_for_files(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    let groups: Vec<libc::gid_t> = if groups.is_empty() { vec![gid] } else { groups.to_vec() };
    // SAFETY: raw system calls on this thread's credentials; `groups` outlives the call.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
        // Both calls return the previous id, never an error: ask again with an invalid id,
        // which changes nothing and returns the current one.
        let fsgid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
        let fsuid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
        if (fsuid, fsgid) != (uid, gid) {
            return Err(std::io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    Ok(())
}

/// The entry point of a container kernel with output files, in the container as its user:
/// `sh -c WRAPPER berth-output STDOUT STDERR MODE COMMAND...` checks that each file opens
/// (saying which and why on stderr, into the kernel's log, and exiting 1 when one does not),
/// redirects, and runs the command. STDOUT or STDERR empty: that stream is left alone; STDERR
/// equal to STDOUT: both in one file.
pub(crate) const WRAPPER: &str = r#"o=$1 e=$2 m=$3; shift 3
for f in "$o" "$e"; do
  if [ -n "$f" ] && ! r=$( { true >>"$f"; } 2>&1 ); then
    printf 'berth: cannot open the job'"'"'s output file %s: %s\n' "$f" "${r##*: }" >&2; exit 1
  fi
done
if [ "$m" = append ]; then
  if [ -n "$o" ]; then exec >>"$o"; fi
  if [ -n "$e" ] && [ "$e" != "$o" ]; then exec 2>>"$e"; elif [ -n "$e" ]; then exec 2>&1; fi
else
  if [ -n "$o" ]; then exec >"$o"; fi
  if [ -n "$e" ] && [ "$e" != "$o" ]; then exec 2>"$e"; elif [ -n "$e" ]; then exec 2>&1; fi
fi
exec "$@""#;

/// The entrypoint running [`WRAPPER`] for `paths`; the command (the image's own entrypoint,
/// then the job's command) follows it.
pub(crate) fn wrapper_entrypoint(paths: &Paths, mode: OpenMode) -> Vec<String> {
    let p = |p: &Option<String>| p.clone().unwrap_or_default();
    ["/bin/sh", "-c", WRAPPER, "berth-output"]
        .into_iter()
        .map(str::to_string)
        .chain([p(&paths.stdout), p(&paths.stderr), mode.as_str().to_string()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn me() -> RunUser {
        RunUser { name: "me".into(), uid: 0, gid: 0, home: "/".into(), switch: false, groups: vec![] }
    }

    fn key(index: u32) -> KernelKey {
        KernelKey { job_id: 12, attempt: 1, index }
    }

    #[test]
    fn paths_use_the_kernels_facts() {
        let env: BTreeMap<String, String> = [("BERTH_USER".to_string(), "alice".to_string())].into();
        let mut spec = JobSpec::command(["x"]);
        assert_eq!(paths(&key(0), &spec, &env, "n1").unwrap(), None, "no files: the logs");
        spec.name = Some("train".into());
        spec.output.stdout = Some("%x-%j-%u-%N-%t.out".into());
        let p = paths(&key(0), &spec, &env, "n1.lab").unwrap().unwrap();
        assert_eq!(p.stdout.as_deref(), Some("train-12-alice-n1-0.out"));
        assert_eq!(p.stderr, p.stdout, "stderr goes with stdout");
        spec.nodes = 2;
        assert_eq!(
            paths(&key(1), &spec, &env, "n2").unwrap().unwrap().stdout.as_deref(),
            Some("train-12-alice-n2-1.out")
        );
        spec.launch = berth_model::Launch::First;
        assert_eq!(paths(&key(1), &spec, &env, "n2").unwrap(), None, "a holding kernel writes nothing");
        spec.array_task = Some(berth_model::ArrayTask { array_id: 10, index: 2, min: 0, max: 2, count: 3 });
        spec.output.stdout = Some("%A_%a.out".into());
        assert_eq!(paths(&key(0), &spec, &env, "n1").unwrap().unwrap().stdout.as_deref(), Some("10_2.out"));
    }

    #[test]
    fn files_open_truncated_or_appended_and_shared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("o"), "old\n").unwrap();
        let both = Paths { stdout: Some("o".into()), stderr: Some("o".into()) };
        let f = open(&both, OpenMode::Append, dir.path(), &me(), "n1").unwrap();
        f.stdout.unwrap().write_all(b"out\n").unwrap();
        f.stderr.unwrap().write_all(b"err\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("o")).unwrap(), "old\nout\nerr\n");
        let f = open(&both, OpenMode::Truncate, dir.path(), &me(), "n1").unwrap();
        f.stdout.unwrap().write_all(b"new\n").unwrap();
        f.stderr.unwrap().write_all(b"e\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("o")).unwrap(), "new\ne\n", "one file, one offset");
        let err_only = Paths { stdout: None, stderr: Some(dir.path().join("e").display().to_string()) };
        let f = open(&err_only, OpenMode::Truncate, Path::new("/nonexistent"), &me(), "n1").unwrap();
        assert!(f.stdout.is_none() && f.stderr.is_some());
        let missing = Paths { stdout: Some("no/such/dir/o".into()), stderr: None };
        let e = open(&missing, OpenMode::Truncate, dir.path(), &me(), "n1").err().unwrap().to_string();
        assert!(e.starts_with("cannot open the job's output file `") && e.contains("no/such/dir/o` on node n1"), "{e}");
        assert!(e.contains("no such file or directory") && e.contains("create the directory"), "{e}");
        // A FIFO nobody reads fails at once instead of blocking the agent; the file it gets
        // otherwise blocks as usual.
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let fifo = Paths { stdout: Some("fifo".into()), stderr: Some("fifo".into()) };
        let e = open(&fifo, OpenMode::Truncate, dir.path(), &me(), "n1").err().unwrap().to_string();
        assert!(e.contains("no such device or address"), "{e}");
        let f = open(&both, OpenMode::Append, dir.path(), &me(), "n1").unwrap().stdout.unwrap();
        let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
    }

    /// As root: the file is the user's, and a directory the user may not write is refused
    /// even though root could.
    #[test]
    fn files_are_opened_as_the_user() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED: files_are_opened_as_the_user: needs root");
            return;
        }
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let user = RunUser { name: "u".into(), uid: 54321, gid: 54322, home: "/".into(), switch: true, groups: vec![] };
        let p = Paths { stdout: Some("o".into()), stderr: Some("e".into()) };
        let f = open(&p, OpenMode::Truncate, dir.path(), &user, "n1").unwrap();
        assert!(f.stdout.is_some() && f.stderr.is_some());
        let m = std::fs::metadata(dir.path().join("o")).unwrap();
        assert_eq!((m.uid(), m.gid()), (54321, 54322));
        assert!(m.mode() & 0o600 == 0o600 && m.mode() & 0o033 == 0, "{:o}", m.mode());
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = Paths { stdout: Some("closed/o".into()), stderr: Some("closed/o".into()) };
        let e = open(&p, OpenMode::Truncate, dir.path(), &user, "n1").err().unwrap().to_string();
        assert!(e.contains("as user u: permission denied"), "{e}");
        // The agent's own threads are still root.
        assert!(std::fs::File::create(closed.join("root")).is_ok());
    }

    fn wrapped(dir: &Path, out: &str, err: &str, mode: OpenMode, cmd: &str) -> std::process::Output {
        let paths = Paths {
            stdout: (!out.is_empty()).then(|| out.to_string()),
            stderr: (!err.is_empty()).then(|| err.to_string()),
        };
        let argv = wrapper_entrypoint(&paths, mode);
        std::process::Command::new(&argv[0]).args(&argv[1..]).args(["sh", "-c", cmd]).current_dir(dir).output().unwrap()
    }

    #[test]
    fn the_container_wrapper_redirects_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let read = |n: &str| {
            let mut s = String::new();
            std::fs::File::open(dir.path().join(n)).unwrap().read_to_string(&mut s).unwrap();
            s
        };
        std::fs::write(dir.path().join("o"), "old\n").unwrap();
        let o = wrapped(dir.path(), "o", "o", OpenMode::Truncate, "echo out; echo err >&2");
        assert!(o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(), "{o:?}");
        let o = wrapped(dir.path(), "o", "o", OpenMode::Append, "echo more; echo err2 >&2; exit 3");
        assert_eq!((o.status.code(), read("o")), (Some(3), "out\nerr\nmore\nerr2\n".to_string()), "exit code kept");
        let o = wrapped(dir.path(), "o", "e", OpenMode::Truncate, "echo x; echo y >&2");
        assert!(o.status.success());
        assert_eq!((read("o"), read("e")), ("x\n".to_string(), "y\n".to_string()));
        let o = wrapped(dir.path(), "", "e", OpenMode::Append, "echo x; echo z >&2");
        assert_eq!((o.stdout, read("e")), (b"x\n".to_vec(), "y\nz\n".to_string()), "stdout left alone");
        let o = wrapped(dir.path(), "no/dir/o", "", OpenMode::Truncate, "echo never");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr.starts_with("berth: cannot open the job's output file no/dir/o: "), "{stderr}");
        assert!(o.stdout.is_empty(), "the command did not run");
    }
}
