//! The app proxy through the real binary (issue 17): a job's `--app` is listed by
//! `berth apps`, opened with a one-time `berth open` link that sets a cookie for that app
//! only, and proxied with berth's cookies and tokens taken out; everyone who may not see the
//! job gets the same 404 as for an app that does not exist.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use support::{Berth, text};

/// An app that answers every request with what it received, and tries to plant a cookie
/// named like the dashboard's.
const ECHO_APP: &str = r#"
import http.server, json, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "port_var": os.environ.get("BERTH_APP_WEB_PORT"),
                           "base_var": os.environ.get("BERTH_APP_WEB_BASE_URL"),
                           "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "berth_session=planted; Path=/")
        self.send_header("Set-Cookie", "app_cookie=1; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// One HTTP/1.0 exchange: the status code, the head's lines and the body.
struct Answer {
    status: u16,
    head: Vec<String>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{}:", name.to_ascii_lowercase());
        self.head
            .iter()
            .filter(|l| l.to_ascii_lowercase().starts_with(&prefix))
            .map(|l| l[prefix.len()..].trim())
            .collect()
    }
}

/// `GET url` with `headers`, over a fresh connection.
fn get(url: &str, headers: &[(&str, &str)]) -> Answer {
    let rest = url.strip_prefix("http://").expect("an http url");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    // Apps have host names of their own under `localhost` (`<job>-<app>.localhost`), which
    // browsers resolve to the loopback address themselves.
    let addr = match host.rsplit_once(':') {
        Some((name, port)) if name == "localhost" || name.ends_with(".localhost") => format!("127.0.0.1:{port}"),
        _ => host.to_string(),
    };
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let all = String::from_utf8_lossy(&all).to_string();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    let head: Vec<String> = head.lines().map(str::to_string).collect();
    let status = head.first().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    Answer { status, head, body: body.to_string() }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `berth open ID APP` as the caller of `open`: the link.
fn open_link(o: std::process::Output) -> String {
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

#[test]
fn apps_are_opened_with_one_time_links_and_proxied_without_berths_credentials() {
    let b = Berth::up(&[]);
    let port = free_port();
    let id = b.submit(&["--app", &format!("web={port}"), "--", "python3", "-c", ECHO_APP, &port.to_string()]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();

    // Listed, with its URL on the app proxy (another port than the API's).
    let apps: serde_json::Value = serde_json::from_str(&b.ok(&["apps", &ids, "-o", "json"])).unwrap();
    let url = apps[0]["url"].as_str().unwrap().to_string();
    assert_eq!(apps[0]["name"], "web");
    assert!(url.ends_with(&format!("/apps/{id}/web/")), "{url}");
    assert!(url.starts_with(&format!("http://{id}-web.localhost:")), "apps are served on a site of their own: {url}");
    assert!(b.ok(&["apps", &ids]).contains(&url));

    // Without a session: the 404 of an app that does not exist.
    let anonymous = get(&url, &[]);
    assert_eq!(anonymous.status, 404);
    let missing = get(&url.replace(&format!("/apps/{id}/"), "/apps/999999/"), &[]);
    assert_eq!((missing.status, &missing.body), (404, &anonymous.body));

    // Once the app listens (the proxy says so while it does not).
    let bearer = format!("Bearer {}", b.admin_token());
    let start = Instant::now();
    loop {
        let a = get(&url, &[("Authorization", &bearer)]);
        if a.status == 200 {
            break;
        }
        assert_eq!(a.status, 502, "{}", a.body);
        assert!(a.body.contains("nothing listens on port"), "{}", a.body);
        assert!(start.elapsed() < support::PATIENCE, "the app never listened");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // The link: a cookie for this app's path only, then the app without the code.
    let link = open_link(b.cli(&["open", &ids, "web"]));
    assert!(link.starts_with(&url) && link.contains("berth-login="), "{link}");
    let login = get(&link, &[]);
    // A page that goes on to the app (from the app's own host, so the Strict cookie rides it).
    assert_eq!(login.status, 200, "{}", login.body);
    assert!(login.body.contains(&format!("content=\"0;url=/apps/{id}/web/\"")), "{}", login.body);
    let set = login.header("set-cookie").join("\n");
    assert!(set.contains(&format!("berth-app-{id}-web=")), "{set}");
    assert!(
        set.contains(&format!("Path=/apps/{id}/web/")) && set.contains("HttpOnly") && set.contains("SameSite=Strict")
    );
    let cookie = set.split(';').next().unwrap().to_string();
    assert_eq!(get(&link, &[]).status, 401, "a link works once");

    // Through the proxy: the path with its prefix, no berth cookie or token, the app's own
    // cookies kept both ways, and no cookie planted under berth's names.
    let with_cookies = format!("{cookie}; berth_session=dashboard; theme=dark");
    let a = get(&format!("{url}x?q=1"), &[("Cookie", &with_cookies)]);
    assert_eq!(a.status, 200, "{}", a.body);
    let seen: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(seen["path"], format!("/apps/{id}/web/x?q=1"));
    assert_eq!(seen["headers"]["cookie"], "theme=dark");
    assert!(seen["headers"].get("authorization").is_none());
    assert_eq!(seen["headers"]["x-forwarded-prefix"], format!("/apps/{id}/web/"));
    assert_eq!(seen["port_var"], port.to_string());
    assert_eq!(seen["base_var"], format!("/apps/{id}/web/"));
    assert_eq!(a.header("set-cookie"), ["app_cookie=1; Path=/"]);

    // An API token works in the header (scripts), and is not passed on either; never in the URL.
    let admin = b.admin_token();
    let a = get(&url, &[("Authorization", &format!("Bearer {admin}"))]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!a.body.contains(&admin));
    assert_eq!(get(&format!("{url}?berth-login={admin}"), &[]).status, 401);
    assert_eq!(get(&format!("{url}?token={admin}"), &[]).status, 404);

    // Another user: no link, no way in with their token or with a cookie of their own.
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["open", &ids, "web"]);
    assert!(text(&o.stderr).contains(&format!("job {id} not found")), "{}", text(&o.stderr));
    let a = get(&url, &[("Authorization", &format!("Bearer {bob}"))]);
    assert_eq!((a.status, &a.body), (404, &anonymous.body));
    let o = b.cli(&["open", &ids, "nope"]);
    assert!(text(&o.stderr).contains("serves no app `nope` (its apps: web)"), "{}", text(&o.stderr));

    // The job ending closes its apps.
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");
    let start = Instant::now();
    loop {
        let a = get(&url, &[("Cookie", &cookie)]);
        if a.status == 503 {
            assert!(a.body.contains(&format!("job {id}")), "{}", a.body);
            break;
        }
        assert!(start.elapsed() < support::PATIENCE, "{} {}", a.status, a.body);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn bad_app_flags_are_usage_errors() {
    let b = Berth::up(&[]);
    for (flag, want) in [
        ("web", "expected NAME=PORT"),
        ("web=0", "expected 1 to 65535"),
        ("Web=80", "invalid app name"),
        ("web=99999", "expected 1 to 65535"),
        ("web=8000,nope", "invalid option `nope` for app `web`: use `strip`"),
    ] {
        let o = b.cli(&["submit", "--app", flag, "--", "true"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(want), "{flag}: {}", text(&o.stderr));
    }
    let o = b.cli(&["submit", "--app", "a=1", "--app", "a=2", "--", "true"]);
    assert!(text(&o.stderr).contains("declared twice"), "{}", text(&o.stderr));
}

/// Waits until the app at `url` answers something else than 502 (its server is not up yet).
fn first_answer(url: &str, headers: &[(&str, &str)]) -> Answer {
    let start = Instant::now();
    loop {
        let a = get(url, headers);
        if a.status != 502 {
            return a;
        }
        assert!(start.elapsed() < support::PATIENCE, "the app never listened: {}", a.body);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn strip_apps_serve_a_server_that_knows_no_base_url() {
    let b = Berth::up(&[]);
    // Under `submit/`, which jobs see (the rest of the test home is not theirs).
    let site = b.home.path().join("submit/site");
    std::fs::create_dir_all(site.join("sub")).unwrap();
    std::fs::write(site.join("hello.txt"), "hello from the app\n").unwrap();
    std::fs::write(site.join("sub/inner.txt"), "inner\n").unwrap();
    let dir = site.to_str().unwrap();
    let (p1, p2) = (free_port(), free_port());
    let serve = |port: u16, flag: &str| {
        let app = format!("web={port}{flag}");
        b.submit(&["--app", &app, "--", "python3", "-m", "http.server", "--directory", dir, &port.to_string()])
    };
    let stripped = serve(p1, ",strip");
    let kept = serve(p2, "");
    b.wait_state(stripped, "RUNNING");
    b.wait_state(kept, "RUNNING");
    let bearer = format!("Bearer {}", b.admin_token());
    let auth = [("Authorization", bearer.as_str())];

    // `berth apps` says which path each app gets.
    let listed = b.ok(&["apps", &stripped.to_string()]);
    assert!(listed.contains("PATH") && listed.contains("prefix stripped"), "{listed}");
    assert!(b.ok(&["apps", &kept.to_string()]).contains("prefix kept"));
    let apps: serde_json::Value = serde_json::from_str(&b.ok(&["apps", &stripped.to_string(), "-o", "json"])).unwrap();
    assert_eq!(apps[0]["path"], "strip");
    let url = apps[0]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("http://{stripped}-web.localhost:")), "{url}");

    // Stripped: `/apps/<job>/web/hello.txt` reaches the server as `/hello.txt`.
    let a = first_answer(&format!("{url}hello.txt"), &auth);
    assert_eq!((a.status, a.body.as_str()), (200, "hello from the app\n"), "{:?}", a.head);
    let listing = get(&url, &auth);
    assert_eq!(listing.status, 200);
    assert!(listing.body.contains("href=\"hello.txt\""), "{}", listing.body);
    // Its redirect to a folder of its own stays in the app.
    let a = get(&format!("{url}sub"), &auth);
    assert_eq!(a.status, 301, "{:?}", a.head);
    assert_eq!(a.header("location"), [format!("/apps/{stripped}/web/sub/")]);
    assert_eq!(get(&format!("{url}sub/inner.txt"), &auth).body, "inner\n");
    // A session from a one-time link gets the same.
    let login = get(&open_link(b.cli(&["open", &stripped.to_string(), "web"])), &[]);
    let cookie = login.header("set-cookie").join("\n").split(';').next().unwrap().to_string();
    let a = get(&format!("{url}hello.txt"), &[("Cookie", &cookie)]);
    assert_eq!((a.status, a.body.as_str()), (200, "hello from the app\n"));

    // Kept (the default): the server gets the whole path, which it has no file for.
    let kept_apps: serde_json::Value = serde_json::from_str(&b.ok(&["apps", &kept.to_string(), "-o", "json"])).unwrap();
    assert_eq!(kept_apps[0]["path"], "keep");
    let kept_url = kept_apps[0]["url"].as_str().unwrap();
    let a = first_answer(&format!("{kept_url}hello.txt"), &auth);
    assert_eq!(a.status, 404, "a server that knows no base URL, its prefix kept: {}", a.body);
}

/// What `berth show` says about a job, as JSON.
fn show(b: &Berth, id: i64) -> serde_json::Value {
    serde_json::from_str(&b.ok(&["show", &id.to_string(), "-o", "json"])).unwrap()
}

#[test]
fn idle_sessions_end_and_sessions_get_the_queues_longest_time() {
    let b = Berth::up(&[]);
    b.ok(&["admin", "queue", "set", "default", "--idle-timeout", "3s", "--max-session", "1h"]);
    assert!(b.ok(&["queues"]).contains("idle 3s, max 1h"));
    let port = free_port();
    let session = b.submit(&["--app", &format!("web={port}"), "--", "python3", "-m", "http.server", &port.to_string()]);
    // Not a session (no apps): no idle timeout for it.
    let batch = b.submit(&["--", "sleep", "300"]);
    b.wait_state(session, "RUNNING");
    b.wait_state(batch, "RUNNING");
    let s = session.to_string();

    // A session gets the queue's longest session as its limit, and may not ask for more.
    let spec = show(&b, session);
    assert_eq!(spec["spec"]["time_limit_secs"], 3600, "{spec}");
    let o = b.cli(&["submit", "--app", "web=1", "--time-limit", "2h", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("longest session (1h, max_session)"), "{}", text(&o.stderr));

    // An attached client holds the session past the idle timeout...
    let o = b.cli(&["exec", &s, "--", "sleep", "5"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let after_exec = show(&b, session);
    assert_eq!(after_exec["job"]["state"], "RUNNING", "{after_exec}");
    // ...and `ps` counts down the idle time once nobody is attached.
    let ps = b.ok(&["ps"]);
    assert!(ps.contains("TIME LEFT") && ps.contains("(idle)"), "{ps}");

    // Then it ends, idle, while the batch job runs on.
    b.wait_state(session, "TIMEOUT");
    let ended = show(&b, session);
    assert_eq!(ended["job"]["end_cause"], "idle", "{ended}");
    assert_eq!(ended["job"]["stop"]["kind"], "idle", "{ended}");
    assert!(ended["job"]["reason"].as_str().unwrap().starts_with("idle: no client attached"), "{ended}");
    assert!(b.ok(&["show", &s]).contains("idle for 3s"));
    assert_eq!(show(&b, batch)["job"]["state"], "RUNNING");
}
