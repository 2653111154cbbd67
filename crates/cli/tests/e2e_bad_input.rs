//! Bad input through the real binary: each gets a clear error and a non-zero exit, and the
//! store is untouched.

mod support;

use support::{Berth, text};

fn job_count(b: &Berth) -> usize {
    b.json(&["ps", "--all"]).as_array().unwrap().len()
}

fn fails_with(b: &Berth, args: &[&str], needle: &str) {
    let o = b.cli(args);
    assert!(!o.status.success(), "berth {args:?} should fail");
    let err = text(&o.stderr);
    assert!(err.to_lowercase().contains(&needle.to_lowercase()), "berth {args:?}: stderr `{err}` lacks `{needle}`");
}

#[test]
fn rejected_submissions_leave_the_store_untouched() {
    let b = Berth::up(&["--fake-gpus", "1"]);
    let before = job_count(&b);
    fails_with(&b, &["submit", "--bogus-flag", "--", "true"], "--bogus-flag");
    fails_with(&b, &["submit", "--mem", "4", "--", "true"], "unit");
    fails_with(&b, &["submit", "--mem", "-4GiB", "--", "true"], "must not be negative");
    fails_with(&b, &["submit", "--cpus", "0", "--", "true"], "greater than zero");
    fails_with(&b, &["submit", "--gpus", "1.5", "--", "true"], "whole");
    fails_with(&b, &["submit", "--gpus", "4", "--", "true"], "no node can ever run this");
    fails_with(&b, &["submit", "--cpus", "4096", "--", "true"], "no node can ever run this");
    fails_with(&b, &["submit", "--"], "command");
    // These wrapped to a 44 s and a 61,184 s limit (u64 overflow) and were accepted.
    fails_with(&b, &["submit", "--time-limit", "307445734561825861m", "--", "true"], "maximum, 36500d");
    fails_with(&b, &["submit", "--time-limit", "213503982334602d", "--", "true"], "maximum, 36500d");
    let sbatch = b.home.path().join("long.sh");
    std::fs::write(&sbatch, "#!/bin/sh\n#SBATCH --time=307445734561825861\ntrue\n").unwrap();
    fails_with(&b, &["submit", sbatch.to_str().unwrap()], "maximum, 36500d");
    fails_with(&b, &["submit", "--queue", "nope", "--", "true"], "queue");
    let bad = b.home.path().join("bad.toml");
    std::fs::write(&bad, "command = [\"true\"\nmem = 4GiB\n").unwrap();
    fails_with(&b, &["submit", bad.to_str().unwrap()], "bad.toml");
    let unknown = b.home.path().join("unknown.toml");
    std::fs::write(&unknown, "command = [\"true\"]\ngpu = 1\n").unwrap();
    fails_with(&b, &["submit", unknown.to_str().unwrap()], "gpu");
    assert_eq!(job_count(&b), before, "a rejected submission must not create a job");

    // --mem accepts both unit families and keeps them apart
    let gib = b.submit(&["--mem", "1GiB", "--", "true"]);
    let gb = b.submit(&["--mem", "1GB", "--", "true"]);
    assert_eq!(b.job(gib)["job"]["mem_bytes"], 1u64 << 30);
    assert_eq!(b.job(gb)["job"]["mem_bytes"], 1_000_000_000u64);
}

#[test]
fn non_utf8_arguments_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let b = Berth::up(&[]);
    let before = job_count(&b);
    let o = std::process::Command::new(support::BIN)
        .env("HOME", b.home.path())
        .env_remove("XDG_CONFIG_HOME")
        .arg("submit")
        .arg("--")
        .arg("echo")
        .arg(std::ffi::OsStr::from_bytes(b"\xff\xfe"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("UTF-8"), "{}", text(&o.stderr));
    assert_eq!(job_count(&b), before);
}

#[test]
fn cancel_of_a_missing_or_someone_elses_job_is_refused() {
    let b = Berth::up(&[]);
    let mine = b.submit(&["--", "sleep", "300"]);
    fails_with(&b, &["cancel", "999999"], "not found");
    fails_with(&b, &["show", "999999"], "not found");
    fails_with(&b, &["cancel", "abc"], "abc");

    let created = b.json(&["admin", "user", "create", "bob"]);
    let bob = created["token"].as_str().unwrap().to_string();
    // Someone else's job answers like a missing one: its id tells bob nothing.
    let o = b.cli_as(&bob, &["cancel", &mine.to_string()]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(&format!("job {mine}")) && err.contains("not found") && !err.contains("admin"), "{err}");
    assert_ne!(b.state(mine), "CANCELLED");
    // bob does not even see it
    let o = b.cli_as(&bob, &["ps", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.as_array().unwrap().is_empty(), "{v}");
    // a finished job cannot be cancelled again
    b.ok(&["cancel", &mine.to_string()]);
    b.wait_state(mine, "CANCELLED");
    fails_with(&b, &["cancel", &mine.to_string()], "already finished");
}

#[test]
fn the_api_requires_a_token_and_describes_itself() {
    let b = Berth::up(&[]);
    let o = b.cli_as("not-a-real-token", &["ps"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).to_lowercase().contains("token"), "{}", text(&o.stderr));
    let health = reqwest_get(&format!("{}/v1/health", b.url));
    assert!(health.contains("ok"), "{health}");
    let spec = reqwest_get(&format!("{}/openapi.json", b.url));
    let v: serde_json::Value = serde_json::from_str(&spec).unwrap();
    assert!(v["paths"]["/v1/jobs"].is_object(), "{spec}");
    assert!(v["paths"]["/v1/jobs/{id}/cancel"].is_object());
}

#[test]
fn a_log_offset_past_the_end_is_an_empty_page_with_the_log_size() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "echo", "hello"]);
    b.wait_state(id, "SUCCEEDED");
    let token = b.admin_token();
    // The first answered 404 `node ... has no Stdout log` (lseek past ext4's largest file).
    for offset in ["755378507596559", "9223372036854775807", "6", "100"] {
        let url = format!("{}/v1/jobs/{id}/logs?offset={offset}", b.url);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (status, next, body) = rt.block_on(async {
            let r = reqwest::Client::new().get(&url).bearer_auth(&token).send().await.unwrap();
            let next = r.headers().get("berth-next-offset").map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), next, r.bytes().await.unwrap())
        });
        assert_eq!((status, next.as_deref(), body.len()), (200, Some("6"), 0), "offset {offset}: {body:?}");
    }
    // Past the int64 the spec states: refused, not wrapped.
    let url = format!("{}/v1/jobs/{id}/logs?offset=9223372036854775808", b.url);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status =
        rt.block_on(async { reqwest::Client::new().get(&url).bearer_auth(&token).send().await.unwrap().status() });
    assert_eq!(status.as_u16(), 400);
}

fn reqwest_get(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { reqwest::get(url).await.unwrap().text().await.unwrap() })
}
