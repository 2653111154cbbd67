//! The router's direct path to serving replicas (issue 42), through the real binary: a
//! replica whose node's address reaches its port is called straight at `node:port`, one whose
//! node's address does not is called through its agent's tunnel, and the direct path refuses
//! exactly what the tunnel refuses, before any request reaches the replica.
//!
//! Which path a request took is seen by the replica itself: it answers with the local address
//! the connection came in on. The agents run on this machine with `--address` saying where
//! their node is reached: `127.0.0.2` (the replica listens on every address, so a direct
//! connection arrives there), or `::1` (the replica listens on IPv4 only: a direct connection
//! is refused, and the tunnel, which connects from the agent to `127.0.0.1`, is used).

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;
use support::{Berth, PATIENCE, text};

/// A replica on every address of `$PORT`: answers `ADDRESS COUNT` (the local address of the
/// connection, and how many requests it answered before this one, health probes left out).
const SERVER: &str = r#"
import http.server, os, threading
lock = threading.Lock()
seen = [0]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/healthz"):
            body = b"ok\n"
        else:
            with lock:
                n = seen[0]
                seen[0] += 1
            body = f"{self.connection.getsockname()[0]} {n}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
"#;

/// An answer: status, the replica that gave it (`x-berth-replica`), body.
struct Answer {
    status: u16,
    replica: Option<i64>,
    body: String,
}

/// `GET url` over a new connection, with `token` as a bearer token.
fn get(url: &str, token: Option<&str>) -> Answer {
    let rest = url.strip_prefix("http://").expect("an http url");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let all = text(&all);
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let replica = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("x-berth-replica")))
        .and_then(|(_, v)| v.trim().parse().ok());
    Answer { status, replica, body: body.to_string() }
}

/// A replica that moves: on every address of `$PORT` until `GET /move`, which closes that
/// listener and listens on the loopback only (as a server restarted with another bind
/// would); every answer closes its connection, so each request opens a new one. Answers
/// `ADDRESS COUNT` like [`SERVER`].
const MOVING_SERVER: &str = r#"
import http.server, os, threading, time
port = int(os.environ["PORT"])
lock = threading.Lock()
seen = [0]
servers = []
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/healthz"):
            body = b"ok\n"
        elif self.path.startswith("/move"):
            old = servers[-1]
            old.shutdown()
            old.server_close()
            start("127.0.0.1")
            body = b"moved\n"
        else:
            with lock:
                n = seen[0]
                seen[0] += 1
            body = f"{self.connection.getsockname()[0]} {n}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
    def log_message(self, *a):
        pass
def start(addr):
    s = http.server.ThreadingHTTPServer((addr, port), H)
    servers.append(s)
    threading.Thread(target=s.serve_forever, daemon=True).start()
start("0.0.0.0")
while True:
    time.sleep(3600)
"#;

/// A cluster of `agents` (name, `--address`) with the server script; endpoint `name` of one
/// replica per agent, ready; its URL and a token.
fn endpoint(agents: &[(&str, &str)], name: &str) -> (Berth, String, String) {
    endpoint_of(agents, name, SERVER)
}

/// [`endpoint`], its replicas running `server`.
fn endpoint_of(agents: &[(&str, &str)], name: &str, server: &str) -> (Berth, String, String) {
    let flags: Vec<[&str; 2]> = agents.iter().map(|(_, a)| ["--address", *a]).collect();
    let spec: Vec<(&str, &[&str])> = agents.iter().zip(&flags).map(|((n, _), f)| (*n, &f[..])).collect();
    let b = Berth::cluster("", &spec);
    let script = b.home.path().join("submit/server.py");
    std::fs::write(&script, server).unwrap();
    let replicas = agents.len().to_string();
    let o = b.cli(&[
        "serve",
        "create",
        name,
        "--replicas",
        &replicas,
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--health",
        "/healthz",
        "--probe-period",
        "1s",
        "--",
        "python3",
        script.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    b.wait_endpoint(name, "its replicas ready", |v| v["ready"].as_u64() == Some(agents.len() as u64));
    let v = b.json(&["serve", "show", name]);
    let url = v["url"].as_str().expect("the endpoint's url").replace("localhost", "127.0.0.1");
    let token = b.ok(&["serve", "token", "create", name]).trim().to_string();
    (b, url, token)
}

/// Each replica's job, by node, and its route as `serve show` says it.
fn routes(v: &Value) -> HashMap<String, (i64, String)> {
    let rs = v["replicas"].as_array().unwrap();
    rs.iter()
        .map(|r| {
            let node = r["node"].as_str().unwrap().to_string();
            (node, (r["job"].as_i64().unwrap(), r["route"].as_str().unwrap_or("undecided").to_string()))
        })
        .collect()
}

#[test]
fn a_reachable_replica_is_called_directly_and_an_unreachable_one_through_its_agent() {
    let (b, url, token) = endpoint(&[("near", "127.0.0.2"), ("far", "::1")], "split");
    let v = b.json(&["serve", "show", "split"]);
    let routes = routes(&v);
    let (near, near_route) = routes["near"].clone();
    let (far, far_route) = routes["far"].clone();
    assert_eq!(near_route, "direct", "{v:#}");
    assert_eq!(far_route, "tunnel", "a refused direct connection falls back: {v:#}");
    let shown = b.ok(&["serve", "show", "split"]);
    assert!(shown.contains("ROUTE") && shown.contains("direct") && shown.contains("tunnel"), "{shown}");

    // Each replica sees its requests arrive where its route says: at the node's address, or
    // from the agent at the loopback.
    let mut from: HashMap<i64, Vec<String>> = HashMap::new();
    for _ in 0..12 {
        let a = get(&format!("{url}x"), Some(&token));
        assert_eq!(a.status, 200, "{}", a.body);
        let addr = a.body.split_whitespace().next().unwrap_or_default().to_string();
        from.entry(a.replica.expect("x-berth-replica")).or_default().push(addr);
    }
    assert!(from.len() == 2, "both replicas answered: {from:?}");
    assert!(from[&near].iter().all(|a| a == "127.0.0.2"), "direct to the node's address: {from:?}");
    assert!(from[&far].iter().all(|a| a == "127.0.0.1"), "through the agent: {from:?}");
}

#[test]
fn the_direct_path_refuses_what_the_tunnel_refuses() {
    let (b, url, token) = endpoint(&[("n1", "127.0.0.2")], "guarded");
    let v = b.json(&["serve", "show", "guarded"]);
    assert_eq!(routes(&v)["n1"].1, "direct", "{v:#}");
    let first = get(&format!("{url}x"), Some(&token));
    assert_eq!((first.status, first.body.as_str()), (200, "127.0.0.2 0\n"), "called directly");

    // Every refusal is decided before routing: none reaches the replica.
    let none = get(&format!("{url}x"), None);
    assert_eq!(none.status, 401, "{}", none.body);
    let other = b.create_user("mallory");
    let another = {
        let o = b.cli(&["serve", "create", "other", "--cpus", "1", "--mem", "64MiB", "--", "sleep", "600"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        b.ok(&["serve", "token", "create", "other"]).trim().to_string()
    };
    for (who, t) in [("garbage", "not-a-token"), ("another user", other.as_str()), ("another endpoint's", &another)] {
        let a = get(&format!("{url}x"), Some(t));
        assert_eq!(a.status, 404, "{who}: {}", a.body);
    }
    let tokens = b.json(&["serve", "token", "ls", "guarded"]);
    let id = tokens[0]["id"].as_i64().unwrap().to_string();
    assert!(b.cli(&["serve", "token", "revoke", "guarded", &id]).status.success());
    assert_eq!(get(&format!("{url}x"), Some(&token)).status, 404, "a revoked token");
    let owner = get(&format!("{url}x"), Some(&b.admin_token()));
    assert_eq!((owner.status, owner.body.as_str()), (200, "127.0.0.2 1\n"), "the refusals never reached it");

    // Public: no token needed, on the same direct path.
    assert!(b.cli(&["serve", "public", "guarded", "on"]).status.success());
    let open = get(&format!("{url}x"), None);
    assert_eq!((open.status, open.body.as_str()), (200, "127.0.0.2 2\n"));
}

#[test]
fn a_direct_connection_refused_after_the_decision_falls_back_to_the_tunnel_without_a_failed_request() {
    let (b, url, token) = endpoint_of(&[("n1", "127.0.0.2")], "moving", MOVING_SERVER);
    let v = b.json(&["serve", "show", "moving"]);
    assert_eq!(routes(&v)["n1"].1, "direct", "{v:#}");
    let first = get(&format!("{url}x"), Some(&token));
    assert_eq!((first.status, first.body.as_str()), (200, "127.0.0.2 0\n"), "called directly");

    // The replica leaves the node's address: the route still says direct, the next direct
    // connection is refused, and the same request goes through the agent instead.
    let moved = get(&format!("{url}move"), Some(&token));
    assert_eq!((moved.status, moved.body.as_str()), (200, "moved\n"));
    for n in 1..6 {
        let a = get(&format!("{url}x"), Some(&token));
        assert_eq!((a.status, a.body.as_str()), (200, format!("127.0.0.1 {n}\n").as_str()), "through the agent");
    }
    // The failure left the replica undecided, never out of rotation; its next passing probe
    // decides again (directly to the node's loopback, where it listens now: the node is this
    // machine).
    b.wait_endpoint("moving", "its route decided again", |v| {
        v["replicas"][0]["route"].is_string() && v["ready"].as_u64() == Some(1)
    });
    let after = get(&format!("{url}x"), Some(&token));
    assert_eq!((after.status, after.body.as_str()), (200, "127.0.0.1 6\n"));
}

#[test]
fn a_pooled_connection_the_replica_closed_while_idle_is_not_the_replicas_failure() {
    // The replica closes a connection after 0.4 s without a request (as servers with a
    // keep-alive timeout do); the router's pooled connection to it is closed by then.
    let server = SERVER
        .replace("    protocol_version = \"HTTP/1.1\"\n", "    protocol_version = \"HTTP/1.1\"\n    timeout = 0.4\n");
    let (b, url, token) = endpoint_of(&[("n1", "127.0.0.2")], "idle", &server);
    for n in 0..3 {
        let a = get(&format!("{url}x"), Some(&token));
        assert_eq!((a.status, a.body.as_str()), (200, format!("127.0.0.2 {n}\n").as_str()));
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let v = b.json(&["serve", "show", "idle"]);
    assert_eq!((v["ready"].as_u64(), routes(&v)["n1"].1.as_str()), (Some(1), "direct"), "still in rotation: {v:#}");
}
