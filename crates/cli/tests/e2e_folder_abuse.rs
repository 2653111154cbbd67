//! Folders a hostile user (or their jobs) filled with things the manager must survive (issue
//! 40): a directory tree thousands of levels deep (it overflowed the manager's stack and
//! killed `berth up`), a FIFO (every download of it held a blocking thread forever), partial
//! uploads that were never finished (they escaped the quota and were never cleaned up), and
//! links a job left (a download through one answered 500). Trees, FIFOs and links are made
//! directly in the folder's directory, as a job would through its mount: faster, and the same
//! to the manager.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};
use support::{Berth, PATIENCE, text};

/// `curl` against the manager as `token`: the status and the body. `-m 20`: a request that
/// hangs fails the test instead of hanging it.
fn http(b: &Berth, token: &str, method: &str, path: &str, body: Option<&Path>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-m", "20", "-X", method, "-H", &format!("Authorization: Bearer {token}")]);
    c.args(["-w", "\n%{http_code}"]);
    if let Some(f) = body {
        c.args(["-H", "Content-Type: application/octet-stream", "--data-binary"]).arg(format!("@{}", f.display()));
    }
    let o =
        c.arg(format!("{}{path}", b.url.trim_end_matches('/'))).output().expect("curl (scripts/test.sh installs it)");
    let out = text(&o.stdout);
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The directory of folder `name` on the manager's disk (from the list without uses: `folder
/// show` would measure the folder, and keep the figure for a few seconds).
fn folder_dir(b: &Berth, name: &str) -> PathBuf {
    let (code, body) = http(b, &b.admin_token(), "GET", "/v1/folders", None);
    assert_eq!(code, 200, "{body}");
    let all: serde_json::Value = serde_json::from_str(&body).unwrap();
    let f = all.as_array().unwrap().iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("{body}"));
    b.data.join("folders").join(f["id"].as_i64().unwrap().to_string())
}

/// Folder `data` with one uploaded file, `ok.txt`: its directory on the manager's disk.
fn folder_with_a_file(b: &Berth) -> PathBuf {
    b.ok(&["folder", "create", "data"]);
    let f = b.home.path().join("submit/ok.txt");
    std::fs::write(&f, "fine\n").unwrap();
    b.ok(&["upload", "data", f.to_str().unwrap()]);
    folder_dir(b, "data")
}

fn fails_with(o: &std::process::Output, what: &str) {
    assert!(!o.status.success(), "expected a failure with {what:?}; stdout {}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains(what), "expected {what:?} in: {err}");
}

/// `mkdir d; cd d`, `levels` times, under `dir` (by file descriptor: no path grows), then a
/// 5-byte file `f` at the bottom.
fn nest(dir: &Path, levels: usize) {
    let mut at = nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap();
    for _ in 0..levels {
        mkdirat(Some(at), "d", Mode::from_bits_truncate(0o755)).unwrap();
        let next = openat(Some(at), "d", OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap();
        nix::unistd::close(at).unwrap();
        at = next;
    }
    // Through the descriptor's /proc link: the path itself is far past PATH_MAX.
    std::fs::write(format!("/proc/self/fd/{at}/f"), "deep\n").unwrap();
    nix::unistd::close(at).unwrap();
}

#[test]
fn a_deeply_nested_folder_answers_4xx_and_the_manager_lives() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    b.ok(&["folder", "create", "deep"]);
    let dir = folder_dir(&b, "deep");
    nest(&dir, 3000);

    // Its use is measured however deep it goes (it failed with "File name too long").
    let v = b.json(&["folder", "show", "deep"]);
    assert_eq!(v["files"], 1, "{v:#}");
    assert_eq!(v["used_bytes"], 5, "{v:#}");

    // A listing says what is too deep and the limit (it overflowed the stack and killed berth).
    let (code, body) = http(&b, &token, "GET", "/v1/folders/deep/list", None);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("deeper than 256 levels") && body.contains("d/d/d/"), "{body}");
    let (code, body) = http(&b, &token, "GET", "/v1/folders/deep/list?sha256=true", None);
    assert_eq!(code, 422, "{body}");
    // `berth upload` lists the folder first: a clear refusal, not a crash.
    let f = b.home.path().join("submit/f.txt");
    std::fs::write(&f, "hello\n").unwrap();
    fails_with(&b.cli(&["upload", "deep", f.to_str().unwrap()]), "deeper than 256 levels");
    fails_with(&b.cli(&["download", "deep", "", b.home.path().join("got").to_str().unwrap()]), "deeper than 256");

    // The manager lives, and the folder goes away whole.
    b.ok(&["folder", "ls"]);
    b.ok(&["folder", "rm", "deep", "--yes"]);
    let root = b.data.join("folders");
    let start = Instant::now();
    let left = || {
        std::fs::read_dir(&root).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with(".removed-"))
    };
    while left() {
        assert!(start.elapsed() < PATIENCE, "the deep folder was never deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!dir.exists());
    b.ok(&["folder", "ls"]);
}

#[test]
fn a_fifo_in_a_folder_never_blocks_a_download() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    let dir = folder_with_a_file(&b);
    nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o666)).unwrap();

    // Refused at once, saying what it is (it blocked in open() until a writer came).
    for _ in 0..20 {
        let (code, body) = http(&b, &token, "GET", "/v1/folders/data/files/fifo", None);
        assert_eq!(code, 400, "{body}");
        assert!(body.contains("`fifo` is a FIFO"), "{body}");
    }
    // Listed as what it is, never opened, not even for a checksum.
    for q in ["", "?sha256=true"] {
        let (code, body) = http(&b, &token, "GET", &format!("/v1/folders/data/list{q}"), None);
        assert_eq!(code, 200, "{body}");
        let l: serde_json::Value = serde_json::from_str(&body).unwrap();
        let fifo = l.as_array().unwrap().iter().find(|e| e["path"] == "fifo").unwrap_or_else(|| panic!("{body}"));
        assert_eq!(fifo["kind"], "other", "{body}");
        assert!(fifo.get("sha256").is_none(), "{body}");
    }
    // An upload does not replace it either.
    let sha = sha256_hex(b"fine\n");
    let (code, body) = http(
        &b,
        &token,
        "PUT",
        &format!("/v1/folders/data/files/fifo?offset=0&size=5&sha256={sha}"),
        Some(&b.home.path().join("submit/ok.txt")),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`fifo` is a FIFO (named pipe) in the folder"), "{body}");
    // Everything else still moves: a whole-folder download skips it.
    let got = b.home.path().join("got");
    let o = b.cli(&["download", "data", "", got.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(got.join("ok.txt")).unwrap(), "fine\n");
    assert!(!got.join("fifo").exists());
}

/// Slow downloads of a big file, each holding one of its user's folder slots.
struct Slow(Vec<Child>);

impl Drop for Slow {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn one_user_cannot_take_every_folder_thread() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    b.ok(&["folder", "create", "big"]);
    let dir = folder_dir(&b, "big");
    std::fs::File::create(dir.join("big.bin")).unwrap().set_len(256 << 20).unwrap();
    let url = format!("{}/v1/folders/big/files/big.bin", b.url.trim_end_matches('/'));
    let slow = Slow(
        (0..12)
            .map(|_| {
                Command::new("curl")
                    .args(["-s", "-o", "/dev/null", "--limit-rate", "1k", "-m", "120"])
                    .args(["-H", &format!("Authorization: Bearer {token}"), &url])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    // Soon the admin's slots are all taken: a clear 429 naming the limit.
    let start = Instant::now();
    let body = loop {
        let (code, body) = http(&b, &token, "GET", "/v1/folders/big/list", None);
        if code == 429 {
            break body;
        }
        assert_eq!(code, 200, "{body}");
        assert!(start.elapsed() < PATIENCE, "12 slow downloads never filled the user's folder slots");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.contains("8 folder operations"), "{body}");
    // Another user's transfers go on.
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["folder", "create", "mine"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let f = b.home.path().join("submit/x.txt");
    std::fs::write(&f, "bob's\n").unwrap();
    let o = b.cli_as(&bob, &["upload", "mine", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = b.home.path().join("bob.txt");
    let o = b.cli_as(&bob, &["download", "mine", "x.txt", got.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    drop(slow);
    // The slots come back once the downloads end.
    let start = Instant::now();
    while http(&b, &token, "GET", "/v1/folders/big/list", None).0 != 200 {
        assert!(start.elapsed() < PATIENCE, "the slots never came back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn partial_uploads_count_against_the_folder_quota() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    b.ok(&["folder", "create", "q", "--quota", "1MiB"]);
    let piece = b.home.path().join("piece");
    std::fs::write(&piece, vec![7u8; 921_600]).unwrap();
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/q/files/p0.bin?offset=0&size=921600", Some(&piece));
    assert_eq!(code, 200, "{body}");
    // A second unfinished upload does not fit beside the first (both were accepted).
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/q/files/p1.bin?offset=0&size=921600", Some(&piece));
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("folder q is over its quota") && body.contains("unfinished uploads"), "{body}");
    // A size past what the spec states (i64) is refused as such, not judged against the quota
    // (Schemathesis: accepted with a 413 on a folder with a quota, a 200 without).
    let huge = "/v1/folders/q/files/p2.bin?offset=0&size=9223372036854775808";
    let (code, body) = http(&b, &token, "PUT", huge, Some(&piece));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`size` is 9223372036854775808"), "{body}");
    // Announcing a smaller size does not help: the bytes count as they come.
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/q/files/p2.bin?offset=0", Some(&piece));
    assert_eq!(code, 413, "{body}");
    let uploads = b.data.join("folders/.uploads");
    assert!(sizes(&uploads) < 2 * 921_600, "refused uploads left their bytes: {}", sizes(&uploads));
    // Finished, the first counts as the folder's own.
    let sha = sha256_hex(&std::fs::read(&piece).unwrap());
    let (code, body) =
        http(&b, &token, "PUT", &format!("/v1/folders/q/files/p0.bin?offset=921600&size=921600&sha256={sha}"), None);
    assert_eq!(code, 201, "{body}");
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/q/files/p1.bin?offset=0&size=921600", Some(&piece));
    assert_eq!(code, 413, "{body}");

    // One user may keep only so many unfinished uploads at once.
    b.ok(&["folder", "create", "nq"]);
    let small = b.home.path().join("small");
    std::fs::write(&small, "12345").unwrap();
    for i in 0..16 {
        let (code, body) =
            http(&b, &token, "PUT", &format!("/v1/folders/nq/files/s{i}?offset=0&size=10"), Some(&small));
        assert_eq!(code, 200, "{i}: {body}");
    }
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/nq/files/s16?offset=0&size=10", Some(&small));
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("16 unfinished uploads"), "{body}");
    // Resuming one of them is no new upload.
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/nq/files/s3?offset=5&size=10", Some(&small));
    assert_eq!(code, 200, "{body}");
    // Another user is not held to the admin's count.
    let bob = b.create_user("bob");
    assert!(b.cli_as(&bob, &["folder", "create", "bobs"]).status.success());
    let (code, body) = http(&b, &bob, "PUT", "/v1/folders/bobs/files/s?offset=0&size=10", Some(&small));
    assert_eq!(code, 200, "{body}");
}

#[test]
fn abandoned_partial_uploads_expire() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    b.ok(&["folder", "create", "nq"]);
    let small = b.home.path().join("small");
    std::fs::write(&small, "12345").unwrap();
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/nq/files/old?offset=0&size=10", Some(&small));
    assert_eq!(code, 200, "{body}");
    let (code, body) = http(&b, &token, "PUT", "/v1/folders/nq/files/new?offset=0&size=10", Some(&small));
    assert_eq!(code, 200, "{body}");
    let (_, body) = http(&b, &token, "GET", "/v1/folders/nq/uploads/old", None);
    assert!(body.contains("\"have\":5"), "{body}");
    // `old` untouched for 25 hours (its partial file's time, as a day's wait would leave it).
    let uploads = b.data.join("folders/.uploads");
    let old = partials(&uploads).into_iter().find(|p| std::fs::read(p).is_ok_and(|b| b == b"12345")).unwrap();
    let day_ago = SystemTime::now() - Duration::from_secs(25 * 3600);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(day_ago).unwrap();
    let (code, _) = http(&b, &token, "PUT", "/v1/folders/nq/files/new?offset=5&size=10", Some(&small));
    assert_eq!(code, 200);
    // The next upload swept it away; the fresh one stays.
    let f = b.home.path().join("submit/f.txt");
    std::fs::write(&f, "hello\n").unwrap();
    b.ok(&["upload", "nq", f.to_str().unwrap()]);
    assert!(!old.exists(), "the abandoned partial upload is still there");
    let (_, body) = http(&b, &token, "GET", "/v1/folders/nq/uploads/old", None);
    assert!(body.contains("\"have\":0"), "{body}");
    let (_, body) = http(&b, &token, "GET", "/v1/folders/nq/uploads/new", None);
    assert!(body.contains("\"have\":10"), "{body}");
}

#[test]
fn a_job_made_symlink_download_is_a_4xx() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    let dir = folder_with_a_file(&b);
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/in.txt"), "in\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("out")).unwrap();
    std::os::unix::fs::symlink("ok.txt", dir.join("inside")).unwrap();
    std::os::unix::fs::symlink("sub", dir.join("subl")).unwrap();
    for (path, link) in [("out", "out"), ("inside", "inside"), ("subl/in.txt", "subl")] {
        let (code, body) = http(&b, &token, "GET", &format!("/v1/folders/data/files/{path}"), None);
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(&format!("`{link}` is a symbolic link")), "{path}: {body}");
        assert!(!body.contains("root:"), "{body}");
    }
    let (code, body) = http(&b, &token, "GET", "/v1/folders/data/files/ok.txt", None);
    assert_eq!((code, body.as_str()), (200, "fine\n"));
}

/// Every file under `dir`.
fn partials(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return vec![] };
    rd.flatten().flat_map(|e| if e.path().is_dir() { partials(&e.path()) } else { vec![e.path()] }).collect()
}

fn sizes(dir: &Path) -> u64 {
    partials(dir).iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
}

fn sha256_hex(b: &[u8]) -> String {
    let o = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b)?;
            c.wait_with_output()
        })
        .unwrap();
    text(&o.stdout).split_whitespace().next().unwrap().to_string()
}
