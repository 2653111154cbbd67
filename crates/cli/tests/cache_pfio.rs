//! PFIO (from PyPI) reading a local dataset twice through `berth cache serve`: the second pass
//! must be cache hits, seen on `/metrics`. Needs a Python with `pfio` importable: the one in
//! `BERTH_TEST_PYTHON` (scripts/test.sh makes a venv and sets it) or `python3`; without it the
//! test prints SKIPPED.

mod cache_support;

use std::process::Command;

use cache_support::*;
use serde_json::json;

fn python_with_pfio() -> Option<String> {
    let py = std::env::var("BERTH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py).args(["-c", "import pfio.v2"]).output().map(|o| o.status.success()).unwrap_or(false);
    ok.then_some(py)
}

#[tokio::test]
async fn pfio_reads_a_dataset_twice_and_the_second_pass_hits() {
    let Some(py) = python_with_pfio() else {
        eprintln!(
            "SKIPPED: no Python with pfio (pip install pfio, or run scripts/test.sh which sets BERTH_TEST_PYTHON)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &[]);
    let admin = token(&node.key, &["--admin"]);
    let http = client();
    bucket(&http, &node.url, &admin, "ds", json!({"projects": ["vision"]})).await;

    let ds = dir.path().join("dataset");
    std::fs::create_dir_all(ds.join("train")).unwrap();
    let n = 12;
    for i in 0..n {
        let body: Vec<u8> = (0..(3000 + 1000 * i)).map(|j| (j * 31 + i) as u8).collect();
        std::fs::write(ds.join("train").join(format!("{i:03}.bin")), body).unwrap();
    }
    // a job-scoped token in a file, as PFIO reads it
    let tok = dir.path().join("token");
    let o = Command::new(BIN)
        .args(["cache", "token", "--projects", "vision", "--sub", "job-1", "--key-file"])
        .arg(&node.key)
        .arg("--out")
        .arg(&tok)
        .output()
        .unwrap();
    assert!(o.status.success());

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pfio_cache.py");
    let o = Command::new(&py)
        .arg(script)
        .arg(&ds)
        .arg(format!("{}/v1/objects/ds/", node.url))
        .env("PFIO_HTTP_BEARER_TOKEN_PATH", &tok)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pfio script failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let m = |s: &'static str| {
        let http = http.clone();
        let url = node.url.clone();
        async move { metric(&http, &url, s).await }
    };
    assert_eq!(m("berth_cache_misses_total{bucket=\"ds\"}").await, n as u64, "pass 1 misses every file");
    assert_eq!(m("berth_cache_puts_total{bucket=\"ds\"}").await, n as u64, "and PFIO stores each one");
    assert_eq!(m("berth_cache_hits_total{bucket=\"ds\"}").await, n as u64, "pass 2 hits every file");
}
