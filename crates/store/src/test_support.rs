//! A throwaway PostgreSQL for tests (feature `test-support`): [`PgCluster::start`] runs
//! `initdb` and `pg_ctl start` from Debian's `postgresql` package in a temp dir, on a free port
//! of 127.0.0.1, never the system service; dropping it stops that server and removes the dir.
//! Each test starts its own, so tests run in parallel.
//!
//! `initdb` refuses to run as root, so as root the cluster belongs to the `postgres` system
//! user (`runuser`). Without PostgreSQL installed, tests skip with a `SKIPPED:` line, except
//! with `CI=true`, where a missing PostgreSQL fails them: CI must run them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running throwaway cluster; trust authentication for the superuser `postgres`.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// `Some("postgres")` when the server runs as that user (we are root).
    run_as: Option<&'static str>,
}

impl PgCluster {
    /// Starts a cluster, or `None` (after printing why) when PostgreSQL is not installed and
    /// this is not CI. `test` names the caller in the skip line.
    pub fn start(test: &str) -> Option<PgCluster> {
        Self::start_on(test, None)
    }

    /// [`PgCluster::start`], also listening on `addr` (an address of this host, e.g. one that
    /// test network namespaces reach) and trusting logins from its /16.
    pub fn start_on(test: &str, addr: Option<&str>) -> Option<PgCluster> {
        let Some(bin) = find_bin() else {
            let why = "PostgreSQL is not installed (apt-get install -y postgresql)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: {why}, and CI=true requires the PostgreSQL tests to run");
            }
            eprintln!("SKIPPED: {test}: {why}");
            return None;
        };
        // SAFETY: geteuid only reads the process's credentials.
        let run_as = (unsafe { libc::geteuid() } == 0).then_some("postgres");
        let dir = tempfile::Builder::new().prefix("berth-pg-").tempdir().expect("a temp dir for PostgreSQL");
        if let Some(user) = run_as {
            must(Command::new("chown").arg(format!("{user}:")).arg(dir.path()).output(), "chown the cluster dir");
        }
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let c = PgCluster { dir, bin, port, run_as };
        let data = c.data();
        let initdb = c.bin.join("initdb");
        let init = [initdb.as_os_str(), "-D".as_ref(), data.as_os_str()];
        must(c.cmd(&init, &["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"]).output(), "initdb");
        let listen = match addr {
            Some(a) => {
                let hba = data.join("pg_hba.conf");
                let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
                std::fs::write(&hba, format!("{old}host all all {a}/16 trust\n")).expect("write pg_hba.conf");
                format!("127.0.0.1,{a}")
            }
            None => "127.0.0.1".into(),
        };
        let opts = format!(
            "-p {port} -k {} -c listen_addresses={listen} -c fsync=off -c synchronous_commit=off",
            c.dir.path().display()
        );
        let pg_ctl = c.bin.join("pg_ctl");
        let log = c.dir.path().join("server.log");
        let start = [pg_ctl.as_os_str(), "-D".as_ref(), data.as_os_str(), "-l".as_ref(), log.as_os_str()];
        must(c.cmd(&start, &["-o", &opts, "-w", "-t", "60", "start"]).output(), "pg_ctl start");
        Some(c)
    }

    /// The URL of database `db` (superuser `postgres`, no password: trust).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of database `db` at `addr` (see [`PgCluster::start_on`]).
    pub fn url_at(&self, addr: &str, db: &str) -> String {
        format!("postgres://postgres@{addr}:{}/{db}", self.port)
    }

    /// Creates database `db` and returns its URL.
    pub async fn create_db(&self, db: &str) -> String {
        use sqlx::{ConnectOptions, Executor};
        let opts: sqlx::postgres::PgConnectOptions = self.url("postgres").parse().expect("a valid URL");
        let mut conn = opts.connect().await.expect("connect to the throwaway cluster");
        conn.execute(format!("CREATE DATABASE \"{db}\"").as_str()).await.expect("create database");
        self.url(db)
    }

    /// Adds login `user` with `password`, owner of database `db`, which must log in with that
    /// password over TCP (the superuser stays on trust). For tests of password handling.
    pub async fn add_password_user(&self, user: &str, password: &str, db: &str) {
        use sqlx::{ConnectOptions, Executor};
        let opts: sqlx::postgres::PgConnectOptions = self.url("postgres").parse().expect("a valid URL");
        let mut conn = opts.connect().await.expect("connect to the throwaway cluster");
        conn.execute(format!("CREATE ROLE \"{user}\" LOGIN PASSWORD '{password}'").as_str())
            .await
            .expect("create role");
        conn.execute(format!("ALTER DATABASE \"{db}\" OWNER TO \"{user}\"").as_str()).await.expect("alter database");
        let hba = self.data().join("pg_hba.conf");
        let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        std::fs::write(&hba, format!("host all \"{user}\" 127.0.0.1/32 scram-sha-256\n{old}"))
            .expect("write pg_hba.conf");
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        must(self.cmd(&[pg_ctl.as_os_str(), "-D".as_ref(), data.as_os_str()], &["reload"]).output(), "pg_ctl reload");
        // The reload is a signal; the postmaster rereads the file a moment later.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data dir.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `argv` then `more`, as the cluster's owner.
    fn cmd(&self, argv: &[&std::ffi::OsStr], more: &[&str]) -> Command {
        let mut c = match self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).args(argv);
                c
            }
            None => {
                let mut c = Command::new(argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        c.args(more).current_dir(self.dir.path());
        c
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let stop = [pg_ctl.as_os_str(), "-D".as_ref(), data.as_os_str()];
        let stopped = self.cmd(&stop, &["-m", "immediate", "-w", "stop"]).output().is_ok_and(|o| o.status.success());
        if !stopped {
            // The postmaster we started is the first line of its pid file.
            let pid = std::fs::read_to_string(data.join("postmaster.pid")).ok();
            if let Some(pid) = pid.as_deref().and_then(|t| t.lines().next()).and_then(|l| l.trim().parse::<i32>().ok())
            {
                // SAFETY: kill sends a signal to the server this cluster started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb` and `pg_ctl`.
fn find_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.split('.').next()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (has(&bin, "initdb") && has(&bin, "pg_ctl")).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

fn has(dir: &Path, exe: &str) -> bool {
    dir.join(exe).is_file()
}

fn must(out: std::io::Result<Output>, what: &str) {
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "{what} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("{what}: {e}"),
    }
}
