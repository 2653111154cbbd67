//! Harness for end-to-end tests: runs the real `berth` binary (`berth up`, or `berth manager`
//! plus `berth agent`) on 127.0.0.1 with an ephemeral port, a temp data dir and a temp HOME
//! (so the credentials file is the test's own), and drives it through the CLI.
#![allow(dead_code)]

pub mod browser;
pub mod doc_commands;
pub mod netns;
pub mod pki;
pub mod pyenv;
pub mod slurm_calls;
pub mod users;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_berth");

/// Generous bound for a condition to become true: never a performance assertion, only a
/// guard so that a broken build fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A running berth: `berth up` in one process, or a manager and an agent.
pub struct Berth {
    pub home: tempfile::TempDir,
    pub data: PathBuf,
    pub url: String,
    procs: Vec<Child>,
    extra: Vec<String>,
}

/// `berth` with `home` as HOME and none of the caller's berth settings, run as a user would
/// from a directory of theirs: `<home>/submit`, where jobs run by default (like `sbatch`), open
/// to the other users' uids tests submit as (1777).
pub fn base_cmd(home: &Path) -> Command {
    base_cmd_at(Path::new(BIN), home)
}

/// [`base_cmd`] running `program` (a copy of berth, e.g. one jobs can see).
pub fn base_cmd_at(program: &Path, home: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    let cwd = home.join("submit");
    if !cwd.exists() {
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::set_permissions(&cwd, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let mut c = Command::new(program);
    c.current_dir(cwd);
    c.env("HOME", home).env_remove("XDG_CONFIG_HOME").env_remove("BERTH_URL").env_remove("BERTH_TOKEN");
    c.env_remove("BERTH_CA_FILE").env_remove("BERTH_SOCKET").env_remove("BERTH_CREDENTIALS");
    c.env_remove("BERTH_DATA_DIR").env_remove("XDG_DATA_HOME");
    c.env("RUST_LOG", "info");
    c
}

/// Reads the child's stdout until a line holding `http://...` or `https://...`, returns the
/// URL; the rest of the output keeps being drained in a thread so the child never blocks on a
/// full pipe.
fn read_url(child: &mut Child, log: PathBuf) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    // Each line is appended to the log as it comes: rewriting the whole file per line left a
    // moment where a reader found it empty (e2e_contexts read `up.stdout` as "" on CI).
    let mut file = std::fs::File::create(&log).expect("the up.stdout log");
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            if !sent && let Some(i) = line.find("http://").or_else(|| line.find("https://")) {
                let url: String = line[i..].chars().take_while(|c| !c.is_whitespace()).collect();
                let _ = tx.send(url);
                sent = true;
            }
        }
    });
    rx.recv_timeout(PATIENCE).expect("berth printed its URL")
}

impl Berth {
    /// `berth up --data-dir <tmp> --listen 127.0.0.1:0 <extra...>`, waits until the local node is ready.
    pub fn up(extra: &[&str]) -> Berth {
        Self::started(tempfile::tempdir().unwrap(), extra.iter().map(|s| s.to_string()).collect())
    }

    /// `berth up` in `home` (data dir `<home>/data`, which the caller may have prepared, e.g.
    /// as a mount point), waits until the local node is ready.
    pub fn up_in(home: tempfile::TempDir, extra: &[&str]) -> Berth {
        Self::started(home, extra.iter().map(|s| s.to_string()).collect())
    }

    /// A not-yet-started berth in `home` (data dir `<home>/data`).
    fn unstarted(home: tempfile::TempDir, extra: Vec<String>) -> Berth {
        let data = home.path().join("data");
        Berth { home, data, url: String::new(), procs: vec![], extra }
    }

    /// `berth up` in `home` with `extra` flags, waiting until its node is ready.
    fn started(home: tempfile::TempDir, extra: Vec<String>) -> Berth {
        let mut b = Self::unstarted(home, extra);
        b.start_up();
        b
    }

    /// Like `up`, with a manager config file (`--config`) holding `config` (TOML). The file
    /// lives in the temp HOME as `berth.toml`; [`Berth::write_config`] changes it for a restart.
    pub fn up_with_config(config: &str, extra: &[&str]) -> Berth {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("berth.toml");
        std::fs::write(&path, config).unwrap();
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.extend(["--config".to_string(), path.display().to_string()]);
        Self::started(home, extra)
    }

    /// `berth manager --config <config>` plus one `berth agent` per entry of `agents` (its
    /// name, then extra flags such as `--fake-gpus 2`), waits until every node is ready.
    /// ([`Berth::restart`] is for `berth up` only.)
    pub fn cluster(config: &str, agents: &[(&str, &[&str])]) -> Berth {
        Self::cluster_with(config, &[], agents)
    }

    /// Like [`Berth::cluster`], with `manager_extra` flags for `berth manager` (e.g. TLS).
    pub fn cluster_with(config: &str, manager_extra: &[&str], agents: &[(&str, &[&str])]) -> Berth {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("berth.toml");
        std::fs::write(&path, config).unwrap();
        let mut b = Self::unstarted(home, vec![]);
        let mut manager = base_cmd(b.home.path())
            .args(["manager", "--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .arg("--data-dir")
            .arg(&b.data)
            .args(manager_extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(b.home.path().join("manager.stderr")).unwrap()))
            .spawn()
            .expect("spawn berth manager");
        b.url = read_url(&mut manager, b.home.path().join("manager.stdout"));
        b.procs.push(manager);
        for (name, extra) in agents {
            b.add_agent(name, extra);
        }
        b.wait_nodes_ready(agents.len());
        b
    }

    /// Starts `berth agent --name <name> <extra...>` against this manager (stderr in
    /// `<home>/<name>.stderr`); does not wait for it to register.
    pub fn add_agent(&mut self, name: &str, extra: &[&str]) {
        let join = std::fs::read_to_string(self.data.join("join-token")).expect("join token").trim().to_string();
        // From a private file, as a service would (the token stays off the command line).
        let join_file = self.home.path().join(format!("join-token-{name}"));
        std::fs::write(&join_file, format!("{join}\n")).unwrap();
        std::fs::set_permissions(&join_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        // Appended to: an agent started again on the same name keeps its predecessor's log.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join(format!("{name}.stderr")))
            .unwrap();
        let agent = base_cmd(self.home.path())
            .args(["agent", "--manager", &self.url, "--join-token-file"])
            .arg(&join_file)
            .args(["--name", name, "--data-dir"])
            .arg(self.home.path().join(format!("agent-{name}")))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn berth agent");
        self.procs.push(agent);
    }

    /// Kills the `i`-th agent started on a [`Berth::cluster`] (0 is the first) with SIGKILL,
    /// like a crash: nothing is stopped or reported. Later agents shift down by one.
    pub fn kill_agent(&mut self, i: usize) {
        let mut p = self.procs.remove(i + 1);
        let _ = p.kill();
        let _ = p.wait();
    }

    /// Rewrites the config file of [`Berth::up_with_config`] (read on the next start).
    pub fn write_config(&self, config: &str) {
        std::fs::write(self.home.path().join("berth.toml"), config).unwrap();
    }

    /// Like `up`, with the temp HOME (and so the data dir's parent) closed to other users (0700).
    pub fn up_private(extra: &[&str]) -> Berth {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        Self::started(home, extra.iter().map(|s| s.to_string()).collect())
    }

    /// Starts `berth up` again after [`Berth::stop`], on the same data dir.
    pub fn start_up(&mut self) {
        let mut child = base_cmd(self.home.path())
            .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&self.data)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(self.home.path().join("up.stderr")).unwrap()))
            .spawn()
            .expect("spawn berth up");
        self.url = read_url(&mut child, self.home.path().join("up.stdout"));
        self.procs.push(child);
        self.wait_nodes_ready(1);
    }

    /// Stops `berth up` with SIGINT (Ctrl-C) and starts it again on the same data dir.
    pub fn restart(&mut self) {
        self.stop();
        self.start_up();
    }

    /// Sends `sig` to every berth process and waits for them to end (SIGKILL: a crash).
    pub fn signal_all(&mut self, sig: i32) {
        for mut p in self.procs.drain(..).rev() {
            // SAFETY: signalling a child this harness spawned and has not reaped.
            unsafe { libc::kill(p.id() as i32, sig) };
            wait_timeout(&mut p, PATIENCE).expect("berth ended after the signal");
        }
    }

    /// Sends `sig` to every agent of a [`Berth::cluster`] and waits for them to end.
    pub fn signal_all_agents(&mut self, sig: i32) {
        for mut p in self.procs.drain(1..).rev() {
            // SAFETY: signalling a child this harness spawned and has not reaped.
            unsafe { libc::kill(p.id() as i32, sig) };
            wait_timeout(&mut p, PATIENCE).expect("the agent ended after the signal");
        }
    }

    /// Starts `berth up` again on the same data dir (after [`Berth::signal_all`]), with `extra`
    /// flags instead of the first start's.
    pub fn start_again(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.start_up();
    }

    /// Sends SIGINT to every berth process and waits for them to exit; returns their statuses.
    pub fn stop(&mut self) -> Vec<std::process::ExitStatus> {
        let mut out = vec![];
        for mut p in self.procs.drain(..).rev() {
            unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
            out.push(wait_timeout(&mut p, PATIENCE).expect("berth stopped after SIGINT"));
        }
        out
    }

    /// Runs `berth <args>` as the admin whose credentials `berth up` wrote.
    pub fn cli(&self, args: &[&str]) -> Output {
        base_cmd(self.home.path()).args(args).stdin(Stdio::null()).output().expect("run berth")
    }

    /// Runs `berth <args>` with `input` on its standard input.
    pub fn cli_with_input(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = base_cmd(self.home.path())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run berth");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().expect("run berth")
    }

    /// Runs `berth <args>` with an explicit URL and token (another user).
    pub fn cli_as(&self, token: &str, args: &[&str]) -> Output {
        base_cmd(self.home.path())
            .env("BERTH_URL", &self.url)
            .env("BERTH_TOKEN", token)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run berth")
    }

    /// `berth submit <args>` as another user (its token) → the new job id.
    pub fn submit_as(&self, token: &str, args: &[&str]) -> i64 {
        let mut a = vec!["submit", "-o", "json"];
        a.extend(args);
        let o = self.cli_as(token, &a);
        assert!(o.status.success(), "submit as another user failed: {}", text(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["id"].as_i64().unwrap()
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(o.status.success(), "berth {args:?} failed: {}\n{}", o.status, text(&o.stderr));
        text(&o.stdout)
    }

    /// Runs a command with `-o json` and parses its output.
    pub fn json(&self, args: &[&str]) -> Value {
        // `-o json` must come before `--`, after which everything is the job's command
        let mut a = args.to_vec();
        let at = a.iter().position(|x| *x == "--").unwrap_or(a.len());
        a.splice(at..at, ["-o", "json"]);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("berth {a:?} printed no JSON ({e}): {out}"))
    }

    /// `berth submit <args>` → the new job id.
    pub fn submit(&self, args: &[&str]) -> i64 {
        let mut a = vec!["submit"];
        a.extend(args);
        self.json(&a)["id"].as_i64().expect("job id")
    }

    pub fn job(&self, id: i64) -> Value {
        self.json(&["show", &id.to_string()])
    }

    /// The ids `berth ps --all` lists, in order.
    pub fn listed_ids(&self) -> Vec<i64> {
        let jobs = self.json(&["ps", "--all"]);
        let mut ids: Vec<i64> = jobs.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
        ids.sort();
        ids
    }

    pub fn state(&self, id: i64) -> String {
        self.job(id)["job"]["state"].as_str().unwrap().to_string()
    }

    /// Waits until job `id` is in `state`; panics with its detail if it never gets there.
    pub fn wait_state(&self, id: i64, state: &str) -> Value {
        let start = Instant::now();
        loop {
            let j = self.job(id);
            let s = j["job"]["state"].as_str().unwrap().to_string();
            if s == state {
                return j;
            }
            let terminal = ["SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST"].contains(&s.as_str());
            if terminal || start.elapsed() > PATIENCE {
                panic!("job {id} is {s}, expected {state}: {j:#}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_nodes_ready(&self, n: usize) {
        let start = Instant::now();
        loop {
            let o = self.cli(&["nodes", "-o", "json"]);
            if o.status.success() {
                let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
                let ready = v.as_array().map(|a| a.iter().filter(|n| n["state"] == "ready").count()).unwrap_or(0);
                if ready >= n {
                    return;
                }
            }
            assert!(start.elapsed() < PATIENCE, "{n} node(s) never became ready: {}", text(&o.stdout));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates a user with `berth admin user create NAME`; returns their token.
    pub fn create_user(&self, name: &str) -> String {
        let v = self.json(&["admin", "user", "create", name]);
        v["token"].as_str().expect("token of the new user").to_string()
    }

    /// Waits until `f(endpoint view)` (`berth serve show NAME`) holds; returns the view.
    pub fn wait_endpoint(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let v = self.json(&["serve", "show", name]);
            if f(&v) {
                return v;
            }
            assert!(start.elapsed() < PATIENCE * 2, "endpoint {name} never got {what}: {v:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until `f(job detail)` holds for job `id`; returns the detail.
    pub fn wait_job(&self, id: i64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let j = self.job(id);
            if f(&j) {
                return j;
            }
            assert!(start.elapsed() < PATIENCE, "job {id} never got {what}: {j:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The admin's token from the credentials file `berth up` wrote.
    pub fn admin_token(&self) -> String {
        let c = std::fs::read_to_string(self.home.path().join(".config/berth/credentials")).unwrap();
        let v: toml::Table = toml::from_str(&c).expect("credentials are TOML");
        v["token"].as_str().expect("token in credentials").to_string()
    }
}

impl Drop for Berth {
    /// SIGTERM first, then SIGKILL whatever has not ended within a few seconds; then kills the
    /// jobs the agents left running and removes their cgroups (leftover cgroup directories,
    /// by the thousand, slowed every later start).
    fn drop(&mut self) {
        for p in &mut self.procs {
            // Only children still running (or unreaped): their pid cannot have been reused.
            if matches!(p.try_wait(), Ok(None)) {
                // SAFETY: signalling a child this harness spawned and has not reaped.
                unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
            }
        }
        for p in &mut self.procs {
            if wait_timeout(p, Duration::from_secs(5)).is_none() {
                let _ = p.kill();
                let _ = p.wait();
            }
        }
        // Stopped agents leave their jobs running (the kernel supervisor keeps them for the
        // next agent; it ends once they are gone): kill them, then remove this home's agents'
        // scopes (named from their data dirs, so no other test's).
        let mut agents: Vec<(String, PathBuf)> = std::fs::read_dir(self.home.path())
            .map(|r| r.flatten().collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| {
                let dir = e.file_name().to_string_lossy().into_owned();
                Some((dir.strip_prefix("agent-")?.to_string(), e.path()))
            })
            .collect();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
        agents.push((host, self.data.join("agent")));
        for (_, dir) in &agents {
            berth_agent::runtime::kill_kernels_left_in(dir);
        }
        let scopes: Vec<String> =
            agents.iter().map(|(node, dir)| berth_agent::runtime::cgroup_scope(node, dir)).collect();
        if !scopes.is_empty() {
            // briefly: kernels a killed agent left running keep theirs, and that is no reason
            // to hold up every test
            remove_scopes(|scope| scopes.iter().any(|s| s == scope), 10);
        }
    }
}

/// Removes the empty cgroup scope directories (`berth/<scope>` in every hierarchy) whose
/// name `matches`, deepest first, trying `attempts` times 100 ms apart while their last
/// processes exit; whether none is left. SIGKILLed agents leave their scopes behind, and thousands of empty
/// ones slowed every later start on the machine.
pub fn remove_scopes(matches: impl Fn(&str) -> bool, attempts: usize) -> bool {
    fn remove(dir: &Path) -> bool {
        // A kernel's processes that outlived their agent and supervisor (a job's background
        // loops once burned two CPUs for a quarter of an hour after its test): the scope is
        // this test's own, so is whatever runs in it.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) of a process in a cgroup scope this test's berth created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let subs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|r| r.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
            .unwrap_or_default();
        // Every child is tried, even after one fails (no short-circuit).
        let children_gone = subs.iter().map(|d| remove(d)).filter(|ok| !ok).count() == 0;
        children_gone && (std::fs::remove_dir(dir).is_ok() || !dir.exists())
    }
    let once = || {
        let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else { return true };
        let mut all = true;
        for h in hierarchies.flatten() {
            let Ok(scopes) = std::fs::read_dir(h.path().join("berth")) else { continue };
            for sc in scopes.flatten() {
                if matches(&sc.file_name().to_string_lossy()) {
                    all &= remove(&sc.path());
                }
            }
        }
        all
    };
    for _ in 1..attempts {
        if once() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    once()
}

/// A temp dir that both the test and its jobs see: kernels of a root agent get a private
/// `/tmp` (and `/dev/shm`), so files a test shares with its jobs live under `/var/tmp`.
pub fn shared_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("berth-test-").tempdir_in("/var/tmp").expect("a temp dir under /var/tmp")
}

/// A directory jobs can write (0777, under [`shared_tempdir`]) with the berth binary in `bin/`
/// and `srun` linked to it there. berth is hard-linked (or copied), not linked to where cargo
/// built it: a job's /tmp is its own, so a build under /tmp (CI clones there) is invisible to
/// jobs.
pub fn berth_bin_dir() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = shared_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let berth = bin.join("berth");
    if std::fs::hard_link(BIN, &berth).is_err() {
        std::fs::copy(BIN, &berth).unwrap();
    }
    std::os::unix::fs::symlink("berth", bin.join("srun")).unwrap();
    (dir, bin)
}

/// [`berth_bin_dir`] with Slurm's commands (`sbatch`, `squeue`, ...) linked to berth there too,
/// by `berth install-slurm-commands`, as a site installs them.
pub fn slurm_bin_dir() -> (tempfile::TempDir, PathBuf) {
    let (dir, bin) = berth_bin_dir();
    let o = Command::new(bin.join("berth"))
        .arg("install-slurm-commands")
        .arg(&bin)
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "install-slurm-commands: {}", text(&o.stderr));
    (dir, bin)
}

/// A tmpfs mounted on a dir for the life of the value, for tests of a full disk; unmounted
/// (lazily: processes may still hold it) on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs with `options` on `dir` (created); `None` after a SKIPPED line when
    /// this machine does not allow it (not root).
    pub fn mount(dir: &Path, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir).output().unwrap();
        if !o.status.success() {
            let why = format!("cannot mount a tmpfs on {}: {}", dir.display(), text(&o.stderr).trim());
            // CI runs as root: there a test that cannot mount is broken, not skipped.
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIPPED: {why}");
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }

    /// Fills only its blocks (inodes stay): a file of all the space left.
    pub fn fill_blocks(&self) -> PathBuf {
        use std::io::Write;
        let big = self.0.join("filler");
        let mut f = std::fs::File::create(&big).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&chunk[..1]).is_ok() {}
        big
    }

    /// Uses up its inodes: empty files until none can be made; returns them.
    pub fn fill_inodes(&self) -> Vec<PathBuf> {
        let mut made = vec![];
        for i in 0.. {
            let p = self.0.join(format!("inode-{i}"));
            if std::fs::File::create(&p).is_err() {
                break;
            }
            made.push(p);
        }
        made
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 on a path this value mounted.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn wait_timeout(p: &mut Child, t: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < t {
        if let Some(s) = p.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Whether this machine lets the tests check cgroup limits (root and a writable hierarchy).
pub fn cgroups_usable() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let writable = ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .any(|p| Path::new(p).join("cgroup.procs").exists());
    if !(root && writable) {
        eprintln!("SKIPPED: cgroup limit checks need root and a writable cgroup hierarchy");
    }
    root && writable
}

/// Builds the docker test images (`scripts/test-image.sh`); `false` (after a SKIPPED line
/// naming `test`) when docker cannot run them here.
pub fn docker_ready(test: &str) -> bool {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-image.sh");
    match Command::new("bash").arg(script).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!("SKIPPED: {test}: {}", text(&o.stderr).trim());
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: {test}: cannot run scripts/test-image.sh: {e}");
            false
        }
    }
}

/// Removes the containers of agents whose node name starts with `node`.
pub fn remove_containers(node: &str) {
    let filter = format!("name=berth-{node}");
    let Ok(o) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() else { return };
    for c in text(&o.stdout).lines() {
        let _ = Command::new("docker").args(["rm", "-f", c]).output();
    }
}
