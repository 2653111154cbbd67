//! Output files as Slurm writes them (`#SBATCH --output`, `--error`, `--open-mode`), through
//! real scripts and `berth submit script.sh`: the script's streams in the files its patterns
//! name, one file per array task, append against truncate, the files its user's (as root, the
//! job runs as another uid), a missing directory failing the job with the reason, and an
//! unknown pattern refused at submit with the script's line.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use support::{Berth, shared_tempdir, text};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A directory the job's user may create files in (jobs run as another uid under root).
fn open_dir() -> tempfile::TempDir {
    let dir = shared_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Writes the script `name` into `dir`; its path.
fn script(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `berth submit SCRIPT` as the user of `token`: its id; the submit must print no warning.
fn submit(b: &Berth, token: &str, script: &str) -> i64 {
    let o = b.cli_as(token, &["submit", "-o", "json", script]);
    assert!(o.status.success(), "submit {script}: {}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("ignoring"), "the output directives are honoured: {}", text(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap()
}

/// A cluster, its user alice and a directory `d` she may write: where every test but the
/// container one starts.
struct Alice {
    b: Berth,
    token: String,
    dir: tempfile::TempDir,
    d: String,
}

impl Alice {
    fn new() -> Alice {
        let b = Berth::up(&[]);
        let token = b.create_user("alice");
        let dir = open_dir();
        let d = dir.path().display().to_string();
        Alice { b, token, dir, d }
    }

    /// Writes script `name` into `d` and submits it as alice: its id.
    fn submit(&self, name: &str, text: &str) -> i64 {
        submit(&self.b, &self.token, &script(self.dir.path(), name, text))
    }
}

fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn output_and_error_files_hold_the_scripts_streams_and_belong_to_its_user() {
    let a = Alice::new();
    let (b, alice, d) = (&a.b, &a.token, &a.d);
    let id = a.submit(
        "outs.sh",
        &format!(
            "#!/bin/sh\n#SBATCH --job-name=outs\n#SBATCH --output={d}/%x-%j.out\n#SBATCH -e {d}/%x-%j.err\n\
             #SBATCH --mem=32M\necho to stdout; id -u\necho to stderr >&2\n"
        ),
    );
    b.wait_state(id, "SUCCEEDED");
    let (out, err) = (format!("{d}/outs-{id}.out"), format!("{d}/outs-{id}.err"));
    let printed = read(&out);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "to stdout", "{printed}");
    assert_eq!(read(&err), "to stderr\n");

    // The files are the job's user's: as root that is another uid, never root's.
    let uid: u32 = lines[1].parse().unwrap();
    for f in [&out, &err] {
        let m = std::fs::metadata(f).unwrap();
        assert_eq!(m.uid(), uid, "{f} belongs to the job's user");
    }
    if is_root() {
        assert_ne!(uid, 0, "the job ran as root: the test proves nothing");
    } else {
        eprintln!("SKIPPED: output files of another uid: needs root (the agent runs jobs as itself)");
    }

    // berth logs has nothing to show, and says where the output went instead.
    let o = b.cli_as(alice, &["logs", &id.to_string()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "", "the output went to the file");
    assert!(text(&o.stderr).contains(&format!("stdout goes to {out} on node ")), "{}", text(&o.stderr));
    let o = b.cli_as(alice, &["logs", "--stderr", &id.to_string()]);
    assert!(text(&o.stderr).contains(&format!("stderr goes to {err} on node ")), "{}", text(&o.stderr));
    // berth show names both, expanded.
    let o = b.cli_as(alice, &["show", &id.to_string()]);
    let shown = text(&o.stdout);
    assert!(
        shown.contains(&format!("stdout:     {out}\n")) && shown.contains(&format!("stderr:     {err}\n")),
        "{shown}"
    );
}

#[test]
fn an_array_writes_one_file_per_task_with_its_own_index() {
    let a = Alice::new();
    let (b, d) = (&a.b, &a.d);
    let array = a.submit(
        "sweep.sh",
        &format!(
            "#!/bin/sh\n#SBATCH --array=0-2\n#SBATCH --output={d}/%A_%a.out\n#SBATCH --error={d}/%A_%3a.err\n\
             #SBATCH --mem=32M --cpus-per-task=1\necho task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID\n"
        ),
    );
    b.wait_state(array, "SUCCEEDED");
    for i in 0..3 {
        assert_eq!(read(format!("{d}/{array}_{i}.out")), format!("task {i} of {array}\n"));
        assert_eq!(read(format!("{d}/{array}_00{i}.err")), "", "%3a pads the index");
    }
    let mut names: Vec<String> = std::fs::read_dir(a.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 7, "three tasks, two files each, and the script: {names:?}");
}

#[test]
fn append_keeps_what_an_earlier_job_wrote_and_truncate_starts_over() {
    let a = Alice::new();
    let (b, d) = (&a.b, &a.d);
    let run = |name: &str, mode: &str, word: &str| {
        let id = a
            .submit(name, &format!("#!/bin/sh\n#SBATCH --output={d}/same.out\n{mode}#SBATCH --mem=32M\necho {word}\n"));
        b.wait_state(id, "SUCCEEDED");
        read(format!("{d}/same.out"))
    };
    assert_eq!(run("one.sh", "", "one"), "one\n");
    assert_eq!(run("two.sh", "#SBATCH --open-mode=append\n", "two"), "one\ntwo\n", "append keeps what was there");
    assert_eq!(run("three.sh", "", "three"), "three\n", "the default truncates");
    assert_eq!(run("four.sh", "#SBATCH --open-mode=truncate\n", "four"), "four\n");
}

#[test]
fn a_missing_directory_fails_the_job_and_an_unknown_pattern_the_submit() {
    let a = Alice::new();
    let (b, alice, d) = (&a.b, &a.token, &a.d);
    let id = a.submit(
        "lost.sh",
        &format!("#!/bin/sh\n#SBATCH --output={d}/missing/%j.out\n#SBATCH --mem=32M\necho never seen\n"),
    );
    let j = b.wait_state(id, "FAILED");
    let reason = j["job"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains(&format!("cannot open the job's output file `{d}/missing/{id}.out` on node "))
            && reason.contains("no such file or directory")
            && reason.contains(&format!("create the directory `{d}/missing` first")),
        "{j:#}"
    );
    let shown = text(&b.cli_as(alice, &["show", &id.to_string()]).stdout);
    assert!(shown.contains("cannot open the job's output file"), "{shown}");
    assert!(!Path::new(&format!("{d}/missing")).exists(), "berth creates no directory");

    // An unknown pattern: the submit is refused, naming the script's line and the pattern.
    let s = script(a.dir.path(), "bad.sh", "#!/bin/sh\n#SBATCH --mem=32M\n#SBATCH --output=run-%q.out\necho x\n");
    let o = b.cli_as(alice, &["submit", &s]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("bad.sh:3: #SBATCH --output=run-%q.out: ") && e.contains("unknown pattern `%q`"), "{e}");
    assert!(e.contains("%j (job id)") && e.contains("%a (array index)"), "the known patterns are listed: {e}");
    let listed = b.json(&["ps", "--all"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "no job was made: {listed:#}");
}

/// Removes the containers of the agent `node` when dropped, a failed test's too.
struct Containers(String);

impl Drop for Containers {
    fn drop(&mut self) {
        support::remove_containers(&self.0);
    }
}

/// In a container the path is the container's: a mounted dir gets the files, opened by the
/// container's user; one that cannot be opened ends the job with the reason in its log.
#[test]
fn a_container_job_writes_its_files_inside_the_container() {
    if !support::docker_ready("a_container_job_writes_its_files_inside_the_container") {
        return;
    }
    let dir = open_dir();
    let host = dir.path().display().to_string();
    let node = format!("of{}", std::process::id());
    let _left = Containers(node.clone());
    let b = Berth::cluster("", &[(&node, &["--allow-mount", &host])]);
    let s = script(
        dir.path(),
        "boxed.sh",
        &format!(
            "#!/bin/sh\n#SBATCH --job-name=boxed\n#SBATCH --output=/out/%x-%j-%N.out\n#SBATCH --error=/out/%x-%j.err\n\
             #BERTH --image berth-test/busybox:1 --mount {host}:/out:rw\necho in the container; echo oops >&2\n"
        ),
    );
    let id = submit(&b, &b.admin_token(), &s);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(read(format!("{host}/boxed-{id}-{node}.out")), "in the container\n");
    assert_eq!(read(format!("{host}/boxed-{id}.err")), "oops\n");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "", "the log has nothing");

    std::fs::write(
        &s,
        format!("#!/bin/sh\n#SBATCH --output=/out/missing/%j.out\n#BERTH --image berth-test/busybox:1 --mount {host}:/out:rw\necho never\n"),
    )
    .unwrap();
    let id = submit(&b, &b.admin_token(), &s);
    let j = b.wait_state(id, "FAILED");
    assert_eq!(j["job"]["exit_code"], 1, "{j:#}");
    let o = b.cli(&["logs", "--stderr", &id.to_string()]);
    let err = text(&o.stdout);
    assert!(err.starts_with(&format!("berth: cannot open the job's output file /out/missing/{id}.out: ")), "{err}");
}
