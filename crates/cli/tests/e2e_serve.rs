//! Serving endpoints through the real binary (issue 21): `berth serve` replicas are real HTTP
//! servers (Python's standard library, and busybox httpd in a container), reached through
//! `/serve/NAME/` on the app listener with endpoint tokens.
//!
//! Under steady GET load: a SIGKILLed replica costs no failed request, a rolling update costs
//! none and every later answer comes from the new version, and an update whose replicas never
//! get ready rolls back. Autoscaling goes up under load and back down after it, to zero and
//! up again with a cold start. Streams pass event by event. Access and bad input answer with
//! clear statuses and reasons, and a restarted manager takes its replicas back. A private
//! endpoint cannot be told from a missing one without its token, neither by its answer nor
//! through `/metrics`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Berth, PATIENCE, text};

/// A replica: answers `VERSION pid path`, `/slow` after half a second, `/sse` as three
/// server-sent events half a second apart, `/ws` with an upgrade and then an echo, and
/// `/never` (a health path) with 404.
const SERVER: &str = r#"
import http.server, os, time
VERSION = os.environ.get("VERSION", "v1")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/sse"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(3):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.5)
            self.close_connection = True
            return
        if self.path.startswith("/ws"):
            # An upgrade, then an echo of raw bytes (what a WebSocket carries).
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                b = self.connection.recv(4096)
                if not b:
                    return
                self.connection.sendall(b)
        if self.path.startswith("/never"):
            self.send_error(404)
            return
        if self.path.startswith("/slow"):
            time.sleep(0.5)
        body = f"{VERSION} {os.getpid()} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

/// A manager with two agents on this machine (each replica takes a whole CPU, and CI has
/// two: two nodes of two hold four replicas), with the server script in its home.
fn berth() -> (Berth, String) {
    let b = Berth::cluster("", &[("n1", &[]), ("n2", &[])]);
    let script = b.home.path().join("submit/server.py");
    std::fs::write(&script, SERVER).unwrap();
    (b, script.to_str().unwrap().to_string())
}

/// The endpoint's URL on the app listener (from `berth serve show -o json`).
fn url_of(b: &Berth, name: &str) -> String {
    let v = b.json(&["serve", "show", name]);
    v["url"].as_str().expect("the endpoint's url").replace("localhost", "127.0.0.1")
}

/// An HTTP/1.1 answer: status, head lines, body.
struct Answer {
    status: u16,
    body: String,
}

/// `GET url` over a new connection (`Connection: close`).
fn get(url: &str, token: Option<&str>) -> std::io::Result<Answer> {
    let rest = url.strip_prefix("http://").expect("an http url");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(PATIENCE))?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\r\n")?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let all = String::from_utf8_lossy(&all).to_string();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok(Answer { status, body: body.to_string() })
}

/// Steady GET load from `threads` clients until stopped: answers by version, failures.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<Mutex<Vec<String>>>,
    /// (when, version) of every answer.
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(url: &str, token: &str, threads: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handles = (0..threads)
            .map(|_| {
                let (stop, ok, failed, seen) = (stop.clone(), ok.clone(), failed.clone(), seen.clone());
                let (url, token) = (url.to_string(), token.to_string());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match get(&url, Some(&token)) {
                            Ok(a) if a.status == 200 => {
                                ok.fetch_add(1, Ordering::Relaxed);
                                let v = a.body.split_whitespace().next().unwrap_or("").to_string();
                                seen.lock().unwrap().push((Instant::now(), v));
                            }
                            Ok(a) => failed.lock().unwrap().push(format!("{}: {}", a.status, a.body.trim())),
                            Err(e) => failed.lock().unwrap().push(e.to_string()),
                        }
                    }
                })
            })
            .collect();
        Load { stop, ok, failed, seen, threads: handles }
    }

    /// Stops the clients: (answered, failures).
    fn finish(self) -> (u64, Vec<String>, Vec<(Instant, String)>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        (self.ok.load(Ordering::Relaxed), self.failed.lock().unwrap().clone(), seen)
    }
}

fn ready(v: &Value) -> u64 {
    v["ready"].as_u64().unwrap_or(0)
}

/// The pids of the replicas' servers (`ps`), by their script.
fn server_pids(script: &str) -> Vec<i32> {
    let o = std::process::Command::new("pgrep").args(["-f", script]).output().unwrap();
    text(&o.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[test]
fn a_killed_replica_and_a_rolling_update_cost_no_request_and_a_bad_update_rolls_back() {
    let (b, script) = berth();
    let o = b.cli(&[
        "serve",
        "create",
        "hello",
        "--replicas",
        "2",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--health",
        "/healthz",
        "--probe-period",
        "1s",
        "--start-timeout",
        "8s",
        "--drain-grace",
        "5s",
        "--",
        "python3",
        &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let token = b.ok(&["serve", "token", "create", "hello"]).trim().to_string();
    b.wait_endpoint("hello", "2 ready replicas", |v| ready(v) == 2);
    let url = url_of(&b, "hello");
    let v = b.json(&["serve", "show", "hello"]);
    let mut nodes: Vec<&str> = v["replicas"].as_array().unwrap().iter().filter_map(|r| r["node"].as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "replicas spread over the nodes: {v:#}");
    // Their nodes' agents reached the manager over the loopback, where the replicas listen:
    // everything below (streams, upgrades, HTTP/2, a kill, an update) runs on the direct path.
    assert!(v["replicas"].as_array().unwrap().iter().all(|r| r["route"] == "direct"), "{v:#}");

    // A stream arrives event by event, not when it ends.
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    write!(s, "GET /{path}sse HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let t0 = Instant::now();
    let mut times = Vec::new();
    for line in BufReader::new(s).lines().map_while(Result::ok) {
        if line.starts_with("data: ") {
            times.push(t0.elapsed());
        }
    }
    assert_eq!(times.len(), 3, "three events");
    assert!(times[2] - times[0] >= Duration::from_millis(800), "events came together, buffered: {times:?}");

    // An upgrade passes through, then bytes both ways.
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /{path}ws HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut c = [0u8; 1];
        s.read_exact(&mut c).unwrap();
        head.push(c[0]);
    }
    assert!(text(&head).starts_with("HTTP/1.1 101"), "{}", text(&head));
    s.write_all(b"ping over the tunnel").unwrap();
    let mut echo = [0u8; 20];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping over the tunnel");
    drop(s);

    // HTTP/2 (cleartext, prior knowledge) as well as HTTP/1.1.
    let o = std::process::Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "-H", &format!("Authorization: Bearer {token}")])
        .args(["-w", "\n%{http_version} %{http_code}", &format!("{url}h2")])
        .output()
        .expect("curl (scripts/test.sh installs it)");
    let out = text(&o.stdout);
    assert!(out.ends_with("\n2 200") && out.starts_with("v1 "), "{out}");

    // SIGKILL one replica's server under load: no client sees a failure.
    let load = Load::start(&format!("{url}x"), &token, 4);
    std::thread::sleep(Duration::from_secs(2));
    let pids = server_pids(&script);
    assert_eq!(pids.len(), 2, "two servers: {pids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), nix::sys::signal::Signal::SIGKILL).unwrap();
    let v = b.wait_endpoint("hello", "a replacement", |v| v["restarts"] == 1 && ready(v) == 2);
    std::thread::sleep(Duration::from_secs(1));
    let (ok, failed, _) = load.finish();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed after a kill: {:?}",
        failed.len(),
        ok,
        &failed[..failed.len().min(5)]
    );
    assert!(ok > 20, "the load ran: {ok}");
    assert!(v["message"].as_str().unwrap_or("").contains("SIGKILL"), "{v:#}");

    // A rolling update under load: no error, and once it is done only the new version answers.
    let load = Load::start(&format!("{url}x"), &token, 4);
    let o = b.cli(&["serve", "update", "hello", "--env", "VERSION=v2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = b.wait_endpoint("hello", "the update rolled out", |v| {
        v["rollout"] == "done" && v["revision"] == 2 && ready(v) == 2
    });
    let done = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let (ok, failed, seen) = load.finish();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed in the update: {:?}",
        failed.len(),
        ok,
        &failed[..failed.len().min(5)]
    );
    assert!(seen.iter().any(|(_, v)| v == "v1") && seen.iter().any(|(_, v)| v == "v2"), "both versions answered");
    let late: Vec<&String> = seen.iter().filter(|(t, _)| *t > done).map(|(_, v)| v).collect();
    assert!(!late.is_empty() && late.iter().all(|v| *v == "v2"), "after the update: {late:?}");
    assert!(v["replicas"].as_array().unwrap().iter().all(|r| r["revision"] == 2), "{v:#}");

    // An update whose replicas never get ready rolls back; the endpoint keeps serving v2.
    let load = Load::start(&format!("{url}x"), &token, 2);
    let o = b.cli(&["serve", "update", "hello", "--env", "VERSION=v3", "--health", "/never"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = b.wait_endpoint("hello", "a rollback", |v| v["rollout"] == "rolled-back");
    assert!(v["message"].as_str().unwrap().contains("not ready"), "{v:#}");
    assert_eq!(v["spec"]["job"]["env"]["VERSION"], "v2", "{v:#}");
    b.wait_endpoint("hello", "its old replicas only", |v| {
        ready(v) == 2 && v["replicas"].as_array().unwrap().iter().all(|r| r["revision"] == 2)
    });
    let (_, failed, seen) = load.finish();
    assert!(failed.is_empty(), "the failed update cost requests: {:?}", &failed[..failed.len().min(5)]);
    assert!(seen.iter().all(|(_, v)| v == "v2"), "v3 never served");

    // The replica jobs end with the endpoint.
    let o = b.cli(&["serve", "rm", "hello"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let start = Instant::now();
    while !server_pids(&script).is_empty() {
        assert!(start.elapsed() < PATIENCE, "replicas outlived their endpoint");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&format!("{url}x"), Some(&token)).unwrap().status, 404);
}

#[test]
fn autoscaling_follows_the_load_and_an_idle_endpoint_goes_to_zero_and_wakes() {
    let (b, script) = berth();
    let o = b.cli(&[
        "serve",
        "create",
        "auto",
        "--replicas",
        "1",
        "--min",
        "0",
        "--max",
        "3",
        "--target-inflight",
        "1",
        "--scale-up-cooldown",
        "1s",
        "--scale-down-cooldown",
        "4s",
        "--cold-start-timeout",
        "60s",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--health",
        "/healthz",
        "--probe-period",
        "1s",
        "--public",
        "--",
        "python3",
        &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let url = url_of(&b, "auto");
    // Public: no token needed.
    b.wait_endpoint("auto", "a ready replica", |v| ready(v) == 1);
    assert_eq!(get(&format!("{url}x"), None).unwrap().status, 200);

    // Six clients of half-second requests: about six in flight, so three replicas.
    let load = Load::start(&format!("{url}slow"), "", 6);
    let v = b.wait_endpoint("auto", "three ready replicas", |v| v["desired"] == 3 && ready(v) == 3);
    let (ok, failed, _) = load.finish();
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(5)]);
    assert!(ok > 0);
    let m = b.ok(&["serve", "ls"]);
    assert!(m.contains("3/3"), "{m}\n{v:#}");

    // Idle: down to zero replicas (min 0), then a request starts one and waits for it.
    b.wait_endpoint("auto", "zero replicas", |v| v["desired"] == 0 && v["replicas"].as_array().unwrap().is_empty());
    let t = Instant::now();
    let a = get(&format!("{url}cold"), None).unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("/cold"), "{}", a.body);
    eprintln!("cold start served in {:?}", t.elapsed());

    // The manager's metrics count the endpoint's requests.
    let metrics = get(&format!("{}/metrics", b.url), Some(&b.admin_token())).unwrap().body;
    assert!(metrics.contains("berth_endpoint_requests_total{endpoint=\"auto\",code=\"200\"}"), "{metrics}");
    assert!(metrics.contains("berth_endpoint_request_duration_seconds_count{endpoint=\"auto\"}"), "{metrics}");
}

#[test]
fn endpoint_access_needs_its_token_and_bad_input_says_why() {
    let (b, script) = berth();
    let o = b.cli(&[
        "serve",
        "create",
        "priv",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--probe-period",
        "1s",
        "--",
        "python3",
        &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    b.wait_endpoint("priv", "a ready replica", |v| ready(v) == 1);
    let url = url_of(&b, "priv");
    let token = b.ok(&["serve", "token", "create", "priv", "--label", "ci"]).trim().to_string();
    assert_eq!(get(&format!("{url}x"), Some(&token)).unwrap().status, 200);
    // The owner's own API token works too; nobody else's does.
    assert_eq!(get(&format!("{url}x"), Some(&b.admin_token())).unwrap().status, 200);
    let none = get(&format!("{url}x"), None).unwrap();
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(none.body.contains("berth serve token create priv"), "{}", none.body);
    let other = b.create_user("mallory");
    assert_eq!(get(&format!("{url}x"), Some(&other)).unwrap().status, 404);
    assert_eq!(b.cli_as(&other, &["serve", "show", "priv"]).status.code(), Some(1));
    // A token that may not call it, whatever it is, gets the 404 of a missing endpoint.
    assert_eq!(get(&format!("{url}x"), Some("not-a-token")).unwrap().status, 404);
    let tokens = b.json(&["serve", "token", "ls", "priv"]);
    let id = tokens[0]["id"].as_i64().unwrap().to_string();
    assert!(b.cli(&["serve", "token", "revoke", "priv", &id]).status.success());
    assert_eq!(get(&format!("{url}x"), Some(&token)).unwrap().status, 404, "a revoked token");
    assert!(b.cli(&["serve", "public", "priv", "on"]).status.success());
    assert_eq!(get(&format!("{url}x"), None).unwrap().status, 200, "public");

    // A port that is taken inside the node: the replica fails, is restarted with a backoff,
    // and says why.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let o = b.cli(&[
        "serve", "create", "clash", "--port", &port, "--cpus", "1", "--mem", "256MiB", "--", "python3", &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // PORT is what the replica reads; with --port it is that port, taken here.
    let v = b.wait_endpoint("clash", "a failing replica", |v| v["restarts"].as_u64().unwrap_or(0) >= 2);
    assert!(v["message"].as_str().unwrap().contains("exit code 1"), "{v:#}");
    assert_eq!(ready(&v), 0);
    let a = get(&format!("{}x", url_of(&b, "clash")), Some(&b.admin_token())).unwrap();
    assert_eq!(a.status, 503, "{}", a.body);
    assert!(b.cli(&["serve", "rm", "clash"]).status.success());
    drop(taken);

    // A health path that never answers: restarted after the start timeout, with the reason.
    let o = b.cli(&[
        "serve",
        "create",
        "deaf",
        "--health",
        "/never",
        "--start-timeout",
        "3s",
        "--probe-period",
        "1s",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--",
        "python3",
        &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = b.wait_endpoint("deaf", "a restart", |v| v["restarts"].as_u64().unwrap_or(0) >= 1);
    assert!(v["message"].as_str().unwrap().contains("not ready 3s after it started"), "{v:#}");
    assert!(b.cli(&["serve", "rm", "deaf"]).status.success());

    // More replicas than the node holds: the rest wait, saying for what.
    let o = b.cli(&[
        "serve",
        "create",
        "big",
        "--replicas",
        "9",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--",
        "python3",
        &script,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = b.wait_endpoint("big", "a waiting replica", |v| {
        v["replicas"].as_array().unwrap().iter().any(|r| r["reason"].as_str().is_some_and(|s| s.contains("CPU")))
    });
    assert!(v["ready"].as_u64().unwrap() <= 4);
    assert!(b.cli(&["serve", "rm", "big"]).status.success());

    // Refused at once, with what to do.
    let bad = b.cli(&["serve", "create", "Bad_Name", "--", "python3", &script]);
    assert_ne!(bad.status.code(), Some(0));
    assert!(text(&bad.stderr).contains("invalid endpoint name"), "{}", text(&bad.stderr));
    let dup = b.cli(&["serve", "create", "priv", "--", "python3", &script]);
    assert_eq!(dup.status.code(), Some(1));
    assert!(text(&dup.stderr).contains("already exists"), "{}", text(&dup.stderr));
    let q = b.cli(&["serve", "create", "q", "--queue", "nope", "--", "python3", &script]);
    assert_eq!(q.status.code(), Some(1));
    assert!(text(&q.stderr).contains("unknown queue"), "{}", text(&q.stderr));
}

/// A private endpoint whose replica never gets ready: access is decided before any replica.
fn private_endpoint(b: &Berth, name: &str) {
    let o = b.cli(&["serve", "create", name, "--cpus", "1", "--mem", "64MiB", "--", "sleep", "600"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn a_private_endpoint_answers_like_a_missing_one() {
    let b = Berth::up(&["--no-cache"]);
    private_endpoint(&b, "aserv");
    let url = url_of(&b, "aserv");
    let missing = url.replace("/serve/aserv/", "/serve/nonexist/");
    let other = b.create_user("mallory");
    // Garbage, another user's token, a token of another endpoint: every refusal with a token
    // is the same status and the same body as for an endpoint that does not exist.
    private_endpoint(&b, "bserv");
    let bserv = b.ok(&["serve", "token", "create", "bserv"]).trim().to_string();
    for token in ["garbage", other.as_str(), bserv.as_str()] {
        let private = get(&format!("{url}x"), Some(token)).unwrap();
        let none = get(&format!("{missing}x"), Some(token)).unwrap();
        assert_eq!(private.status, 404, "{}", private.body);
        assert_eq!(none.status, 404, "{}", none.body);
        assert_eq!(private.body.replace("aserv", "NAME"), none.body.replace("nonexist", "NAME"));
        assert!(!private.body.contains("invalid token"), "{}", private.body);
    }
    // Without a token both ask for one, alike.
    let private = get(&format!("{url}x"), None).unwrap();
    let none = get(&format!("{missing}x"), None).unwrap();
    assert_eq!((private.status, none.status), (401, 401));
    assert_eq!(private.body.replace("aserv", "NAME"), none.body.replace("nonexist", "NAME"));
    // The owner still gets in (503: no replica is ready), as does the endpoint's own token.
    assert_eq!(get(&format!("{url}x"), Some(&b.admin_token())).unwrap().status, 503);
    let own = b.ok(&["serve", "token", "create", "aserv"]).trim().to_string();
    assert_eq!(get(&format!("{url}x"), Some(&own)).unwrap().status, 503);
}

#[test]
fn metrics_need_a_token_to_name_endpoints() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("scrape-token");
    std::fs::write(&file, "s3cret-scrape\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let b = Berth::up(&["--no-cache", "--metrics-token-file", file.to_str().unwrap()]);
    private_endpoint(&b, "aserv");
    let metrics = format!("{}/metrics", b.url);
    // The admin sees the endpoint's series (once the controller counted its replicas).
    let start = Instant::now();
    loop {
        let all = get(&metrics, Some(&b.admin_token())).unwrap();
        assert_eq!(all.status, 200, "{}", all.body);
        if all.body.contains("berth_endpoint_replicas{endpoint=\"aserv\"") {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "no endpoint series for the admin: {}", all.body);
        std::thread::sleep(Duration::from_millis(200));
    }
    // Anonymous scrapes still work (Prometheus's default), without a tenant's name.
    let anon = get(&metrics, None).unwrap();
    assert_eq!(anon.status, 200, "{}", anon.body);
    assert!(anon.body.contains("berth_jobs{"), "{}", anon.body);
    assert!(!anon.body.contains("aserv") && !anon.body.contains("endpoint="), "{}", anon.body);
    // The scrape token sees everything; a user's token and garbage are refused, not served
    // less than they asked for.
    let scrape = get(&metrics, Some("s3cret-scrape")).unwrap();
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    assert!(scrape.body.contains("endpoint=\"aserv\""), "{}", scrape.body);
    let user = b.create_user("mallory");
    let refused = get(&metrics, Some(&user)).unwrap();
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(!refused.body.contains("aserv"), "{}", refused.body);
    assert_eq!(get(&metrics, Some("garbage")).unwrap().status, 401);
}

#[test]
fn container_replicas_serve_through_their_endpoint() {
    if !support::docker_ready("container_replicas_serve_through_their_endpoint") {
        return;
    }
    let node = format!("srv{}", std::process::id());
    let b = Berth::cluster("", &[(&node, &[])]);
    // busybox's httpd on the port berth picked ($PORT), in the job's container.
    let serve = "mkdir -p /tmp/www && echo \"container $BERTH_JOB_ID\" > /tmp/www/index.html && exec httpd -f -p $PORT -h /tmp/www";
    let o = b.cli(&[
        "serve",
        "create",
        "boxed",
        "--replicas",
        "2",
        "--image",
        "berth-test/busybox:1",
        "--cpus",
        "1",
        "--mem",
        "128MiB",
        "--probe-period",
        "1s",
        "--public",
        "--",
        "sh",
        "-c",
        serve,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = b.wait_endpoint("boxed", "two ready container replicas", |v| ready(v) == 2);
    let jobs: Vec<i64> = v["replicas"].as_array().unwrap().iter().map(|r| r["job"].as_i64().unwrap()).collect();
    let url = url_of(&b, "boxed");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let a = get(&url, None).unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        seen.insert(a.body.trim().to_string());
    }
    let want: std::collections::BTreeSet<String> = jobs.iter().map(|j| format!("container {j}")).collect();
    assert_eq!(seen, want, "both containers answer, taken in turn");
    assert!(b.cli(&["serve", "rm", "boxed"]).status.success());
    drop(b);
    support::remove_containers(&node);
}

#[test]
fn a_restarted_manager_takes_its_replicas_back() {
    let mut b = Berth::up(&["--no-cache"]);
    let script = b.home.path().join("submit/server.py");
    std::fs::write(&script, SERVER).unwrap();
    let script = script.to_str().unwrap().to_string();
    let o = b.cli(&["serve", "create", "keep", "--cpus", "1", "--mem", "256MiB", "--public", "--", "python3", &script]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = b.wait_endpoint("keep", "a ready replica", |v| ready(v) == 1);
    let job = before["replicas"][0]["job"].clone();
    b.restart();
    // The same replica job serves again; nothing was restarted or started twice.
    let after = b.wait_endpoint("keep", "its replica back", |v| ready(v) == 1);
    assert_eq!(after["replicas"][0]["job"], job, "{after:#}");
    assert_eq!(after["replicas"].as_array().unwrap().len(), 1, "{after:#}");
    assert_eq!(after["restarts"], 0, "{after:#}");
    let a = get(&format!("{}x", url_of(&b, "keep")), None).unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(server_pids(&script).len(), 1);
    eprintln!("replica job {job} kept across the restart: {}", a.body.trim());
}
