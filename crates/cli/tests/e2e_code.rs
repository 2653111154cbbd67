//! `berth submit --code DIR` end to end (issue 19): the job runs in a fresh copy of DIR
//! (honouring .gitignore), unchanged files are not sent again, the git commit and a dirty
//! flag are recorded, and a snapshot over the admin's limit is refused.

mod support;

use std::process::Command;

use support::{Berth, text};

fn git(dir: &std::path::Path, args: &[&str]) {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git");
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
}

#[test]
fn a_job_runs_in_a_fresh_copy_of_its_code_sent_by_content() {
    let b = Berth::up(&["--code-limit", "1MiB"]);
    let proj = b.home.path().join("submit/proj");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::create_dir_all(proj.join("data")).unwrap();
    std::fs::write(proj.join(".gitignore"), "data/\n").unwrap();
    std::fs::write(proj.join("src/hello.txt"), "hello from the code\n").unwrap();
    std::fs::write(
        proj.join("run.sh"),
        "cat src/hello.txt\necho changed >> src/hello.txt\nfind . -type f | sort\npwd\n",
    )
    .unwrap();
    std::fs::write(proj.join("data/big.bin"), vec![7u8; 4 << 20]).unwrap();
    git(&proj, &["init", "-q"]);
    git(&proj, &["add", "."]);
    git(&proj, &["commit", "-q", "-m", "first"]);

    let o = b.cli(&["submit", "-o", "json", "--code", "proj", "--", "sh", "run.sh"]);
    let said = text(&o.stderr);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("code: 3 files") && said.contains("sent 3"), "{said}");
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    let d = b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "hello from the code");
    assert_eq!(&lines[1..4], ["./.gitignore", "./run.sh", "./src/hello.txt"], "ignored data stays home: {out}");
    assert_ne!(lines[4], proj.to_str().unwrap(), "it ran in a copy");
    assert_eq!(std::fs::read_to_string(proj.join("src/hello.txt")).unwrap(), "hello from the code\n");
    let commit = d["spec"]["code"]["git"]["commit"].as_str().unwrap().to_string();
    assert_eq!(d["spec"]["code"]["git"]["dirty"], false, "{d:#}");
    assert!(b.ok(&["show", &id.to_string()]).contains(&format!("git {commit}")));

    // One file changed: only it is sent, and the job knows its tree was dirty.
    std::fs::write(proj.join("src/hello.txt"), "hello again\n").unwrap();
    let o = b.cli(&["submit", "-o", "json", "--code", "proj", "--", "cat", "src/hello.txt"]);
    let said = text(&o.stderr);
    assert!(o.status.success() && said.contains("sent 1 ("), "{said}");
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hello again\n");
    assert_eq!(d["spec"]["code"]["git"]["dirty"], true);
    assert!(b.ok(&["show", &id.to_string()]).contains("(dirty)"));
    // Nothing changed: nothing sent.
    let o = b.cli(&["submit", "--code", "proj", "--", "true"]);
    assert!(text(&o.stderr).contains("sent 0 ("), "{}", text(&o.stderr));

    // Over the admin's limit (1 MiB here): refused, saying how to fix it.
    std::fs::write(proj.join(".gitignore"), "").unwrap();
    let o = b.cli(&["submit", "--code", "proj", "--", "true"]);
    assert!(!o.status.success(), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("over the limit") && err.contains(".berthignore"), "{err}");
    // Bad input: not a directory, or with --workdir.
    let o = b.cli(&["submit", "--code", "nope", "--", "true"]);
    assert!(!o.status.success() && text(&o.stderr).contains("not a directory"), "{}", text(&o.stderr));
    let o = b.cli(&["submit", "--code", "proj", "--workdir", "/tmp", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
