//! Runs the real `berth` binary for what needs no manager: help and version, argument errors
//! (exit 2, naming the flag), job-file errors, and the messages for a missing or unreachable
//! manager.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output};

/// A `berth` command with a clean environment: no manager configured, config under `home`.
fn berth(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
    c.env_clear()
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home);
    c
}

fn run<I, S>(home: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    berth(home).args(args).output().expect("run berth")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_and_version() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), ["--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for cmd in ["submit", "ps", "show", "logs", "cancel", "nodes", "whoami", "admin", "up", "agent"] {
        assert!(out.contains(cmd), "{cmd} missing from --help:\n{out}");
    }
    let o = run(home.path(), ["submit", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("4×2^30") && out.contains("4×10^9"), "memory units documented:\n{out}");
    let o = run(home.path(), ["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("berth "));
}

/// Issue 41: 44 subcommands in one flat list, and daemon-only flags (`--log-format`) in every
/// user command's help.
#[test]
fn help_groups_the_commands_and_keeps_daemon_flags_to_daemons() {
    let home = tempfile::tempdir().unwrap();
    let out = String::from_utf8_lossy(&run(home.path(), ["--help"]).stdout).into_owned();
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s} missing from --help:\n{out}"));
    assert!(at("Jobs:\n") < at("  submit ") && at("  submit ") < at("Interactive work:"), "{out}");
    assert!(at("Daemons:\n") < at("  up "), "{out}");
    for user in ["ps", "submit", "logs", "folder"] {
        let help = String::from_utf8_lossy(&run(home.path(), [user, "--help"]).stdout).into_owned();
        assert!(!help.contains("--log-format"), "`berth {user} --help` shows a daemon flag:\n{help}");
    }
    for daemon in [&["up"][..], &["manager"], &["agent"], &["cache", "serve"]] {
        let args: Vec<&str> = daemon.iter().copied().chain(["--help"]).collect();
        let help = String::from_utf8_lossy(&run(home.path(), &args).stdout).into_owned();
        assert!(help.contains("--log-format"), "`berth {daemon:?} --help`:\n{help}");
    }
    // A daemon flag on a user command is a usage mistake.
    assert_eq!(run(home.path(), ["ps", "--log-format", "json"]).status.code(), Some(2));
}

#[test]
fn unknown_flag_exits_2() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), ["ps", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--bogus"));
}

#[test]
fn bad_mem_names_the_flag() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), ["submit", "--mem", "4X", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.starts_with("error: invalid value '4X' for '--mem <SIZE>'"), "{e}");
    let o = run(home.path(), ["submit", "--gpus", "1.5", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("whole number"));
    let o = run(home.path(), ["submit", "--env", "NOEQUALS", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("NOEQUALS"));
}

#[test]
fn a_cache_url_that_is_no_url_names_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let o = run(
        home.path(),
        ["agent", "--manager", "http://127.0.0.1:1", "--join-token", "t", "--cache-url", "node1:7171"],
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("--cache-url") && e.contains("use http://HOST:PORT"), "{e}");
}

#[test]
fn a_cache_weight_out_of_range_names_the_range() {
    let home = tempfile::tempdir().unwrap();
    for bad in ["0", "1001", "two", "-1"] {
        let flag = format!("--cache-weight={bad}");
        let o = run(home.path(), ["agent", "--manager", "http://127.0.0.1:1", "--join-token", "t", &flag]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let e = stderr(&o);
        assert!(e.contains("--cache-weight") && e.contains("1 to 1000"), "{bad}: {e}");
    }
}

#[test]
fn empty_command_is_explained() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), ["submit", "--cpus", "2"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.starts_with("error: empty command: give the program to run after `--`"), "{e}");
}

#[test]
fn non_utf8_argument_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let bad = OsStr::from_bytes(b"caf\xe9");
    let o = run(home.path(), [OsStr::new("submit"), OsStr::new("--"), OsStr::new("echo"), bad]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).trim_end(), "error: argument 2 is not valid UTF-8: berth passes commands as UTF-8 text");
}

#[test]
fn job_file_errors_show_where() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("bad.toml"), "command = [\"x\"\ncpus = 2\n").unwrap();
    let o = run(home.path(), ["submit", "bad.toml"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.starts_with("error: invalid job file bad.toml: "), "{e}");
    assert!(e.contains("line") && e.contains("column"), "{e}");

    std::fs::write(home.path().join("typo.toml"), "command = [\"x\"]\ngpu = 1\n").unwrap();
    let e = stderr(&run(home.path(), ["submit", "typo.toml"]));
    assert!(e.contains("typo.toml") && e.contains("unknown field `gpu`"), "{e}");

    let e = stderr(&run(home.path(), ["submit", "missing.toml"]));
    assert!(e.starts_with("error: cannot read job file missing.toml"), "{e}");
}

#[test]
fn no_credentials_says_how_to_fix_it() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["ps"][..], &["submit", "--", "true"], &["nodes"], &["cancel", "3"]] {
        let o = run(home.path(), args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(
            e.starts_with("error: no berth manager configured: run `berth up`, or set BERTH_URL and BERTH_TOKEN"),
            "{args:?}: {e}"
        );
        // Where it looked, and how to point it elsewhere (issue 41).
        assert!(e.contains("berth/credentials (none") && e.contains("BERTH_SOCKET="), "{args:?}: {e}");
    }
}

#[test]
fn unreachable_manager_says_so() {
    let home = tempfile::tempdir().unwrap();
    let o = berth(home.path())
        .args(["ps"])
        .env("BERTH_URL", "http://127.0.0.1:1")
        .env("BERTH_TOKEN", "t")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim_end(),
        "error: cannot reach the berth manager at http://127.0.0.1:1: is `berth up` running?"
    );
    // The credentials file is read the same way as the environment.
    let dir = home.path().join("config/berth");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("credentials"), "url = \"http://127.0.0.1:1\"\ntoken = \"t\"\n").unwrap();
    let o = run(home.path(), ["whoami"]);
    assert!(stderr(&o).contains("cannot reach the berth manager at http://127.0.0.1:1"), "{}", stderr(&o));
}
