//! The web dashboard in a real headless Chromium (WebDriver): logging in through `berth ui`'s
//! one-time link, a job seen going PENDING → RUNNING → SUCCEEDED without a reload, its log,
//! names and output with markup shown as text, cancel, what a second user sees, CSRF,
//! revoked sessions, dead links, unknown pages and serving endpoints. Screenshots are kept as artefacts
//! (`$CARGO_TARGET_TMPDIR/dashboard/`).

mod support;

use std::time::{Duration, Instant};

use fantoccini::Locator;
use support::browser::{self, Browser};
use support::{Berth, PATIENCE, text};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// `berth ui` for the berth's own admin (or `token`'s user): the one-time link.
fn login_link(b: &Berth, token: Option<&str>) -> String {
    let o = match token {
        Some(t) => b.cli_as(t, &["ui"]),
        None => b.cli(&["ui"]),
    };
    assert!(o.status.success(), "berth ui failed: {}", text(&o.stderr));
    let url = text(&o.stdout).trim().to_string();
    assert!(url.starts_with(&b.url) && url.contains("/ui/login?code="), "a link on the manager: {url}");
    url
}

/// Logs the browser in through a fresh link and waits for the jobs page.
async fn log_in(br: &Browser, link: &str, user: &str) {
    br.client.goto(link).await.unwrap();
    br.wait_text("#who", user).await;
    br.wait_for("table#jobs").await;
}

/// The `data-state` of job `id`'s row in the jobs table, if the row is there.
async fn row_state(br: &Browser, id: i64) -> Option<String> {
    let row = br.client.find(Locator::Css(&format!("#job-{id}"))).await.ok()?;
    row.attr("data-state").await.ok().flatten()
}

#[test]
fn a_job_is_seen_live_from_pending_to_succeeded_and_markup_stays_text() {
    if !browser::available("a_job_is_seen_live_from_pending_to_succeeded_and_markup_stays_text") {
        return;
    }
    let b = Berth::up(&["--usage-interval", "1s"]);
    let link = login_link(&b, None);
    let nodes = b.json(&["nodes"]);
    let cpus = nodes[0]["cpus_total"].as_u64().unwrap().to_string();
    runtime().block_on(async {
        let br = Browser::start().await;
        log_in(&br, &link, "admin").await;
        // Set in the page: still there at the end means the page was never reloaded.
        br.js("window.__sameLoad = 'yes'; return null;").await;

        // A job that takes every CPU keeps the watched one PENDING for a while.
        let blocker = b.submit(&["--cpus", &cpus, "--", "sleep", "3"]);
        b.wait_state(blocker, "RUNNING");
        let name = "<script>alert(1)</script>";
        let id = b.submit(&["--name", name, "--", "sh", "-c", "sleep 1; echo '<b>bold</b> & <i>done</i>'"]);

        let mut seen: Vec<String> = Vec::new();
        let start = Instant::now();
        while seen.last().map(String::as_str) != Some("SUCCEEDED") {
            if let Some(s) = row_state(&br, id).await
                && seen.last() != Some(&s)
            {
                seen.push(s);
            }
            assert!(start.elapsed() < PATIENCE, "job {id} never showed SUCCEEDED; saw {seen:?}");
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        let order: Vec<&str> =
            seen.iter().map(String::as_str).filter(|s| ["PENDING", "RUNNING", "SUCCEEDED"].contains(s)).collect();
        assert_eq!(order, ["PENDING", "RUNNING", "SUCCEEDED"], "the row went through {seen:?}");
        assert_eq!(br.js("return window.__sameLoad;").await, "yes", "the page must update without a reload");

        // The name is text in its cell, and no script of it ran.
        let cell = br.client.find(Locator::Css(&format!("#job-{id} td:nth-child(2)"))).await.unwrap();
        assert_eq!(cell.text().await.unwrap(), name);
        let scripts = br.js("return [...document.scripts].map(s => s.getAttribute('src')).join(' ');").await;
        assert_eq!(scripts, "/assets/app.js /assets/submit.js", "only the dashboard's own scripts");
        assert!(br.client.get_alert_text().await.is_err(), "no alert may be open");
        br.screenshot("jobs-live").await;

        // The job's page: its log, with the markup as text.
        br.js(&format!("location.hash = '#/jobs/{id}'; return null;")).await;
        let log = br.wait_text("#log", "done").await;
        assert!(log.contains("<b>bold</b> & <i>done</i>"), "the log as text: {log}");
        assert_eq!(br.js("return document.querySelectorAll('#log *').length;").await, 0, "no markup in the log");
        br.wait_text("#history", "SUCCEEDED").await;
        br.wait_text("#job-facts", "exit code 0").await;
        if support::cgroups_usable() {
            // What it used, as its node measured it, beside what it was given.
            let used = br.wait_text("#job-usage", "CPU time").await;
            assert!(used.contains("Memory") && used.contains("peak"), "{used}");
        }
        br.screenshot("job-page").await;

        // The submit form: the API's own message for a bad request, then a job.
        br.js("location.hash = '#/submit'; return null;").await;
        let form = br.wait_for("#submit-form").await;
        form.find(Locator::Css("textarea[name=command]")).await.unwrap().send_keys("echo from-the-form").await.unwrap();
        let cpus = form.find(Locator::Css("input[name=cpus]")).await.unwrap();
        cpus.clear().await.unwrap();
        cpus.send_keys("0").await.unwrap();
        form.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
        let err = br.wait_text("#submit-result .error", "cpu").await;
        assert!(!err.is_empty());
        cpus.clear().await.unwrap();
        cpus.send_keys("1").await.unwrap();
        form.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
        br.wait_text("#log", "from-the-form").await;

        // Usage: charts over time and the totals, the admin's jobs among them.
        br.js("location.hash = '#/usage?by=user&since=1h'; return null;").await;
        br.wait_text("table#usage", "admin").await;
        assert_eq!(br.js("return document.querySelectorAll('svg.chart').length;").await, 3);
        assert!(
            br.js("return document.querySelectorAll('svg.chart polyline').length;").await.as_u64().unwrap() >= 2,
            "the utilisation and per-user lines"
        );
        br.screenshot("usage").await;

        // Nodes: allocation bars and the jobs that ran on each node, this one among them; with a
        // job running and measured, what it uses as a second bar.
        let busy = b.submit(&["--", "sh", "-c", "while :; do :; done"]);
        if support::cgroups_usable() {
            b.wait_job(busy, "a usage sample", |j| !j["job"]["usage"]["cpu_percent"].is_null());
        }
        br.js("location.hash = '#/nodes'; return null;").await;
        br.wait_for("#node-timeline").await;
        if support::cgroups_usable() {
            let row = br.wait_text("#nodes tbody tr", "busy").await;
            assert!(row.contains("allocated") && row.contains("in use"), "{row}");
            assert!(br.js("return document.querySelectorAll('#nodes .bar.used').length;").await.as_u64().unwrap() >= 2);
        }
        let titles = br
            .js("return [...document.querySelectorAll('#node-timeline title')].map(t => t.textContent).join('|');")
            .await;
        assert!(titles.as_str().unwrap().contains(&format!("job {id} {name}")), "segments: {titles}");
        br.screenshot("nodes").await;
        b.ok(&["cancel", &busy.to_string()]);

        // Serving endpoints: ready over wanted, the URL, each replica linked to its job.
        let serve = "exec python3 -m http.server --bind 127.0.0.1 $PORT";
        let o = b.cli(&["serve", "create", "dash", "--cpus", "1", "--mem", "256MiB", "--", "sh", "-c", serve]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        br.js("location.hash = '#/endpoints'; return null;").await;
        let row = br.wait_text("#endpoint-dash", "1/1").await;
        assert!(row.contains("/serve/dash/") && row.contains("done"), "{row}");
        let replica = br.wait_text("#endpoints .replica", "ready").await;
        assert!(replica.contains("job "), "{replica}");
        br.screenshot("endpoints").await;
        br.close().await;
    });
}

#[test]
fn cancel_csrf_and_a_second_user_who_sees_only_their_own() {
    if !browser::available("cancel_csrf_and_a_second_user_who_sees_only_their_own") {
        return;
    }
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let admin_link = login_link(&b, None);
    let long = b.submit(&["--name", "long", "--", "sleep", "300"]);
    let other = b.submit(&["--name", "other", "--", "sleep", "300"]);
    b.wait_state(long, "RUNNING");
    runtime().block_on(async {
        let admin = Browser::start().await;
        log_in(&admin, &admin_link, "admin").await;

        // Cancel from the job's page (the browser asks to confirm).
        admin.js(&format!("location.hash = '#/jobs/{long}'; return null;")).await;
        admin.wait_for("#cancel").await.click().await.unwrap();
        let start = Instant::now();
        while admin.client.get_alert_text().await.is_err() {
            assert!(start.elapsed() < PATIENCE, "no confirmation was asked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        admin.client.accept_alert().await.unwrap();
        b.wait_state(long, "CANCELLED");
        admin.wait_text("#job-facts", "CANCELLED").await;
        admin.screenshot("cancelled").await;

        // A change without the CSRF token is refused, even with the session cookie.
        let status = admin
            .js_async(&format!(
                "const done = arguments[0]; fetch('/v1/jobs/{other}/cancel', {{method: 'POST', credentials: 'same-origin'}})\
                 .then(r => done(r.status));"
            ))
            .await;
        assert_eq!(status, 403, "a cancel without the CSRF token");
        assert_eq!(b.state(other), "RUNNING", "the refused cancel changed nothing");

        // Bob logs in with his own link: none of the admin's jobs, no admin page.
        let bob_link = login_link(&b, Some(&bob));
        let bob_br = Browser::start().await;
        log_in(&bob_br, &bob_link, "bob").await;
        bob_br.wait_text("table#jobs tbody", "No jobs").await;
        assert_eq!(bob_br.js("return document.getElementById('nav-admin').hidden;").await, true);
        bob_br.js("location.hash = '#/admin'; return null;").await;
        bob_br.wait_text("main h1", "Admins only").await;
        let status = bob_br
            .js_async("const done = arguments[0]; fetch('/v1/admin/users').then(r => done(r.status));")
            .await;
        assert_eq!(status, 403);
        let status = bob_br
            .js_async(&format!("const done = arguments[0]; fetch('/v1/jobs/{other}').then(r => done(r.status));"))
            .await;
        assert_eq!(status, 404, "another user's job does not exist for bob");
        bob_br.screenshot("second-user").await;
        // On the nodes page the admin's jobs are busy time, nothing more.
        bob_br.js("location.hash = '#/nodes'; return null;").await;
        bob_br.wait_for("#node-timeline").await;
        let titles =
            bob_br.js("return [...document.querySelectorAll('#node-timeline title')].map(t => t.textContent).join('|');").await;
        let titles = titles.as_str().unwrap().to_string();
        assert!(titles.contains("another user's job"), "{titles}");
        assert!(!titles.contains("admin") && !titles.contains("long"), "bob must not learn whose jobs ran: {titles}");
        bob_br.js("location.hash = '#/jobs'; return null;").await;

        // The admin revokes bob's session: his next request goes back to the login screen.
        let tokens = b.json(&["token", "list", "--all"]);
        let session = tokens
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["user"] == "bob" && t["label"] == "web session" && t["revoked_at"].is_null())
            .unwrap_or_else(|| panic!("bob's web session among the tokens: {tokens:#}"));
        b.ok(&["token", "revoke", session["id"].as_str().unwrap()]);
        bob_br.client.refresh().await.unwrap();
        bob_br.wait_text("#login", "Log in to berth").await;

        // A used link is dead; an unknown page is a page that says so.
        bob_br.client.goto(&bob_link).await.unwrap();
        bob_br.wait_text("h1", "This login link does not work").await;
        bob_br.client.goto(&format!("{}/no/such/page", b.url)).await.unwrap();
        bob_br.wait_text("h1", "Page not found").await;
        bob_br.close().await;
        admin.close().await;
    });
}

#[test]
fn a_jobs_app_opens_from_its_page_in_a_window_of_its_own() {
    if !browser::available("a_jobs_app_opens_from_its_page_in_a_window_of_its_own") {
        return;
    }
    let b = Berth::up(&[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The app serves its page at its base path (the proxy keeps the prefix).
    let serve = format!(
        "d=www$BERTH_APP_WEB_BASE_URL; mkdir -p $d && echo '<h1 id=app>hello from job '$BERTH_JOB_ID'</h1>' > \
         $d/index.html && exec python3 -m http.server {port} --bind 127.0.0.1 --directory www"
    );
    let id = b.submit(&["--app", &format!("web={port}"), "--", "sh", "-c", &serve]);
    b.wait_state(id, "RUNNING");
    let link = login_link(&b, None);
    runtime().block_on(async {
        let br = Browser::start().await;
        log_in(&br, &link, "admin").await;
        br.client.goto(&format!("{}/#/jobs/{id}", b.url)).await.unwrap();
        let dashboard = br.client.window().await.unwrap();
        let start = Instant::now();
        // The app may take a moment to listen; each try is a new one-time link.
        loop {
            br.wait_for("button[data-app='web']").await.click().await.unwrap();
            let windows = br.client.windows().await.unwrap();
            let app = windows.iter().find(|w| **w != dashboard).cloned();
            if let Some(app) = app {
                br.client.switch_to_window(app).await.unwrap();
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    let url = br.client.current_url().await.unwrap();
                    if url.path() == format!("/apps/{id}/web/") && url.query().is_none() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if br.client.find(Locator::Css("#app")).await.is_ok() {
                    break;
                }
                br.client.close_window().await.unwrap();
                br.client.switch_to_window(dashboard.clone()).await.unwrap();
            }
            assert!(start.elapsed() < PATIENCE, "the app never opened from the dashboard");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let shown = br.wait_text("#app", "hello").await;
        assert_eq!(shown, format!("hello from job {id}"));
        let url = br.client.current_url().await.unwrap();
        let api_port = b.url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        assert_ne!(url.port(), api_port, "an origin apart from the dashboard's");
        assert_eq!(br.js("return window.opener === null;").await, serde_json::json!(true));
        br.screenshot("app-from-dashboard").await;
        br.close().await;
    });
}
