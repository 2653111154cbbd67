//! End-to-end: TLS between the CLI, the agents and the manager (`--tls-cert`/`--tls-key`,
//! `--ca-file`, `BERTH_CA_FILE`), with a CA and certificates made by rcgen at test time.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;
use support::pki::Pki;
use support::{BIN, Berth, PATIENCE, text};

/// `berth <args>` against `url` as the admin, with `env` set and nothing else configured
/// (no credentials file is read: BERTH_URL and BERTH_TOKEN are both set).
fn cli_env(b: &Berth, url: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.env("HOME", b.home.path()).env_remove("XDG_CONFIG_HOME").env_remove("BERTH_CA_FILE");
    c.env("BERTH_URL", url).env("BERTH_TOKEN", b.admin_token());
    c.envs(env.iter().copied()).args(args).stdin(Stdio::null()).output().expect("run berth")
}

fn tls_cluster(pki: &Pki, agents: &[(&str, &[&str])]) -> Berth {
    let flags = pki.serve_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Berth::cluster_with("", &flags, agents)
}

/// Waits until `file` holds `what` at least `times` times; returns its text.
fn wait_in_file(file: &Path, what: &str, times: usize) -> String {
    let start = Instant::now();
    loop {
        let s = std::fs::read_to_string(file).unwrap_or_default();
        if s.matches(what).count() >= times {
            return s;
        }
        assert!(start.elapsed() < PATIENCE, "{} never said `{what}` {times} times:\n{s}", file.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn agent_with_the_ca_runs_jobs_over_wss_and_the_cli_trusts_berth_ca_file() {
    let pki = Pki::new(&["localhost", "127.0.0.1"]);
    let ca = pki.path("ca.pem");
    let b = tls_cluster(&pki, &[("n1", &["--ca-file", &ca])]);
    assert!(b.url.starts_with("https://127.0.0.1:"), "{}", b.url);
    let printed = std::fs::read_to_string(b.home.path().join("manager.stdout")).unwrap();
    assert!(printed.contains(&format!("berth agent --manager {} --join-token", b.url)), "{printed}");
    assert!(printed.contains("--ca-file"), "{printed}");

    let id = b.submit(&["--", "sh", "-c", "echo over-tls"]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]).trim(), "over-tls");

    // A CA installed in the system's trust store (here named by SSL_CERT_FILE) is trusted with
    // no BERTH_CA_FILE, by the CLI as by the agents.
    let o = cli_env(&b, &b.url, &[("SSL_CERT_FILE", &ca)], &["ps", "--all", "-o", "json"]);
    assert!(o.status.success(), "the system's store is trusted: {}", text(&o.stderr));
    let o = cli_env(&b, &b.url, &[("SSL_CERT_FILE", "/nonexistent.pem"), ("SSL_CERT_DIR", "/nonexistent")], &["ps"]);
    assert!(!o.status.success(), "and without it the CA is not");

    // The CLI with nothing but the URL, the token and BERTH_CA_FILE; by host name too.
    for url in [b.url.clone(), b.url.replace("127.0.0.1", "localhost")] {
        let o = cli_env(&b, &url, &[("BERTH_CA_FILE", &ca)], &["ps", "--all", "-o", "json"]);
        assert!(o.status.success(), "berth ps over {url} failed: {}", text(&o.stderr));
        let jobs: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(jobs.as_array().unwrap().iter().any(|j| j["id"] == id), "{jobs}");
    }
}

#[test]
fn untrusted_certificates_are_refused_with_a_hint() {
    let pki = Pki::new(&["localhost", "127.0.0.1"]);
    let mut b = tls_cluster(&pki, &[]);

    // An agent without the CA keeps retrying and says why.
    b.add_agent("rogue", &[]);
    let log = wait_in_file(&b.home.path().join("rogue.stderr"), "manager certificate not trusted", 2);
    let line = log.lines().find(|l| l.contains("not trusted")).unwrap();
    assert!(line.contains(&format!("cannot connect to {}", b.url.replace("https://", "wss://"))), "{line}");
    assert!(line.contains("signed by an unknown CA") && line.contains("pass --ca-file"), "{line}");
    assert!(log.contains("retrying in"), "{log}");
    let nodes = b.json(&["nodes"]);
    assert_eq!(nodes.as_array().unwrap().len(), 0, "{nodes}");

    // The CLI without the CA.
    let o = cli_env(&b, &b.url, &[], &["ps"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("certificate") && err.contains("not trusted") && err.contains("BERTH_CA_FILE"), "{err}");

    // A CA file that is not one fails the agent at once.
    let o = Command::new(BIN)
        .env("HOME", b.home.path())
        .args(["agent", "--manager", &b.url, "--join-token", "x", "--fake-gpus", "0", "--data-dir"])
        .arg(b.home.path().join("agent-bad"))
        .env("BERTH_CA_FILE", pki.path("server-key.pem"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("server-key.pem holds no certificate"), "{err}");
}

#[test]
fn plain_http_and_half_configured_tls_are_clear_errors() {
    let pki = Pki::new(&["localhost", "127.0.0.1"]);
    let b = tls_cluster(&pki, &[]);
    let plain = b.url.replace("https://", "http://");
    let o = cli_env(&b, &plain, &[("BERTH_CA_FILE", &pki.path("ca.pem"))], &["ps"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(&format!("serves https only: use {}", b.url)), "{err}");

    let data = b.home.path().join("other");
    let manager = |flags: &[String]| {
        Command::new(BIN)
            .env("HOME", b.home.path())
            .args(["manager", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .args(flags)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = manager(&["--tls-cert".into(), pki.path("server.pem")]);
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--tls-key"), "{}", text(&o.stderr));

    // Certificate and key swapped: the start fails and names the file.
    let o = manager(&["--tls-cert".into(), pki.path("server-key.pem"), "--tls-key".into(), pki.path("server.pem")]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{} holds no certificate", pki.path("server-key.pem"))), "{err}");
}

#[test]
fn berth_up_with_tls_trusts_its_own_certificate() {
    // A certificate for another name only: the local agent and this host's CLI trust it as
    // itself (the credentials file names it), whatever address they dial.
    let pki = Pki::new(&["head.example"]);
    let flags = pki.serve_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let b = Berth::up(&flags);
    assert!(b.url.starts_with("https://"), "{}", b.url);
    let creds = std::fs::read_to_string(b.home.path().join(".config/berth/credentials")).unwrap();
    let creds: toml::Table = toml::from_str(&creds).unwrap();
    assert_eq!(PathBuf::from(creds["ca_file"].as_str().unwrap()), PathBuf::from(pki.path("server.pem")));
    let id = b.submit(&["--", "true"]);
    b.wait_state(id, "SUCCEEDED");
    // The CA alone does not make `127.0.0.1` a name of this certificate.
    let o = cli_env(&b, &b.url, &[("BERTH_CA_FILE", &pki.path("ca.pem"))], &["ps"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("not valid for name \"127.0.0.1\"") && err.contains("certificate itself"), "{err}");
}

#[test]
fn https_to_a_plain_manager_says_so() {
    let b = Berth::cluster("", &[]);
    let tls = b.url.replace("http://", "https://");
    // Once killed by SIGPIPE: rustls writes its alert after the plain server hung up.
    let o = cli_env(&b, &tls, &[], &["ps"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("does not speak TLS: use http://"), "{}", text(&o.stderr));
}
