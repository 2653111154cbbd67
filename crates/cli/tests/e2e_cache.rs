//! `berth up` runs a dataset cache by default and hands each job `BERTH_CACHE_URL` and a
//! token scoped to the job's project (also in the file PFIO reads, `PFIO_HTTP_BEARER_TOKEN_PATH`):
//! the job can use its project's private bucket and is refused another project's.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// The `dataset cache: http://...` URL `berth up` printed.
fn cache_url(b: &Berth) -> String {
    let t0 = Instant::now();
    loop {
        let out = std::fs::read_to_string(b.home.path().join("up.stdout")).unwrap_or_default();
        if let Some(l) = out.lines().find(|l| l.starts_with("dataset cache: ")) {
            return l["dataset cache: ".len()..].split_whitespace().next().unwrap().to_string();
        }
        assert!(t0.elapsed() < PATIENCE, "berth up printed no dataset cache line:\n{out}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cache_cli(url: &str, token: &str, args: &[&str]) -> String {
    let o = Command::new(BIN)
        .arg("cache")
        .args(args)
        .env("BERTH_CACHE_URL", url)
        .env("BERTH_CACHE_TOKEN", token)
        .output()
        .unwrap();
    assert!(o.status.success(), "berth cache {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

const JOB: &str = r#"
import os, urllib.request as u, urllib.error as e
base, tok = os.environ["BERTH_CACHE_URL"], os.environ["BERTH_CACHE_TOKEN"]
# PFIO reads the token from PFIO_HTTP_BEARER_TOKEN_PATH: berth writes it there for the job
path = os.environ["PFIO_HTTP_BEARER_TOKEN_PATH"]
print("token file", path == os.environ["BERTH_CACHE_TOKEN_FILE"], open(path).read() == tok, oct(os.stat(path).st_mode & 0o777))
tok = open(path).read()
def call(method, path, data=None):
    r = u.Request(base + "/v1/objects/" + path, data=data, method=method, headers={"Authorization": "Bearer " + tok})
    try:
        with u.urlopen(r) as resp:
            return resp.status, resp.read()
    except e.HTTPError as x:
        return x.code, b""
print("put", call("PUT", "mine/s3://h/b//k", b"cached bytes")[0])
print("get", *call("GET", "mine/s3://h/b//k"))
print("other", call("GET", "theirs/k")[0])
"#;

#[test]
fn a_job_gets_the_cache_url_and_a_token_of_its_project() {
    // Not on the default port, as when 7171 is taken: `cache stats` must still find it.
    let b = Berth::up(&["--cache-listen", "127.0.0.1:0"]);
    let url = cache_url(&b);
    let key = b.data.join("cache").join("cache.key");
    let o = Command::new(BIN).args(["cache", "token", "--admin", "--key-file"]).arg(&key).output().unwrap();
    let admin = text(&o.stdout).trim().to_string();
    let me = b.json(&["whoami"])["user"].as_str().unwrap().to_string();
    // through the manager: its pushes carry the whole bucket list, so a bucket made on the
    // cache node alone would be deleted by the next one
    // A job's token names its project; a job without one gets none (never one named like its
    // user: issue 13).
    b.ok(&["admin", "project", "create", "vision"]);
    b.ok(&["admin", "project", "add-member", "vision", &me]);
    b.ok(&["cache", "bucket", "create", "mine", "--projects", "vision"]);
    b.ok(&["cache", "bucket", "create", "theirs", "--projects", "someone-else"]);
    let t0 = Instant::now();
    while !cache_cli(&url, &admin, &["bucket", "list"]).contains("theirs") {
        assert!(t0.elapsed() < PATIENCE, "the manager never pushed the buckets to its cache node");
        std::thread::sleep(Duration::from_millis(100));
    }

    let id = b.submit(&["--project", "vision", "--", "python3", "-c", JOB]);
    b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    assert!(out.contains("token file True True 0o600"), "{out}");
    assert!(out.contains("put 201"), "{out}");
    assert!(out.contains("get 200 b'cached bytes'"), "{out}");
    assert!(out.contains("other 403"), "{out}");
    let stats = cache_cli(&url, &admin, &["stats"]);
    assert!(
        stats.lines().any(|l| l.contains(" mine ") && l.split_whitespace().nth(5) == Some("1")),
        "one hit:\n{stats}"
    );
    // Regression (issue 41): with no --url, `berth cache stats` asked 127.0.0.1:7171 even when
    // this berth's cache listened elsewhere; it asks the manager where its cache node is.
    assert!(!url.ends_with(":7171"), "the test's cache is on an ephemeral port: {url}");
    let o = support::base_cmd(b.home.path())
        .args(["cache", "stats"])
        .env_remove("BERTH_CACHE_URL")
        .env("BERTH_CACHE_TOKEN", &admin)
        .output()
        .unwrap();
    assert!(o.status.success(), "cache stats without --url: {}", text(&o.stderr));
    let stats = text(&o.stdout);
    assert!(stats.contains(&url) && stats.contains(" mine "), "the stats of {url}:\n{stats}");
}
