//! A real headless Chromium for the dashboard's tests, driven through WebDriver
//! (`chromedriver` from Debian's `chromium-driver`, `fantoccini` as the client). Each
//! [`Browser`] has its own chromedriver on a free port and its own profile directory, and
//! kills its chromedriver (by PID) when dropped. Screenshots go to
//! `$CARGO_TARGET_TMPDIR/dashboard/` as the tests' artefacts.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::PATIENCE;

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// Where Chromium and its driver are, or why the test cannot run (after a SKIPPED line; on
/// CI, where scripts/test.sh installs them, their absence fails the test instead).
pub fn available(test: &str) -> bool {
    let have = |bin: &str| Command::new(bin).arg("--version").output().is_ok_and(|o| o.status.success());
    if have("chromium") && have("chromedriver") {
        return true;
    }
    let why = "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: {why}");
    eprintln!("SKIPPED: {test}: {why}");
    false
}

impl Browser {
    pub async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: chromium and its helpers go with it (see Drop).
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,1000", format!("--user-data-dir={}", profile.path().display())],
            }
        });
        let caps: serde_json::Map<String, Value> = caps.as_object().unwrap().clone();
        let start = Instant::now();
        let client = loop {
            // Plain HTTP to a driver on 127.0.0.1: no TLS stack needed.
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            let mut builder = ClientBuilder::new(connector);
            builder.capabilities(caps.clone());
            match builder.connect(&format!("http://127.0.0.1:{port}")).await {
                Ok(c) => break c,
                // chromedriver takes a moment to listen
                Err(_) if start.elapsed() < PATIENCE => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("cannot start a chromium session: {e}"),
            }
        };
        Browser { client, driver, _profile: profile }
    }

    /// Waits until an element matching `css` exists; returns it.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element `{css}` appeared: {e}"))
    }

    /// Waits until the text of `css` holds `want`; returns the text.
    pub async fn wait_text(&self, css: &str, want: &str) -> String {
        let start = Instant::now();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await
                && let Ok(t) = e.text().await
                && t.contains(want)
            {
                return t;
            }
            assert!(start.elapsed() < PATIENCE, "`{css}` never showed `{want}`");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `js` in the page (its `return` value).
    pub async fn js(&self, js: &str) -> Value {
        self.client.execute(js, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{js}"))
    }

    /// Runs an async script: `done` is the callback its result goes to.
    pub async fn js_async(&self, js: &str) -> Value {
        self.client.execute_async(js, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{js}"))
    }

    /// Saves a screenshot of the page as an artefact of the test run; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Ends the session; dropping the browser then stops its driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Also after a panicking test: no chromedriver, nor the chromium it started, outlives
        // it. The group is the one made for this driver at spawn.
        // SAFETY: kill(2) with the negated id of a process group this test created.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}
