//! Contexts: two real managers (`berth up` twice, each in its own temp HOME) and a user with
//! a third HOME whose credentials file names both; `--context`, `BERTH_CONTEXT` and
//! `berth context use` decide which one `ps` and `submit` talk to, tokens never show, and the
//! file stays private.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::Value;
use support::{Berth, base_cmd, text};

/// `berth <args>` as the user of `home`, with `input` on stdin and `env` set.
fn berth(home: &Path, args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut c = base_cmd(home);
    c.env_remove("BERTH_CONTEXT");
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child =
        c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run berth");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().expect("run berth")
}

fn ok(home: &Path, args: &[&str], input: &str, env: &[(&str, &str)]) -> String {
    let o = berth(home, args, input, env);
    assert!(o.status.success(), "berth {args:?} failed: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The names of the jobs `berth ps -a` lists, with these extra arguments and variables.
fn names(home: &Path, extra: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut args = vec!["ps", "-a", "-o", "json"];
    args.extend(extra);
    let v: Value = serde_json::from_str(&ok(home, &args, "", env)).unwrap();
    v.as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap_or_default().to_string()).collect()
}

#[test]
fn contexts_pick_the_cluster_per_command_and_for_good() {
    let a = Berth::up(&["--no-cache"]);
    let b = Berth::up(&["--no-cache"]);
    let (ta, tb) = (a.admin_token(), b.admin_token());
    let user = tempfile::tempdir().unwrap();
    let home = user.path();

    // No credentials yet: the first context added becomes the current one.
    let out = ok(home, &["context", "add", "a", "--url", &a.url, "--token-stdin"], &format!("{ta}\n"), &[]);
    assert!(out.contains("added context a") && out.contains("current context"), "{out}");
    let out = ok(home, &["context", "add", "b", "--url", &format!("{}/", b.url)], &format!("{tb}\n"), &[]);
    assert!(out.contains("berth context use b"), "{out}");
    assert_eq!(ok(home, &["context", "current"], "", &[]).trim(), "a");

    // A wrong token is refused before anything is stored; a taken name too.
    let o = berth(home, &["context", "add", "c", "--url", &b.url], "wrong\n", &[]);
    assert!(!o.status.success() && text(&o.stderr).contains("does not accept the token"), "{}", text(&o.stderr));
    let o = berth(home, &["context", "add", "b", "--url", &b.url], &format!("{tb}\n"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));

    ok(home, &["submit", "--name", "on-a", "--", "true"], "", &[]);
    ok(home, &["--context", "b", "submit", "--name", "on-b", "--", "true"], "", &[]);
    assert_eq!(names(home, &[], &[]), ["on-a"]);
    assert_eq!(names(home, &["--context", "b"], &[]), ["on-b"]);
    assert_eq!(names(home, &[], &[("BERTH_CONTEXT", "b")]), ["on-b"]);
    // Each manager has its own job, seen from its own HOME too.
    assert_eq!(a.json(&["ps", "-a"]).as_array().unwrap().len(), 1);
    assert_eq!(b.json(&["ps", "-a"])[0]["name"], "on-b");

    let out = ok(home, &["context", "use", "b"], "", &[]);
    assert!(out.contains("switched to context b"), "{out}");
    assert_eq!(names(home, &[], &[]), ["on-b"]);
    assert_eq!(names(home, &["--context", "a"], &[]), ["on-a"]);
    assert_eq!(ok(home, &["context", "current"], "", &[("BERTH_CONTEXT", "a")]).trim(), "a");

    // ls marks the current one and never prints a token.
    let o = berth(home, &["context", "ls"], "", &[]);
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success() && !all.contains(&ta) && !all.contains(&tb), "{all}");
    let current: Vec<&str> = all.lines().filter(|l| l.starts_with('*')).collect();
    assert!(current.len() == 1 && current[0].contains(&b.url), "{all}");
    let v: Value = serde_json::from_str(&ok(home, &["context", "ls", "-o", "json"], "", &[])).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(
        (v[1]["name"].as_str(), v[1]["current"].as_bool(), v[1]["has_token"].as_bool()),
        (Some("b"), Some(true), Some(true))
    );

    // An unknown context fails and names the known ones.
    for (args, env) in [(vec!["--context", "nope", "ps"], vec![]), (vec!["ps"], vec![("BERTH_CONTEXT", "nope")])] {
        let o = berth(home, &args, "", &env);
        let err = text(&o.stderr);
        assert!(!o.status.success() && err.contains("unknown context `nope`") && err.contains("a, b"), "{err}");
    }
    let o = berth(home, &["context", "use", "nope"], "", &[]);
    assert!(!o.status.success() && text(&o.stderr).contains("known contexts: a, b"), "{}", text(&o.stderr));

    // `berth login` updates the context in use, or the one named (created when missing).
    let out = ok(home, &["--context", "c", "login", &a.url, "--token-stdin"], &format!("{ta}\n"), &[]);
    assert!(out.contains("(context c)"), "{out}");
    assert_eq!(names(home, &["--context", "c"], &[]), ["on-a"]);
    assert_eq!(ok(home, &["context", "current"], "", &[]).trim(), "b", "login --context does not switch");

    let file = home.join(".config/berth/credentials");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);

    // Removing the current context leaves none current (the file has no default one).
    let out = ok(home, &["context", "rm", "b"], "", &[]);
    assert!(out.contains("removed context b") && out.contains("no context is current"), "{out}");
    let o = berth(home, &["ps"], "", &[]);
    assert!(!o.status.success() && text(&o.stderr).contains("no berth manager configured"), "{}", text(&o.stderr));
    ok(home, &["context", "use", "a"], "", &[]);
    assert_eq!(names(home, &[], &[]), ["on-a"]);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn berth_ups_file_is_the_default_context_and_login_keeps_the_others() {
    let a = Berth::up(&["--no-cache"]);
    let b = Berth::up(&["--no-cache"]);
    let home = a.home.path().to_path_buf();
    let home = home.as_path();
    // The file `berth up` wrote, unchanged, is the `default` context.
    assert_eq!(ok(home, &["context", "current"], "", &[]).trim(), "default");
    let out = ok(home, &["context", "ls"], "", &[]);
    assert!(out.lines().any(|l| l.starts_with('*') && l.contains("default")), "{out}");
    let out = ok(home, &["context", "add", "b", "--url", &b.url], &format!("{}\n", b.admin_token()), &[]);
    assert!(out.contains("berth context use b"), "not made current: {out}");
    a.submit(&["--name", "on-a", "--", "true"]);
    assert_eq!(names(home, &[], &[]), ["on-a"]);
    assert!(names(home, &["--context", "b"], &[]).is_empty());

    // A restarted `berth up` rewrites the default context, and says so while b is current.
    ok(home, &["context", "use", "b"], "", &[]);
    let mut a = a;
    a.restart();
    let up = std::fs::read_to_string(home.join("up.stdout")).unwrap();
    assert!(up.contains("as context default; the current context is b"), "{up}");
    assert_eq!(names(home, &[], &[]), Vec::<String>::new(), "still b");
    ok(home, &["context", "use", "default"], "", &[]);
    assert_eq!(names(home, &[], &[]), ["on-a"]);

    // Plain `berth login` rewrites the current context (default) and keeps b.
    ok(home, &["login", &b.url, "--token-stdin"], &format!("{}\n", b.admin_token()), &[]);
    assert!(names(home, &[], &[]).is_empty(), "default now leads to b");
    let v: Value = serde_json::from_str(&ok(home, &["context", "ls", "-o", "json"], "", &[])).unwrap();
    assert_eq!(v.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["default", "b"]);
    let file = home.join(".config/berth/credentials");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
}
