//! Cross-site attacks on the dashboard's session, through the real binary (issue 40, item 1):
//! a page one user serves from berth (a public endpoint) that opens exec WebSockets into the
//! jobs of whoever visits it, in a real headless Chromium; the same handshake sent by hand
//! with the session cookie and another origin; `berth open`'s app cookie used as an API
//! token; and apps served on hosts of their own.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::browser::{self, Browser};
use support::{Berth, PATIENCE, shared_tempdir, text};

/// One HTTP/1.1 exchange (`Connection: close`) to `addr` with the request's head lines: the
/// status and the head.
fn exchange(addr: &str, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    // Up to the end of the head: a 101 keeps the connection open.
    while !all.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
    let all = String::from_utf8_lossy(&all).to_string();
    let status = all.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, all)
}

/// `host:port` of an http URL.
fn authority(url: &str) -> String {
    url.trim_start_matches("http://").split('/').next().unwrap().to_string()
}

/// A dashboard session for the berth's admin: the cookie's value, from `berth ui`'s link.
fn dashboard_session(b: &Berth) -> String {
    let link = text(&b.cli(&["ui"]).stdout).trim().to_string();
    let path = link.trim_start_matches(&b.url).to_string();
    let api = authority(&b.url);
    let (status, head) = exchange(&api, &format!("GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 303, "{head}");
    let cookie = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie: berth_session=")).expect(&head);
    cookie.split_once('=').unwrap().1.split(';').next().unwrap().to_string()
}

/// The port the app proxy listens on (from a public endpoint's URL or an app's).
fn port_of(url: &str) -> u16 {
    authority(url).rsplit(':').next().unwrap().parse().unwrap()
}

/// What the attacker's page does to each visitor: steal the CSRF token, then open an exec
/// WebSocket into each of the first jobs and run a command that names who it ran as.
const ATTACK_PAGE: &str = r#"<!doctype html><meta charset="utf-8"><title>bpage</title><pre id="out">working</pre>
<script>
const api = "ws://127.0.0.1:API_PORT";
const out = { opened: [], output: "", refused: [], session: null };
async function go() {
  try {
    const r = await fetch(api.replace("ws:", "http:") + "/ui/session", { credentials: "include" });
    out.session = r.status + " " + (await r.text());
  } catch (e) { out.session = "blocked: " + e; }
  for (let id = 1; id <= LAST_ID; id++) {
    await new Promise((done) => {
      const ws = new WebSocket(api + "/v1/jobs/" + id + "/exec");
      ws.binaryType = "arraybuffer";
      ws.onopen = () => {
        out.opened.push(id);
        ws.send(JSON.stringify({ command: ["sh", "-c", "echo HIJACKED uid=$(id -u) job=$BERTH_JOB_ID"] }));
      };
      ws.onmessage = (e) => {
        if (e.data instanceof ArrayBuffer) {
          const b = new Uint8Array(e.data);
          if (b[0] === 1) out.output += new TextDecoder().decode(b.slice(1));
        }
      };
      ws.onerror = () => out.refused.push(id);
      ws.onclose = () => done();
      setTimeout(done, 10000);
    });
  }
  window.RESULT = JSON.stringify(out);
  document.getElementById("out").textContent = window.RESULT;
}
go();
</script>
"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_page_served_by_berth_cannot_run_commands_in_its_visitors_jobs() {
    if !browser::available("a_page_served_by_berth_cannot_run_commands_in_its_visitors_jobs") {
        return;
    }
    let b = Berth::up(&[]);
    // The victim, an admin, has a job running.
    let victim = b.submit(&["--", "sleep", "600"]);
    b.wait_state(victim, "RUNNING");
    // The attacker serves a public page.
    let bob = b.create_user("atkb");
    let api_port = port_of(&b.url);
    let www = shared_tempdir();
    std::fs::set_permissions(www.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let page = ATTACK_PAGE.replace("API_PORT", &api_port.to_string()).replace("LAST_ID", &(victim + 2).to_string());
    std::fs::write(www.path().join("index.html"), page).unwrap();
    std::fs::set_permissions(www.path().join("index.html"), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .unwrap();
    let serve = format!("exec python3 -m http.server --bind 127.0.0.1 $PORT --directory {}", www.path().display());
    let o = b.cli_as(
        &bob,
        &["serve", "create", "bpage", "--public", "--cpus", "1", "--mem", "256MiB", "--", "sh", "-c", &serve],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let start = Instant::now();
    let url = loop {
        let v: serde_json::Value =
            serde_json::from_str(&text(&b.cli_as(&bob, &["serve", "show", "bpage", "-o", "json"]).stdout))
                .unwrap_or_default();
        let ready = v["replicas"].as_array().is_some_and(|r| r.iter().any(|x| x["state"] == "ready"));
        if ready {
            break v["url"].as_str().unwrap().replace("localhost", "127.0.0.1");
        }
        assert!(start.elapsed() < PATIENCE, "the endpoint never became ready: {v:#}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let link = text(&b.cli(&["ui"]).stdout).trim().to_string();
    runtime().block_on(async {
        let br = Browser::start().await;
        // The victim logs in to the dashboard, then visits the attacker's page.
        br.client.goto(&link).await.unwrap();
        br.wait_text("#who", "admin").await;
        br.client.goto(&url).await.unwrap();
        let start = Instant::now();
        let result = loop {
            let r = br.js("return window.RESULT || null;").await;
            if let Some(s) = r.as_str() {
                break serde_json::from_str::<serde_json::Value>(s).unwrap();
            }
            assert!(
                start.elapsed() < PATIENCE * 2,
                "the page never finished: {}",
                br.js("return document.body.innerText;").await
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        eprintln!("what the page got: {result}");
        br.screenshot("cross-site-attack").await;
        br.close().await;
        assert!(
            !result["output"].as_str().unwrap().contains("HIJACKED"),
            "a visitor's job ran the page's command: {result:#}"
        );
        assert_eq!(
            result["opened"],
            serde_json::json!([]),
            "exec WebSockets opened with the visitor's session: {result:#}"
        );
        let session = result["session"].as_str().unwrap_or("");
        assert!(!session.contains("csrf\":\""), "the page read the dashboard's CSRF token: {session}");
    });
    assert_eq!(b.state(victim), "RUNNING");
}

#[test]
fn an_exec_websocket_with_the_session_cookie_from_another_origin_is_refused() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "sleep", "600"]);
    b.wait_state(id, "RUNNING");
    let session = dashboard_session(&b);
    let api = authority(&b.url);
    let apps_port = api.rsplit(':').next().unwrap().parse::<u16>().unwrap() + 1;
    let handshake = |origin: &str, extra: &str| {
        format!(
            "GET /v1/jobs/{id}/exec{extra} HTTP/1.1\r\nHost: {api}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: {origin}\r\n\
             Cookie: berth_session={session}\r\n\r\n"
        )
    };
    // The app proxy's port of the same host, and a per-app host name: both refused.
    for origin in
        [format!("http://127.0.0.1:{apps_port}"), format!("http://{id}-web.localhost:{apps_port}"), "null".into()]
    {
        let (status, head) = exchange(&api, &handshake(&origin, ""));
        assert_eq!(status, 403, "Origin {origin}: {head}");
        assert!(head.contains("cross-site request refused"), "{head}");
    }
    // Same-site fetch metadata is refused too, whatever the Origin.
    let (status, head) = exchange(
        &api,
        &format!(
            "GET /v1/jobs HTTP/1.1\r\nHost: {api}\r\nSec-Fetch-Site: same-site\r\nCookie: berth_session={session}\r\n\
             Connection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 403, "{head}");
    // The dashboard's own origin without the CSRF token: refused; with it: the upgrade.
    let own = format!("http://{api}");
    let (status, head) = exchange(&api, &handshake(&own, ""));
    assert_eq!(status, 403, "{head}");
    assert!(head.contains("CSRF"), "{head}");
    let token = csrf_of(&api, &session);
    let (status, head) = exchange(&api, &handshake(&own, &format!("?csrf={token}")));
    assert_eq!(status, 101, "{head}");
}

/// The CSRF token `GET /ui/session` gives the dashboard's own page.
fn csrf_of(api: &str, session: &str) -> String {
    let mut s = TcpStream::connect(api).unwrap();
    let req = format!("GET /ui/session HTTP/1.0\r\nHost: {api}\r\nCookie: berth_session={session}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let body = all.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {all}"));
    v["csrf"].as_str().expect("a csrf token").to_string()
}

#[test]
fn an_app_session_cookie_opens_its_app_only_and_is_no_api_token() {
    let b = Berth::up(&[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let id = b.submit(&["--app", &format!("web={port}"), "--", "python3", "-m", "http.server", &port.to_string()]);
    b.wait_state(id, "RUNNING");
    // The app's URL is on a host of its own.
    let apps: serde_json::Value = serde_json::from_str(&b.ok(&["apps", &id.to_string(), "-o", "json"])).unwrap();
    let url = apps[0]["url"].as_str().unwrap();
    let host = format!("{id}-web.localhost");
    assert!(url.starts_with(&format!("http://{host}:")), "{url}");
    let apps_port = port_of(url);
    // A one-time link opened on another host than the app's: refused, no cookie.
    let link = text(&b.cli(&["open", &id.to_string(), "web"]).stdout).trim().to_string();
    let path = link.split_once(&format!(":{apps_port}")).unwrap().1.to_string();
    let proxy = format!("127.0.0.1:{apps_port}");
    let (status, head) =
        exchange(&proxy, &format!("GET {path} HTTP/1.1\r\nHost: {proxy}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 400, "{head}");
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    // On its own host: a cookie for that host and path.
    let link = text(&b.cli(&["open", &id.to_string(), "web"]).stdout).trim().to_string();
    let path = link.split_once(&format!(":{apps_port}")).unwrap().1.to_string();
    let (status, head) =
        exchange(&proxy, &format!("GET {path} HTTP/1.1\r\nHost: {host}:{apps_port}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 200, "{head}");
    let cookie = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie: berth-app-")).expect(&head);
    assert!(!cookie.to_ascii_lowercase().contains("domain="), "a host-only cookie: {cookie}");
    let token = cookie.split_once('=').unwrap().1.split(';').next().unwrap().to_string();
    let name = format!("berth-app-{id}-web");
    // It opens the app (once it listens)...
    let start = Instant::now();
    loop {
        let (status, head) = exchange(
            &proxy,
            &format!(
                "GET /apps/{id}/web/ HTTP/1.1\r\nHost: {host}:{apps_port}\r\nCookie: {name}={token}\r\n\
                 Connection: close\r\n\r\n"
            ),
        );
        // The app itself answered (python's http.server: it has no such file).
        if status != 502 && head.contains("SimpleHTTP") {
            break;
        }
        assert!(status == 502 && start.elapsed() < PATIENCE, "{head}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // ...but it is no API token, neither as a bearer token nor as the dashboard's cookie.
    let api = authority(&b.url);
    let (status, head) = exchange(
        &api,
        &format!(
            "GET /v1/whoami HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 401, "{head}");
    let (status, head) = exchange(
        &api,
        &format!(
            "GET /v1/whoami HTTP/1.1\r\nHost: {api}\r\nCookie: berth_session={token}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 401, "{head}");
}
