//! `berth completions` and `berth man`, run as the real binary: the scripts parse in their
//! shell and berth answers their calls with the subcommands and flags, the manual pages exist
//! for every subcommand and render.

use std::path::Path;
use std::process::{Command, Output};

fn berth(home: &Path, args: &[&str]) -> Output {
    berth_cmd(home, args).output().expect("run berth")
}

/// `berth <args>` with a clean environment and HOME `home` (no manager configured).
fn berth_cmd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
    c.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home)
        .args(args);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `tool` can be run; on CI (CI=true) a missing one fails the test.
fn have(tool: &str, test: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success());
    if !found {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "{test}: {tool} is missing (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: {test}: {tool} is not installed");
    }
    found
}

#[test]
fn completions_parse_and_name_the_subcommands() {
    let home = tempfile::tempdir().unwrap();
    let o = berth(home.path(), &["completions", "bash"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let script = text(&o.stdout);
    let file = home.path().join("berth.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().expect("run bash -n");
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));
    // Sourced into an interactive-less bash, it registers the completion function.
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p berth", file.display()))
        .output()
        .expect("run bash");
    assert!(sourced.status.success() && text(&sourced.stdout).contains("berth"), "{}", text(&sourced.stderr));
    // The script calls berth back with the words so far; berth answers from its definition.
    let words = |index: &str, words: &[&str]| -> String {
        let o = berth_cmd(home.path(), &[&["--", "berth"], words].concat())
            .env("BERTH_COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", index)
            .env("_CLAP_IFS", "\n")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    assert_eq!(words("1", &["sub"]).trim_end(), "submit");
    let flags = words("2", &["logs", "--t"]);
    assert_eq!(flags.trim_end(), "--tail", "{flags}");
    assert!(words("1", &[""]).lines().any(|l| l == "port-forward"), "every subcommand is offered");

    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = berth(home.path(), &["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", text(&o.stderr));
        assert!(text(&o.stdout).contains("BERTH_COMPLETE"), "{shell}: the script calls berth back");
    }

    let o = berth(home.path(), &["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "an unknown shell is a usage error");
    let err = text(&o.stderr);
    assert!(err.contains("invalid value 'tcsh'") && err.contains("bash"), "{err}");
}

#[test]
fn man_pages_for_every_subcommand_render() {
    let home = tempfile::tempdir().unwrap();
    let o = berth(home.path(), &["man"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with(".ie") || text(&o.stdout).contains(".TH berth 1"), "berth.1 on stdout");

    let dir = home.path().join("man/man1");
    let o = berth(home.path(), &["man", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for page in ["berth.1", "berth-submit.1", "berth-ps.1", "berth-cache-bucket-create.1", "berth-context-add.1"] {
        let p = dir.join(page);
        let body = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(body.lines().any(|l| l.starts_with(".TH ")), "{page} has no .TH line");
    }
    assert!(!dir.join("berth-help.1").exists(), "no page for the help subcommand");

    if have("groff", "man_pages_for_every_subcommand_render") {
        let o = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"]) // -k: preconv, the pages are UTF-8 (×, ÷)
            .arg(dir.join("berth-submit.1"))
            .output()
            .expect("run groff");
        assert!(o.status.success() && o.stderr.is_empty(), "groff: {}", text(&o.stderr));
    }
    if have("man", "man_pages_for_every_subcommand_render") {
        let o = Command::new("man")
            .env("MANWIDTH", "100")
            .env("MAN_KEEP_FORMATTING", "0")
            .args(["-l", "-P", "cat"])
            .arg(dir.join("berth-submit.1"))
            .output()
            .expect("run man");
        assert!(o.status.success(), "man -l: {}", text(&o.stderr));
        let page = text(&o.stdout);
        assert!(page.contains("--cpus") && page.contains("NAME"), "{page}");
    }
}
