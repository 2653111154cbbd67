//! The README and docs as a user reads them (issue 41 items 8 and 9): every `berth ...`
//! command they show (in `sh` blocks and inline code spans) and every one a message of
//! berth's names parses with the real binary's command line (`BERTH_PARSE_ONLY=1`), and the
//! README's examples run as written on the machine the Quick start set up, which has no GPU
//! (`berth up --fake-gpus 2`, as the README tells such a user).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::doc_commands::{self, Found, berth_commands, block_lines, inline_spans};
use support::{BIN, Berth, shared_tempdir, text};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and docs/*.md: (name, text).
fn docs() -> Vec<(String, String)> {
    let mut files = vec![root().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    files.extend(more);
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            (name.trim_start_matches("../../").to_string(), std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Why `berth <args>` does not parse, or `None` when it does. A `partial` command (an inline
/// mention such as `berth token revoke`, or one with `...` in it) may leave out required
/// arguments, values and subcommands; a command that does not exist, a flag it lacks or a
/// value it refuses is wrong either way.
fn parse_error(args: &[String], partial: bool) -> Option<String> {
    let o = Command::new(BIN)
        .args(args)
        .env_clear()
        .env("BERTH_PARSE_ONLY", "1")
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if o.status.success() {
        return None;
    }
    let err = text(&o.stderr);
    let incomplete = err.contains("the following required arguments were not provided")
        || err.contains("a value is required for")
        // A command group named alone: clap prints its help (exit 2), no error.
        || (!err.contains("error:") && err.contains("\nUsage: berth "));
    if partial && incomplete {
        return None;
    }
    Some(err.lines().find(|l| l.starts_with("error:")).unwrap_or(err.trim()).to_string())
}

/// Guards the checks below: with `BERTH_PARSE_ONLY`, berth parses and stops (a `berth ps` with
/// no manager to talk to succeeds), and a wrong command fails. Without it, the docs'
/// `berth up` and `berth manager` lines would start daemons.
fn assert_parse_only_works() {
    assert_eq!(parse_error(&["ps".into()], false), None, "BERTH_PARSE_ONLY must stop after parsing");
    let wrong = parse_error(&["ps".into(), "--no-such-flag".into()], false);
    assert!(wrong.as_deref().is_some_and(|e| e.contains("--no-such-flag")), "{wrong:?}");
    let wrong = parse_error(&["no-such-command".into()], true);
    assert!(wrong.as_deref().is_some_and(|e| e.contains("unrecognized subcommand")), "{wrong:?}");
}

/// The agent's kernel supervisor: docs name it as `ps` shows it; main.rs runs it before
/// parsing the command line, so it has no definition to check (and must not be started).
const INTERNAL: &str = "kernel-supervisor";

/// Runs each command of `found` through the parser; the wrong ones as `where: line -> error`.
fn wrong_commands(found: &[Found]) -> Vec<String> {
    let mut wrong = Vec::new();
    for f in found {
        for cmd in berth_commands(&f.text, f.inline) {
            if cmd.args.first().is_some_and(|a| a == INTERNAL) {
                continue;
            }
            if let Some(e) = parse_error(&cmd.args, cmd.partial) {
                wrong.push(format!("{}: `{}` -> `berth {}`: {e}", f.at, f.text, cmd.args.join(" ")));
            }
        }
    }
    wrong
}

#[test]
fn every_berth_command_in_the_readme_and_docs_parses() {
    assert_parse_only_works();
    let mut found = Vec::new();
    for (name, body) in docs() {
        found.extend(block_lines(&name, &body));
        found.extend(inline_spans(&name, &body));
    }
    let commands: usize = found.iter().map(|f| berth_commands(&f.text, f.inline).len()).sum();
    assert!(commands > 300, "only {commands} berth commands found in the README and docs: is the extraction broken?");
    let wrong = wrong_commands(&found);
    assert!(wrong.is_empty(), "{} documented commands do not parse:\n{}", wrong.len(), wrong.join("\n"));
}

/// Every `` `berth ...` `` in berth's messages (the sources' lines outside comments) and in the
/// CLI's `///` help text, with `{...}` format arguments as `1`. Issue 41: messages named
/// `berth cache key` and `berth projects`, which do not exist.
#[test]
fn every_berth_command_a_message_names_parses() {
    assert_parse_only_works();
    let mut found = Vec::new();
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(root().join("crates")).unwrap().map(|e| e.unwrap().path().join("src")).collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
                found.extend(doc_commands::source_spans(&name, &std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    assert!(found.len() > 100, "only {} berth commands found in the sources", found.len());
    let wrong = wrong_commands(&found);
    assert!(wrong.is_empty(), "{} commands named in berth's sources do not parse:\n{}", wrong.len(), wrong.join("\n"));
}

/// The README's fenced block of `lang` that follows the first occurrence of `after`.
fn readme_block(after: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let at = readme.find(after).unwrap_or_else(|| panic!("the README says {after:?}"));
    let fence = format!("```{lang}\n");
    let start =
        at + readme[at..].find(&fence).unwrap_or_else(|| panic!("a {lang} block after {after:?}")) + fence.len();
    readme[start..start + readme[start..].find("```").unwrap()].to_string()
}

/// A user's project directory in `home`: a virtualenv (active: its `bin` first on PATH, as the
/// Quick start says), `train.py` (any flags), `serve.py` (serves until cancelled), `check.sh`
/// and `train.sh` (a batch script). Returns (project dir, PATH).
fn project(home: &Path) -> (PathBuf, String) {
    let proj = home.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let venv = proj.join(".venv");
    let made = Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success(), "python3 -m venv failed");
    std::fs::write(
        proj.join("train.py"),
        "import os, sys\nprint('train', sys.argv[1:], 'with', sys.executable, os.environ.get('WANDB_MODE'))\n",
    )
    .unwrap();
    std::fs::write(proj.join("serve.py"), "import time\nprint('serving', flush=True)\ntime.sleep(3600)\n").unwrap();
    let scripts = [("check.sh", "#!/bin/sh\necho checked\n"), ("train.sh", "#!/bin/sh\npython train.py --batch\n")];
    for (name, body) in scripts {
        std::fs::write(proj.join(name), body).unwrap();
        std::fs::set_permissions(proj.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let bin = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{venv}/bin:{home}/.local/bin:{bin}:/usr/local/bin:/usr/bin:/bin",
        venv = venv.display(),
        home = home.display(),
        bin = bin.display()
    );
    (proj, path)
}

/// `script` through `sh -e` in `dir`, as a user at a prompt with `path` and HOME `home`.
fn shell(script: &str, dir: &Path, home: &Path, path: &str) -> Output {
    Command::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Issue 41 item 9: on a machine without GPUs the README's second and third examples failed
/// (`no node in queue default has a GPU`; the job file asked for 16 GiB and 4 CPUs). Run as
/// written, line by line, against the `berth up --fake-gpus 2` the README tells such a user to
/// start, with the README's job.toml: every line succeeds.
#[test]
fn the_quick_start_and_its_job_file_run_as_written_without_gpus() {
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &["--fake-gpus", "2"]);
    let home = b.home.path();
    let (proj, path) = project(home);
    let job_toml = readme_block("A job file is TOML", "toml");
    std::fs::write(proj.join("job.toml"), &job_toml).unwrap();

    let block = readme_block("In another\nterminal", "sh");
    let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 10, "{block}");
    for line in lines {
        let o = shell(line, &proj, home, &path);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert!(o.status.success(), "`{line}` failed ({}):\n{out}{err}", o.status);
        if line.starts_with("berth ui") {
            assert!(out.trim().starts_with(&format!("{}/ui/login?code=", b.url)), "`{line}` printed no link: {out}");
        }
        if line.starts_with("berth submit --wait") {
            assert_eq!(out, "checked\n", "`{line}` shows the job's output");
        }
    }
    // What the lines say they did: job 1 ran the virtualenv's python, job 2 was cancelled,
    // job 3 (the job file) ran its command with its environment on a (fake) GPU.
    let venv_python = proj.join(".venv/bin/python");
    assert_eq!(b.ok(&["logs", "1"]), format!("train [] with {} None\n", venv_python.display()));
    assert_eq!(b.state(2), "CANCELLED");
    assert_eq!(b.state(3), "SUCCEEDED");
    assert_eq!(b.ok(&["logs", "3"]), format!("train ['--epochs', '10'] with {} offline\n", venv_python.display()));
    let job = b.job(3);
    assert_eq!(job["spec"]["name"], "train", "{job}");
}

/// The "Submitting jobs" pipeline and the "Slurm users" block of the README, and docs/slurm.md's
/// first block, run as written (one shell each: the pipeline passes job ids in variables).
#[test]
fn the_pipeline_and_slurm_examples_run_as_written() {
    let home = shared_tempdir();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(home, &[]);
    let home = b.home.path();
    let (proj, path) = project(home);

    let pipeline = readme_block("A pipeline chains jobs", "sh");
    let o = shell(&pipeline, &proj, home, &path);
    let out = text(&o.stdout);
    assert!(o.status.success(), "the pipeline failed ({}):\n{out}{}", o.status, text(&o.stderr));
    // As its last line says: the second waits for the first, which is job 1.
    assert!(out.contains("dependency: waits for 1"), "{out}");
    for (id, said) in [(1, "prepared\n"), (2, "trained\n"), (3, "reported\n")] {
        b.wait_state(id, "SUCCEEDED");
        assert_eq!(b.ok(&["logs", &id.to_string()]), said);
    }

    let slurm = readme_block("they are the `berth` binary under those names", "sh");
    let o = shell(&slurm, &proj, home, &path);
    assert!(o.status.success(), "the Slurm block failed ({}):\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
    let slurm_md = std::fs::read_to_string(root().join("docs/slurm.md")).unwrap();
    let start = slurm_md.find("```sh\n").expect("docs/slurm.md has a sh block") + 6;
    let block = &slurm_md[start..start + slurm_md[start..].find("```").unwrap()];
    let o = shell(block, &proj, home, &path);
    assert!(o.status.success(), "docs/slurm.md's block failed ({}):\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
}

fn args_of(line: &str, inline: bool) -> Vec<Vec<String>> {
    berth_commands(line, inline).into_iter().map(|c| c.args).collect()
}

/// The extraction the checks above rely on: shell lines split as `sh` would split them.
#[test]
fn doc_shell_lines_split_into_berth_commands_as_sh_would() {
    assert_eq!(
        args_of("berth ps -o name --state PENDING | xargs -r berth cancel  # all", false),
        [vec!["ps", "-o", "name", "--state", "PENDING"], vec!["cancel"]]
    );
    assert_eq!(
        args_of("train=$(berth submit --dependency afterok:$prep -- sh -c 'echo a b')", false),
        [vec!["submit", "--dependency", "afterok:1", "--", "sh", "-c", "echo a b"]]
    );
    assert_eq!(
        args_of("BERTH_URL=x berth completions bash > ~/f && berth man", false),
        [vec!["completions", "bash"], vec!["man"]]
    );
    let cmds = berth_commands("berth agent ... --pull", false);
    assert!(cmds[0].partial && cmds[0].args == ["agent", "--pull"], "{cmds:?}");
}

#[test]
fn doc_synopses_become_one_command() {
    use doc_commands::concrete;
    assert_eq!(concrete("berth cancel --signal SIG [--batch|--full] JOB..."), "berth cancel --signal SIG --batch JOB");
    assert_eq!(
        concrete("berth port-forward ID [LOCAL:]REMOTE... [--kernel N]"),
        "berth port-forward ID REMOTE --kernel N"
    );
    assert_eq!(concrete("berth up --tls-cert/--tls-key"), "berth up --tls-cert");
    assert_eq!(concrete("berth manager|up --config FILE"), "berth manager --config FILE");
    assert_eq!(args_of("berth logs ID [-f]", true), [vec!["logs", "1", "-f"]]);
}
