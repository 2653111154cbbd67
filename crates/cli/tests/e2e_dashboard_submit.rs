//! The dashboard's Submit form and job page in a real headless Chromium (issue 41): a job
//! submitted from the form runs as its user, in their home, with the variables the form set,
//! after the form showed all of that (the manager's dry run, and its 4xx for a bad spec); the
//! job page shows the command as typed (quotes, newlines), cpuset ids as ids, durations as
//! `30m`, ISO 8601 dates, and a log pane that follows the newest line until the reader scrolls
//! up; the nodes page's timeline spans the page.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use support::browser::{self, Browser};
use support::users::UnixUser;
use support::{Berth, PATIENCE, shared_tempdir, text};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Logs the browser in through `link` and waits for the jobs page.
async fn log_in(br: &Browser, link: &str, user: &str) {
    br.client.goto(link).await.unwrap();
    br.wait_text("#who", user).await;
    br.wait_for("table#jobs").await;
}

/// A home directory made for a throwaway account (which `useradd --no-create-home` left
/// without one), removed with the value.
struct Home(PathBuf);

impl Home {
    fn make(u: &UnixUser) -> Home {
        let o = std::process::Command::new("getent").args(["passwd", &u.name]).output().unwrap();
        let dir = PathBuf::from(text(&o.stdout).trim().split(':').nth(5).expect("a passwd line with a home"));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(u.uid), Some(u.gid)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Home(dir)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The text of the `dd` after the `dt` reading `term` in the facts list `css`.
async fn fact(br: &Browser, css: &str, term: &str) -> String {
    let js = format!(
        "const dt = [...document.querySelectorAll('{css} dt')].find(d => d.textContent === '{term}'); \
         return dt ? dt.nextElementSibling.textContent : null;"
    );
    let start = Instant::now();
    loop {
        if let Some(t) = br.js(&js).await.as_str() {
            return t.to_string();
        }
        assert!(start.elapsed() < PATIENCE, "no `{term}` in {css}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the text of `css` is exactly `want` (the preview follows the form a moment later).
async fn wait_exact(br: &Browser, css: &str, want: &str) {
    let start = Instant::now();
    loop {
        if let Ok(e) = br.client.find(Locator::Css(css)).await
            && e.text().await.is_ok_and(|t| t == want)
        {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "`{css}` never read `{want}`");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Scrolls the log pane (to the top, or to the bottom) until the page says whether it follows.
async fn scroll_log(br: &Browser, to_top: bool, follows: &str) {
    let to = if to_top { "0" } else { "p.scrollHeight" };
    let start = Instant::now();
    loop {
        br.js(&format!("const p = document.getElementById('log'); p.scrollTop = {to}; return null;")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if br.js("return document.getElementById('log').dataset.follow;").await == follows {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "scrolling did not make the log's follow {follows}");
    }
}

/// The job whose page the browser went to after a submit.
async fn job_of_the_page(br: &Browser) -> i64 {
    let start = Instant::now();
    loop {
        let url = br.client.current_url().await.unwrap();
        if let Some(id) = url.fragment().and_then(|f| f.strip_prefix("/jobs/")).and_then(|i| i.parse().ok()) {
            return id;
        }
        assert!(start.elapsed() < PATIENCE, "the submit never went to the job's page: {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 41: the form's placeholder `python train.py --epochs 10` failed as written (`python:
/// not found`, exit 127) in a directory nobody chose, with no variables and no name. Now the
/// form defaults to the user's home, takes variables and a name, and shows before the submit
/// what the job will run, where, as whom and with what, or why a submit would be refused.
#[test]
fn the_submit_form_shows_what_the_job_will_see_and_the_job_runs_in_the_users_home() {
    if !browser::available("the_submit_form_shows_what_the_job_will_see_and_the_job_runs_in_the_users_home") {
        return;
    }
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root: it runs jobs as another user");
    let dir = shared_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up_in(dir, &[]);
    let dana = UnixUser::create("d");
    let home = Home::make(&dana);
    let home_dir = home.0.to_str().unwrap().to_string();
    let o = dana.berth(&b.data.join("berth.sock"), Path::new("/"), &["ui"], &[]);
    assert!(o.status.success(), "berth ui over the socket: {}", text(&o.stderr));
    let link = text(&o.stdout).trim().to_string();
    runtime().block_on(async {
        let br = Browser::start().await;
        log_in(&br, &link, &dana.name).await;
        br.js("location.hash = '#/submit'; return null;").await;
        let form = br.wait_for("#submit-form").await;
        let workdir = form.find(Locator::Css("input[name=workdir]")).await.unwrap();
        assert_eq!(workdir.prop("value").await.unwrap().as_deref(), Some(home_dir.as_str()), "the home by default");
        let placeholder = form.find(Locator::Css("textarea[name=command]")).await.unwrap().attr("placeholder").await;
        assert!(!placeholder.unwrap().unwrap().contains("python "), "no placeholder that fails as written");

        let input = |css: &'static str| {
            let form = form.clone();
            async move { form.find(Locator::Css(css)).await.unwrap() }
        };
        input("input[name=name]").await.send_keys("from-the-form").await.unwrap();
        // Two lines and quotes, as a user types them.
        input("textarea[name=command]").await.send_keys("pwd; id -u\necho \"$GREETING\" 'single'").await.unwrap();
        input("textarea[name=env]").await.send_keys("GREETING=hello there").await.unwrap();
        input("input[name=limit]").await.send_keys("30m").await.unwrap();

        // What the job will see, from the manager's dry run, before anything is submitted.
        let who = br.wait_text("#preview-user", &dana.name).await;
        assert!(who.contains(&format!("uid {}", dana.uid)), "{who}");
        wait_exact(&br, "#preview-command", "/bin/sh -c 'pwd; id -u\necho \"$GREETING\" '\\''single'\\'''").await;
        br.wait_text("#preview-facts", "30m").await;
        assert_eq!(fact(&br, "#preview-facts", "Working directory").await, home_dir);
        assert_eq!(fact(&br, "#preview-facts", "Time limit").await, "30m");
        let env = br.wait_text("#preview-env", "hello there").await;
        assert!(env.contains("hello there") && env.contains(&home_dir) && env.contains("PATH"), "{env}");
        assert!(b.json(&["ps", "--all"]).as_array().unwrap().is_empty(), "a preview submits nothing");
        br.screenshot("submit-preview").await;

        // A spec a submit would refuse: the submit's own message, in the preview.
        let cpus = input("input[name=cpus]").await;
        cpus.clear().await.unwrap();
        cpus.send_keys("0").await.unwrap();
        let err = br.wait_text("#submit-preview .error", "cpu").await;
        assert!(!err.is_empty());
        cpus.clear().await.unwrap();
        cpus.send_keys("1").await.unwrap();
        br.wait_for("#preview-facts").await;

        input("button[type=submit]").await.click().await.unwrap();
        // The job's page: it ran as dana, in her home, with the variable.
        let log = br.wait_text("#log", "hello there").await;
        assert_eq!(log.trim(), format!("{home_dir}\n{}\nhello there single", dana.uid));
        let id = job_of_the_page(&br).await;
        let job = b.wait_state(id, "SUCCEEDED");
        assert_eq!(job["spec"]["name"], "from-the-form");
        assert_eq!(job["spec"]["workdir"], home_dir.as_str());
        assert_eq!(fact(&br, "#job-facts", "Working directory").await, home_dir);
        br.screenshot("submitted-from-the-form").await;
        br.close().await;
    });
}

/// Issue 41: the job page showed a job bound to CPU 0 as "0" CPUs, its command without its
/// quotes and newlines, its limit as "1800 s", US dates, and a log pane that stayed at the top;
/// the nodes page's 24-hour timeline was a sliver.
#[test]
fn the_job_page_shows_cpu_ids_quoted_commands_iso_dates_and_follows_the_log() {
    if !browser::available("the_job_page_shows_cpu_ids_quoted_commands_iso_dates_and_follows_the_log") {
        return;
    }
    let b = Berth::up(&[]);
    let o = b.cli(&["ui"]);
    assert!(o.status.success(), "berth ui failed: {}", text(&o.stderr));
    let link = text(&o.stdout).trim().to_string();
    // Many lines at once, then one more every 50 ms: the pane overflows and keeps growing.
    let script = "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo \"line $i\"; done\nwhile :; do i=$((i+1)); echo \"line $i\"; sleep 0.05; done";
    let id = b.submit(&["--time-limit", "30m", "--", "sh", "-c", script]);
    b.wait_state(id, "RUNNING");
    runtime().block_on(async {
        let br = Browser::start().await;
        log_in(&br, &link, "admin").await;
        br.js(&format!("location.hash = '#/jobs/{id}'; return null;")).await;
        br.wait_text("#log", "line 300").await;

        let command = br.wait_text("#job-command", "sh -c").await;
        assert_eq!(command, format!("sh -c '{script}'"), "the command as typed, quotes and newlines kept");
        assert_eq!(fact(&br, "#job-facts", "Time limit").await, "30m");
        let submitted = fact(&br, "#job-facts", "Submitted").await;
        let iso = br.js(&format!("return /^\\d{{4}}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d$/.test('{submitted}');")).await;
        assert_eq!(iso, true, "an ISO 8601 date: {submitted}");

        // The placement names cpuset ids as ids, with their count.
        let cpus = br
            .js_async(&format!(
                "const done = arguments[0]; fetch('/v1/jobs/{id}').then(r => r.json())\
                 .then(d => done(d.kernels[0].binding.cpus));"
            ))
            .await;
        let cell = br.wait_text("#placement tbody td:nth-child(3)", "CPU").await;
        match cpus.as_array().unwrap().as_slice() {
            [] => assert!(cell.contains("no cpuset"), "{cell}"),
            [one] => assert_eq!(cell, format!("1 CPU, id {one}")),
            many => assert!(cell.starts_with(&format!("{} CPUs, ids ", many.len())), "{cell}"),
        }

        // The pane follows the newest line...
        let at_bottom =
            "const p = document.getElementById('log'); return p.scrollHeight - p.scrollTop - p.clientHeight < 8;";
        let overflows = "const p = document.getElementById('log'); return p.scrollHeight > p.clientHeight;";
        assert_eq!(br.js(overflows).await, true, "300 lines overflow the pane");
        let lines = "return document.getElementById('log').textContent.split('\\n').length;";
        let wait_more = |seen: u64| {
            let br = &br;
            async move {
                let start = Instant::now();
                loop {
                    let now = br.js(lines).await.as_u64().unwrap();
                    if now > seen + 5 {
                        return now;
                    }
                    assert!(start.elapsed() < PATIENCE, "the log stopped growing at {now} lines");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let seen = wait_more(br.js(lines).await.as_u64().unwrap()).await;
        assert_eq!(br.js(at_bottom).await, true, "the pane shows the newest line");
        // ...until the reader scrolls up: then it stays where they are.
        scroll_log(&br, true, "false").await;
        let seen = wait_more(seen).await;
        assert_eq!(br.js("return document.getElementById('log').scrollTop;").await, 0, "left where the reader is");
        // Back at the bottom, it follows again.
        scroll_log(&br, false, "true").await;
        wait_more(seen).await;
        assert_eq!(br.js(at_bottom).await, true, "following again");
        br.screenshot("job-page-log-follow").await;

        // The nodes page: the timeline spans the page, rows tall enough to read.
        br.js("location.hash = '#/nodes'; return null;").await;
        br.wait_for("#node-timeline rect.segment").await;
        let size = br
            .js("const m = document.getElementById('main'); const s = getComputedStyle(m); \
                 const inner = m.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); \
                 const r = document.getElementById('node-timeline').getBoundingClientRect(); \
                 return [r.width, inner, r.height];")
            .await;
        let [w, inner, h] = [0, 1, 2].map(|i| size[i].as_f64().unwrap());
        assert!(w >= inner * 0.9 && w <= inner + 1.0, "the timeline is {w}px wide in {inner}px");
        assert!(h >= 60.0, "the timeline is {h}px high");
        br.screenshot("nodes-timeline").await;
        br.close().await;
    });
    b.ok(&["cancel", &id.to_string()]);
}

/// Issue 41: `python train.py` from the form found no `python` (exit 127). A Python
/// environment given in the form puts its own `python` first on PATH, and a data folder
/// checked in the form is mounted where the preview said.
#[test]
fn the_submit_forms_python_environment_and_folder_make_python_work() {
    if !browser::available("the_submit_forms_python_environment_and_folder_make_python_work") {
        return;
    }
    let Ok(uv) = std::env::var("BERTH_TEST_UV") else {
        println!("SKIPPED: BERTH_TEST_UV is not set (scripts/test.sh installs uv from PyPI)");
        return;
    };
    // The dashboard's admin has no Unix account: its jobs, and their builds, run as a uid of
    // the nodes' range, which must be able to run uv (the suite's lives under root's home).
    let tools = shared_tempdir();
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let uv_copy = tools.path().join("uv");
    std::fs::copy(&uv, &uv_copy).unwrap();
    std::fs::set_permissions(&uv_copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = Berth::up(&["--uv", uv_copy.to_str().unwrap()]);
    let py = text(
        &std::process::Command::new("python3")
            .args(["-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    b.ok(&["folder", "create", "inputs"]);
    let proj = b.home.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("train.py"), "import sys\nprint('trained in', sys.prefix)\n").unwrap();
    let up = b.cli(&["upload", "inputs", proj.to_str().unwrap()]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    let link = text(&b.cli(&["ui"]).stdout).trim().to_string();
    runtime().block_on(async {
        let br = Browser::start().await;
        log_in(&br, &link, "admin").await;
        br.js("location.hash = '#/submit'; return null;").await;
        let form = br.wait_for("#submit-form").await;
        form.find(Locator::Css("input[name=folder][value=inputs]")).await.unwrap().click().await.unwrap();
        form.find(Locator::Css("input[name=python]")).await.unwrap().send_keys(&py).await.unwrap();
        let command = form.find(Locator::Css("textarea[name=command]")).await.unwrap();
        let example = command.attr("placeholder").await.unwrap().unwrap();
        assert!(example.starts_with("python -c"), "an example that works with the environment: {example}");
        command.send_keys("python /data/inputs/proj/train.py").await.unwrap();

        br.wait_text("#preview-facts", "inputs at /data/inputs").await;
        br.wait_text("#preview-env", "VIRTUAL_ENV").await;
        assert_eq!(fact(&br, "#preview-facts", "Python").await, format!("Python {py}, 0 requirements"));
        br.screenshot("submit-python-folder").await;
        form.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
        let id = job_of_the_page(&br).await;
        let job = b.wait_job(id, "its end", |j| j["job"]["state"] != "PENDING" && j["job"]["ended_at"].is_string());
        assert_eq!(
            job["job"]["state"],
            "SUCCEEDED",
            "{job:#}\n{}",
            text(&b.cli(&["logs", "--stderr", &id.to_string()]).stdout)
        );
        let log = br.wait_text("#log", "trained in").await;
        assert!(log.contains("/envs/"), "the environment's python ran: {log}");
        br.close().await;
    });
}
