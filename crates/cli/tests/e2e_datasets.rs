//! Datasets prefetched into the node's cache before a job runs (`--dataset BUCKET/PREFIX`,
//! docs/datasets.md), on a cluster of two agents, each with its own cache node (separate
//! `berth cache serve` processes, as on two machines): the job finds every file in its node's
//! cache when it starts and a PFIO read of the dataset is all hits; a second job with the
//! same dataset is placed on the node whose cache holds it, `berth show` says so, and its
//! prefetch sends nothing. Bad datasets are refused with what to fix.

mod cache_support;
mod support;

use std::process::Command;

use cache_support::{Node, client, metric, wait_bucket};
use serde_json::Value;
use support::{Berth, text};

/// A Python with PFIO: `BERTH_TEST_PYTHON` (scripts/test.sh makes the venv). Required on CI.
fn python_with_pfio() -> Option<String> {
    let py = std::env::var("BERTH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py).args(["-c", "import pfio.v2"]).output().is_ok_and(|o| o.status.success());
    if !ok && std::env::var("CI").as_deref() == Ok("true") {
        panic!("no Python with pfio on CI: scripts/test.sh installs it and sets BERTH_TEST_PYTHON");
    }
    ok.then_some(py)
}

/// A dataset origin: `train/` (24 files, some past the cache's 256 KiB memory-tier size),
/// `val/`, and a link in `train/` to a file outside the origin.
fn origin(dir: &std::path::Path) -> (std::path::PathBuf, u64) {
    let o = dir.join("origin");
    std::fs::create_dir_all(o.join("train/shard")).unwrap();
    std::fs::create_dir_all(o.join("val")).unwrap();
    let mut bytes = 0;
    for i in 0..24u64 {
        let size = 1000 + i * 23_000;
        let body: Vec<u8> = (0..size).map(|j| (j * 7 + i) as u8).collect();
        let sub = if i % 3 == 0 { "train/shard" } else { "train" };
        std::fs::write(o.join(format!("{sub}/{i:03}.bin")), body).unwrap();
        bytes += size;
    }
    std::fs::write(o.join("val/v.bin"), b"validation").unwrap();
    std::fs::write(dir.join("secret"), b"not for the cache").unwrap();
    std::os::unix::fs::symlink(dir.join("secret"), o.join("train/link.bin")).unwrap();
    (o, bytes)
}

fn node_of(b: &Berth, id: i64) -> String {
    b.job(id)["job"]["nodes"][0].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_dataset_is_cached_before_the_job_and_the_next_job_goes_where_it_is() {
    let Some(py) = python_with_pfio() else {
        eprintln!("SKIPPED: no Python with pfio (run scripts/test.sh, which sets BERTH_TEST_PYTHON)");
        return;
    };
    let dir = support::shared_tempdir();
    let (origin, bytes) = origin(dir.path());
    let key = dir.path().join("cache.key");
    let caches: Vec<Node> = (0..2).map(|i| Node::start(&dir.path().join(format!("c{i}")), &key, 0, &[])).collect();
    let urls: Vec<String> = caches.iter().map(|c| c.url.clone()).collect();
    let admin = cache_support::token(&key, &["--admin"]);
    let key_arg = key.display().to_string();
    let b = Berth::cluster_with(
        "",
        &["--cache-key-file", &key_arg],
        &[("n1", &["--cache-url", &urls[0]]), ("n2", &["--cache-url", &urls[1]])],
    );
    let o = origin.display().to_string();
    b.ok(&["cache", "bucket", "create", "ds", "--public", "--origin", &o, "--placement", "node"]);
    let http = client();
    for u in &urls {
        wait_bucket(&http, u, &admin, "ds").await;
    }

    // A job filling a node first, so that the dataset job lands on the node a pass would not
    // choose by itself.
    let blocker = b.submit(&["--cpus", "2", "--", "sleep", "600"]);
    b.wait_state(blocker, "RUNNING");
    let default_node = node_of(&b, blocker);
    // beside the origin: a job's /tmp is its own, and CI clones the repository under /tmp
    let script = dir.path().join("pfio_dataset.py");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pfio_dataset.py"), &script).unwrap();
    let first = b.submit(&["--cpus", "2", "--dataset", "ds/train/", "--", &py, script.to_str().unwrap()]);
    b.wait_state(first, "SUCCEEDED");
    let data_node = node_of(&b, first);
    assert_ne!(data_node, default_node);
    let cache_url = &urls[if data_node == "n1" { 0 } else { 1 }];
    let other_url = &urls[if data_node == "n1" { 1 } else { 0 }];

    let out = b.ok(&["logs", &first.to_string()]);
    assert!(out.contains("cached at start: 24 of 24"), "{out}");
    assert!(out.contains("pfio read 24 files, every byte equal"), "{out}");
    let hits = metric(&http, cache_url, "berth_cache_hits_total{bucket=\"ds\"}").await;
    let misses = metric(&http, cache_url, "berth_cache_misses_total{bucket=\"ds\"}").await;
    assert_eq!((hits, misses), (24, 0), "PFIO's reads were all hits");
    // a node bucket: the copies are on the job's node only
    let on = |url: String| {
        let http = http.clone();
        let admin = admin.clone();
        async move {
            let v: Value = http
                .get(format!("{url}/v1/buckets/ds/usage"))
                .bearer_auth(&admin)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (v["objects"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
        }
    };
    assert_eq!(on(cache_url.clone()).await, (24, bytes), "train/ and nothing else: not val/, not the link");
    assert_eq!(on(other_url.clone()).await, (0, 0));
    let setup = b.ok(&["logs", "--setup", &first.to_string()]);
    assert!(setup.contains("dataset ds/train/: 24 files"), "{setup}");
    assert!(setup.contains("24 files sent, 0 already cached, 0 not cached"), "{setup}");
    let show = b.ok(&["show", &first.to_string()]);
    assert!(show.contains("dataset:") && show.contains("ds/train/"), "{show}");
    assert!(show.contains("PREPARING"), "the prefetch is a PREPARING step: {show}");

    // Both nodes free: the same dataset goes where it is cached, and nothing is sent again.
    b.ok(&["cancel", &blocker.to_string()]);
    b.wait_state(blocker, "CANCELLED");
    let second = b.submit(&["--cpus", "2", "--dataset", "ds/train/", "--", "sh", "-c", "echo $BERTH_DATASETS"]);
    b.wait_state(second, "SUCCEEDED");
    assert_eq!(node_of(&b, second), data_node, "placed away from its cached dataset");
    let show = b.ok(&["show", &second.to_string()]);
    let why = format!("scheduled on {data_node}: its cache holds");
    assert!(show.contains(&why) && show.contains("as much as any node"), "{show}");
    let setup = b.ok(&["logs", "--setup", &second.to_string()]);
    assert!(setup.contains("0 files sent, 24 already cached"), "{setup}");
    let env = b.ok(&["logs", &second.to_string()]);
    assert!(env.contains("\"dataset\":\"ds/train/\"") && env.contains(&format!("{}/train", o)), "{env}");
}

#[test]
fn bad_datasets_are_refused_with_what_to_fix() {
    let b = Berth::up(&[]);
    let dir = support::shared_tempdir();
    let (origin, _) = origin(dir.path());
    let o = origin.display().to_string();
    b.ok(&["cache", "bucket", "create", "ds", "--public", "--origin", &o]);
    b.ok(&["cache", "bucket", "create", "plain", "--public"]);

    let refused = |args: &[&str], want: &str| {
        let mut all = vec!["submit"];
        all.extend_from_slice(args);
        all.extend(["--", "true"]);
        let out = b.cli(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        let e = text(&out.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    };
    refused(&["--dataset", "nosuch/x"], "there is no cache bucket `nosuch`");
    refused(&["--dataset", "plain/x"], "has no origin to prefetch from");
    refused(&["--dataset", "Bad/x"], "invalid dataset `Bad/x`");
    refused(&["--dataset", "ds/../etc"], "without `.`, `..`");
    refused(&["--dataset", "ds/a", "--dataset", "ds/a"], "named twice");

    // a prefix that matches nothing fails the job before it runs, saying why
    let id = b.submit(&["--dataset", "ds/trian/", "--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("no file under") && reason.contains("trian/"), "{d}");
    // `train` (no slash) is S3's prefix: train/ and anything else starting so
    let id = b.submit(&["--dataset", "ds/train", "--", "sh", "-c", "echo $BERTH_DATASET_PATH"]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]).trim(), o);
}

#[test]
fn a_container_job_reads_its_dataset_from_the_cache_and_the_origin_read_only() {
    if !support::docker_ready("a_container_job_reads_its_dataset_from_the_cache_and_the_origin_read_only") {
        return;
    }
    let b = Berth::up(&[]);
    let dir = support::shared_tempdir();
    let (origin, _) = origin(dir.path());
    let o = origin.display().to_string();
    b.ok(&["cache", "bucket", "create", "ds", "--public", "--origin", &o, "--placement", "node"]);
    // PFIO's key of a local file is `file:/` and its absolute path
    let read = "wc -c < $BERTH_DATASET_PATH/001.bin; \
                wget -q -O - \"${BERTH_DATASET_HTTP_CACHE}file:/$BERTH_DATASET_PATH/001.bin\" | wc -c; \
                touch $BERTH_DATASET_PATH/new 2>&1 || echo refused";
    let id = b.submit(&["--image", "berth-test/busybox:1", "--dataset", "ds/train/", "--", "sh", "-c", read]);
    b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(&lines[..2], ["24000", "24000"], "the origin bound and the cache reached: {out}");
    assert!(out.contains("Read-only file system") && out.contains("refused"), "{out}");
    assert!(!origin.join("train/new").exists());
}
