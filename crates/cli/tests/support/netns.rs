//! A cluster of separate hosts for failure tests: one network namespace per node (a manager
//! and N agents), each on its own address in a private /24, joined by a bridge in a "switch"
//! namespace. The root namespace gets a port on that bridge too, so the test's own `berth`
//! CLI reaches the manager directly. A partition is the node's switch port going down.
//!
//! Processes enter their namespace with `setns(2)` between fork and exec rather than through
//! `ip netns exec`: the latter also remounts `/sys`, which would hide `/sys/fs/cgroup` from the
//! agents and make them run kernels without cgroups, unlike a real host.
//!
//! Everything (processes inside the namespaces, namespaces, the root port) is torn down in
//! `Drop`, also when a test panics. Needs root and `ip` (iproute2); without them
//! [`Cluster::new`] prints a `SKIPPED:` line and returns `None`.

use std::fs::File;
use std::io::Write;
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Berth, PATIENCE, base_cmd, read_url, text, wait_timeout};

/// Per-process counter so that several clusters of one test binary get distinct names.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Where the subnet locks live: one file per third octet, held with `flock` for the cluster's
/// lifetime, so parallel test processes (nextest) never share a subnet; a crashed test's lock
/// goes with its process.
const LOCK_DIR: &str = "/tmp/berth-netns-locks";

/// The manager's port inside its namespace (each cluster has its own address, so no clash).
pub const MANAGER_PORT: u16 = 7070;

/// Runs `ip ARGS`; the error holds its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if o.status.success() { Ok(()) } else { Err(format!("ip {}: {}", args.join(" "), text(&o.stderr).trim())) }
}

fn ip_must(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("network setup failed: {e}");
    }
}

/// Pids of the processes in namespace `ns`.
fn ns_pids(ns: &str) -> Vec<i32> {
    let o = Command::new("ip").args(["netns", "pids", ns]).stdin(Stdio::null()).output();
    o.map(|o| text(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()).unwrap_or_default()
}

/// Whether `pid` is a live process (a zombie counts as dead: it runs nothing any more).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // the state follows the command name, which is in parentheses and may hold spaces
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Kills every process in `ns` and deletes it.
fn remove_ns(ns: &str) {
    for pid in ns_pids(ns) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = ip(&["netns", "del", ns]);
}

/// Namespaces left by test processes that died without their `Drop` (a SIGKILLed test run):
/// their names start with `bt<pid>c`; remove those whose pid is gone.
fn remove_stale_namespaces() {
    let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in text(&o.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("bt") else { continue };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() || !rest[digits.len()..].starts_with('c') {
            continue;
        }
        if let Ok(pid) = digits.parse::<i32>()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            remove_ns(name);
        }
    }
}

/// Takes a free third octet X of 10.231.X.0/24; the returned file holds the lock.
fn lock_subnet() -> (u8, File) {
    std::fs::create_dir_all(LOCK_DIR).expect("create the subnet lock dir");
    let start = std::process::id() as usize;
    for i in 0..254 {
        let x = ((start + i) % 254 + 1) as u8;
        let f = File::create(format!("{LOCK_DIR}/{x}.lock")).expect("create a subnet lock");
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return (x, f);
        }
    }
    panic!("all 254 test subnets 10.231.X.0/24 are in use: too many cluster tests at once");
}

/// The namespaces, links and addresses of one cluster.
struct Net {
    x: u8,
    _lock: File,
    switch: String,
    root_port: String,
    /// Index 0 is the manager, then the agents, then the standby managers.
    hosts: Vec<String>,
    agents: usize,
}

impl Net {
    /// `agents` + 1 + `standbys` hosts on 10.231.X.0/24: the manager at .1, agent i (1-based) at
    /// .(10+i), standby manager k (1-based) at .(1+k), the root namespace at .254.
    fn create(agents: usize, standbys: usize) -> Result<Net, String> {
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        ip(&["-V"]).map_err(|e| format!("no usable `ip` (install iproute2): {e}"))?;
        remove_stale_namespaces();
        let (x, lock) = lock_subnet();
        let prefix = format!("bt{}c{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let root_port = format!("btr{x}");
        // a port left by a crashed run on this subnet would shadow ours
        let _ = ip(&["link", "del", "dev", &root_port]);
        let switch = format!("{prefix}s");
        // the first namespace tells whether this machine allows them at all
        ip(&["netns", "add", &switch]).map_err(|e| format!("cannot create a network namespace: {e}"))?;
        let mut hosts = vec![format!("{prefix}m")];
        hosts.extend((1..=agents).map(|i| format!("{prefix}a{i}")));
        hosts.extend((1..=standbys).map(|k| format!("{prefix}m{k}")));
        let net = Net { x, _lock: lock, switch, root_port, hosts, agents };
        // from here on a failure panics; Drop removes what was made
        ip_must(&["-n", &net.switch, "link", "set", "dev", "lo", "up"]);
        ip_must(&["-n", &net.switch, "link", "add", "name", "sw", "type", "bridge"]);
        ip_must(&["-n", &net.switch, "link", "set", "dev", "sw", "up"]);
        for (i, host) in net.hosts.iter().enumerate() {
            ip_must(&["netns", "add", host]);
            ip_must(&["-n", host, "link", "set", "dev", "lo", "up"]);
            let port = Self::port_name(i);
            ip_must(&[
                "link",
                "add",
                "name",
                "eth0",
                "netns",
                host,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &net.switch,
            ]);
            ip_must(&["-n", &net.switch, "link", "set", "dev", &port, "master", "sw", "up"]);
            ip_must(&["-n", host, "addr", "add", &format!("{}/24", net.addr(i)), "dev", "eth0"]);
            ip_must(&["-n", host, "link", "set", "dev", "eth0", "up"]);
        }
        ip_must(&[
            "link",
            "add",
            "name",
            &net.root_port,
            "type",
            "veth",
            "peer",
            "name",
            "proot",
            "netns",
            &net.switch,
        ]);
        ip_must(&["-n", &net.switch, "link", "set", "dev", "proot", "master", "sw", "up"]);
        ip_must(&["addr", "add", &format!("10.231.{x}.254/24"), "dev", &net.root_port]);
        ip_must(&["link", "set", "dev", &net.root_port, "up"]);
        Ok(net)
    }

    /// The switch port of host `i` (0 = manager; past the agents, standby managers).
    fn port_name(i: usize) -> String {
        if i == 0 { "pm".into() } else { format!("pa{i}") }
    }

    fn addr(&self, i: usize) -> String {
        match i {
            0 => format!("10.231.{}.1", self.x),
            i if i <= self.agents => format!("10.231.{}.{}", self.x, 10 + i),
            i => format!("10.231.{}.{}", self.x, 1 + i - self.agents),
        }
    }

    /// The host of manager `k` (0: the first, then the standbys).
    fn manager_host(&self, k: usize) -> usize {
        if k == 0 { 0 } else { self.agents + k }
    }

    /// A command that will run inside host `i`'s namespace.
    fn spawn_in(&self, i: usize, cmd: &mut Command) -> Child {
        let ns = File::open(format!("/var/run/netns/{}", self.hosts[i])).expect("open the namespace");
        let fd = ns.as_raw_fd();
        // SAFETY: setns is a plain syscall, safe between fork and exec; `ns` outlives spawn.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn berth in its namespace");
        drop(ns);
        child
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in &self.hosts {
            remove_ns(host);
        }
        let _ = ip(&["link", "del", "dev", &self.root_port]);
        remove_ns(&self.switch);
    }
}

/// One agent: its name (`a1`, ...), data dir and process when running.
struct Agent {
    name: String,
    data: PathBuf,
    extra: Vec<String>,
    proc: Option<Child>,
}

/// A manager and agents, each its own process in its own namespace. Derefs to [`Berth`] for
/// the CLI helpers (`submit`, `wait_state`, `json`, ...), which run as the admin.
pub struct Cluster {
    berth: Berth,
    /// A world-writable directory (kernels run as `nobody`) that every namespace sees: the
    /// namespaces share the file system. Kernels leave their markers here.
    pub shared: tempfile::TempDir,
    /// Manager 0, then the standbys (`Cluster::with_standbys`).
    managers: Vec<Option<Child>>,
    manager_flags: Vec<String>,
    /// The PostgreSQL store the managers share, with standbys.
    pg: Option<berth_store::test_support::PgCluster>,
    agents: Vec<Agent>,
    join: String,
    net: Net,
}

impl Deref for Cluster {
    type Target = Berth;
    fn deref(&self) -> &Berth {
        &self.berth
    }
}

impl Cluster {
    /// The network for `agents` agents and a running manager (`berth manager` with
    /// `manager_flags`); no agent is started yet ([`Cluster::start_agent`]). `None` (after a
    /// `SKIPPED:` line) where network namespaces cannot be made.
    pub fn new(agents: usize, manager_flags: &[&str]) -> Option<Cluster> {
        Self::make(agents, 0, manager_flags)
    }

    /// [`Cluster::new`] with `standbys` more managers (hosts .2, .3, ...) that share a throwaway
    /// PostgreSQL (in the root namespace) with the first: it leads, they stand by. Agents and
    /// the CLI are given every manager's URL.
    pub fn with_standbys(agents: usize, standbys: usize, manager_flags: &[&str]) -> Option<Cluster> {
        Self::make(agents, standbys, manager_flags)
    }

    fn make(agents: usize, standbys: usize, manager_flags: &[&str]) -> Option<Cluster> {
        let net = match Net::create(agents, standbys) {
            Ok(net) => net,
            Err(why) => {
                eprintln!("SKIPPED: cluster test needs network namespaces: {why}");
                return None;
            }
        };
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join("data");
        let shared = super::shared_tempdir();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let agents = (1..=agents)
            .map(|i| Agent {
                name: format!("a{i}"),
                data: home.path().join(format!("agent-a{i}")),
                extra: vec![],
                proc: None,
            })
            .collect();
        let berth = Berth { home, data, url: String::new(), procs: vec![], extra: vec![] };
        let mut manager_flags: Vec<String> = manager_flags.iter().map(|s| s.to_string()).collect();
        let pg = if standbys > 0 {
            let root = format!("10.231.{}.254", net.x);
            let pg = berth_store::test_support::PgCluster::start_on("cluster with standbys", Some(&root))?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(pg.create_db("berth"));
            manager_flags.extend(["--store".to_string(), pg.url_at(&root, "berth")]);
            Some(pg)
        } else {
            None
        };
        let mut c = Cluster {
            berth,
            shared,
            managers: (0..=standbys).map(|_| None).collect(),
            manager_flags,
            pg,
            agents,
            join: String::new(),
            net,
        };
        c.start_manager();
        for k in 1..=standbys {
            c.start_standby(k);
        }
        if standbys > 0 {
            // The CLI follows the leader through every manager's URL, from the credentials
            // file (not the first manager's socket, which dies with it).
            c.berth.url = c.manager_urls();
            let creds = c.berth.home.path().join(".config/berth/credentials");
            let token = c.berth.admin_token();
            std::fs::write(&creds, format!("url = \"{}\"\ntoken = \"{token}\"\n", c.berth.url)).unwrap();
        }
        c.join = std::fs::read_to_string(c.berth.data.join("join-token")).expect("join token").trim().to_string();
        Some(c)
    }

    /// [`Cluster::new`] with every agent started and ready.
    pub fn start(agents: usize, manager_flags: &[&str]) -> Option<Cluster> {
        let mut c = Self::new(agents, manager_flags)?;
        for i in 1..=agents {
            c.start_agent(i);
        }
        Some(c)
    }

    fn log(&self, name: &str) -> File {
        std::fs::OpenOptions::new().create(true).append(true).open(self.berth.home.path().join(name)).unwrap()
    }

    /// Starts `berth manager` (again, on the same data dir after [`Cluster::kill_manager`]).
    pub fn start_manager(&mut self) {
        let url = self.spawn_manager(0);
        if self.managers.len() == 1 {
            self.berth.url = url;
        }
    }

    /// Starts standby manager `k` (1-based; again after [`Cluster::kill_manager_k`]).
    pub fn start_standby(&mut self, k: usize) {
        self.spawn_manager(k);
    }

    /// Starts manager `k` (0: the first) on its host and data dir; what it printed first.
    fn spawn_manager(&mut self, k: usize) -> String {
        assert!(self.managers[k].is_none(), "manager {k} is already running");
        let host = self.net.manager_host(k);
        let listen = format!("{}:{MANAGER_PORT}", self.net.addr(host));
        let (data, log) = match k {
            0 => (self.berth.data.clone(), "manager".to_string()),
            k => (self.berth.home.path().join(format!("data-m{k}")), format!("manager{k}")),
        };
        let mut cmd = base_cmd(self.berth.home.path());
        cmd.args(["manager", "--listen", &listen, "--data-dir"])
            .arg(&data)
            .args(&self.manager_flags)
            .stdout(Stdio::piped())
            .stderr(self.log(&format!("{log}.stderr")));
        let mut child = self.net.spawn_in(host, &mut cmd);
        let url = read_url(&mut child, self.berth.home.path().join(format!("{log}.stdout")));
        self.managers[k] = Some(child);
        url
    }

    /// Manager `k`'s URL (0: the first).
    pub fn manager_url(&self, k: usize) -> String {
        format!("http://{}:{MANAGER_PORT}", self.net.addr(self.net.manager_host(k)))
    }

    /// Every manager's URL, comma-separated (what agents and the CLI are given).
    pub fn manager_urls(&self) -> String {
        (0..self.managers.len()).map(|k| self.manager_url(k)).collect::<Vec<_>>().join(",")
    }

    /// SIGKILLs the manager and reaps it.
    pub fn kill_manager(&mut self) {
        self.kill_manager_k(0);
    }

    /// SIGKILLs manager `k` and reaps it.
    pub fn kill_manager_k(&mut self, k: usize) {
        let mut m = self.managers[k].take().expect("the manager is running");
        unsafe { libc::kill(m.id() as i32, libc::SIGCONT) };
        let _ = m.kill();
        let _ = m.wait();
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to manager `k`.
    pub fn freeze_manager(&self, k: usize, frozen: bool) {
        let p = self.managers[k].as_ref().expect("the manager is running");
        let sig = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        unsafe { libc::kill(p.id() as i32, sig) };
    }

    /// Manager `k`'s process, while it runs: `None` once it exited (and was reaped), with
    /// its exit status.
    pub fn manager_exited(&mut self, k: usize) -> Option<std::process::ExitStatus> {
        let p = self.managers[k].as_mut()?;
        let status = p.try_wait().expect("wait for a manager")?;
        self.managers[k] = None;
        Some(status)
    }

    /// Cuts manager `k` off the PostgreSQL store (its packets to the server are dropped, as
    /// with a pulled cable), leaving its other traffic alone.
    pub fn cut_off_store(&self, k: usize) {
        let pg = self.pg.as_ref().expect("a cluster with standbys");
        let port = pg.port().to_string();
        let root = format!("10.231.{}.254", self.net.x);
        let mut cmd = Command::new("iptables");
        cmd.args(["-A", "OUTPUT", "-d", &root, "-p", "tcp", "--dport", &port, "-j", "DROP"]);
        let out = self.net.spawn_in(self.net.manager_host(k), &mut cmd).wait_with_output().expect("run iptables");
        assert!(out.status.success(), "iptables failed (apt-get install iptables): {}", text(&out.stderr));
    }

    /// The log of manager `k` (0: the first) so far.
    pub fn manager_log(&self, k: usize) -> String {
        let name = if k == 0 { "manager.stderr".to_string() } else { format!("manager{k}.stderr") };
        std::fs::read_to_string(self.berth.home.path().join(name)).unwrap_or_default()
    }

    /// The log of agent `i` so far.
    pub fn agent_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.berth.home.path().join(format!("{}.stderr", self.agents[i - 1].name)))
            .unwrap_or_default()
    }

    /// The address of agent `i` (1-based).
    pub fn agent_addr(&self, i: usize) -> String {
        self.net.addr(i)
    }

    pub fn agent_name(&self, i: usize) -> String {
        self.agents[i - 1].name.clone()
    }

    /// The index of the agent called `name`.
    pub fn agent_index(&self, name: &str) -> usize {
        self.agents.iter().position(|a| a.name == name).unwrap_or_else(|| panic!("no agent {name}")) + 1
    }

    pub fn manager_addr(&self) -> String {
        self.net.addr(0)
    }

    /// Gives agent `i`'s host a second address (10.231.X.(110+i)) and returns it: for
    /// `berth agent --address`, the address other nodes reach it at.
    pub fn add_address(&self, i: usize) -> String {
        let addr = format!("10.231.{}.{}", self.net.x, 110 + i);
        ip_must(&["-n", &self.net.hosts[i], "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        addr
    }

    /// Extra flags for agent `i`'s next start.
    pub fn set_agent_flags(&mut self, i: usize, flags: &[&str]) {
        self.agents[i - 1].extra = flags.iter().map(|s| s.to_string()).collect();
    }

    /// Starts agent `i` (1-based; again on the same data dir after a kill) and waits until
    /// the manager lists it as ready.
    pub fn start_agent(&mut self, i: usize) {
        let url = self.manager_urls();
        let stderr = self.log(&format!("{}.stderr", self.agents[i - 1].name));
        let a = &self.agents[i - 1];
        assert!(a.proc.is_none(), "agent {} is already running", a.name);
        let mut cmd = base_cmd(self.berth.home.path());
        cmd.args(["agent", "--manager", &url, "--join-token", &self.join, "--name", &a.name, "--data-dir"])
            .arg(&a.data)
            .args(&a.extra)
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = self.net.spawn_in(i, &mut cmd);
        self.agents[i - 1].proc = Some(child);
        let name = self.agents[i - 1].name.clone();
        self.wait_node(&name, "ready");
    }

    /// SIGKILLs agent `i` and reaps it; its kernels are left as they are.
    pub fn kill_agent(&mut self, i: usize) {
        let mut p = self.agents[i - 1].proc.take().expect("the agent is running");
        let _ = p.kill();
        let _ = p.wait();
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to agent `i`: it stops reading its connection.
    pub fn freeze_agent(&self, i: usize, frozen: bool) {
        let p = self.agents[i - 1].proc.as_ref().expect("the agent is running");
        let sig = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        unsafe { libc::kill(p.id() as i32, sig) };
    }

    /// Cuts agent `i` off the network (its switch port goes down): packets are dropped, no
    /// connection is reset, like a pulled cable.
    pub fn partition(&self, i: usize) {
        ip_must(&["-n", &self.net.switch, "link", "set", "dev", &Net::port_name(i), "down"]);
    }

    /// Reconnects agent `i`.
    pub fn heal(&self, i: usize) {
        ip_must(&["-n", &self.net.switch, "link", "set", "dev", &Net::port_name(i), "up"]);
    }

    /// Destroys agent `i`'s TCP connections to the manager on the agent's side (`ss -K`), as
    /// if its host had rebooted its network stack: with the agent partitioned, the reset never
    /// reaches the manager, and the agent has to reconnect once healed.
    pub fn drop_connections(&self, i: usize) {
        let mut cmd = Command::new("ss");
        cmd.args(["-K", "-t", "dst", &self.net.addr(0)]).stdin(Stdio::null()).stdout(Stdio::piped());
        let out = self.net.spawn_in(i, &mut cmd).wait_with_output().expect("run ss -K");
        let listed = text(&out.stdout);
        assert!(
            out.status.success() && listed.contains(&format!("{}:{MANAGER_PORT}", self.net.addr(0))),
            "ss -K killed no connection to the manager: {listed}"
        );
    }

    /// `berth nodes -o json`'s entry for `name`.
    pub fn node(&self, name: &str) -> Value {
        let nodes = self.json(&["nodes"]);
        nodes.as_array().unwrap().iter().find(|n| n["name"] == name).cloned().unwrap_or(Value::Null)
    }

    /// Waits until node `name` is in `state` (`ready`, `lost`, ...); returns its entry.
    pub fn wait_node(&self, name: &str, state: &str) -> Value {
        let start = Instant::now();
        loop {
            let o = self.cli(&["nodes", "-o", "json"]);
            let nodes: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
            if let Some(n) = nodes.as_array().and_then(|a| a.iter().find(|n| n["name"] == name))
                && n["state"] == state
            {
                return n.clone();
            }
            assert!(start.elapsed() < PATIENCE, "node {name} never became {state}: {}", text(&o.stdout));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A path in the shared directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.shared.path().join(name)
    }

    /// Writes `body` to the shared file `name`, readable and executable by everyone.
    pub fn write_shared(&self, name: &str, body: &str) -> PathBuf {
        let p = self.path(name);
        File::create(&p).unwrap().write_all(body.as_bytes()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// The last lines of every daemon's log, for a failing test's output.
    fn dump_logs(&self) {
        let home = self.berth.home.path();
        let mut names = vec!["manager.stderr".to_string()];
        names.extend((1..self.managers.len()).map(|k| format!("manager{k}.stderr")));
        names.extend(self.agents.iter().map(|a| format!("{}.stderr", a.name)));
        for name in names {
            let Ok(log) = std::fs::read_to_string(home.join(&name)) else { continue };
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!("---- {name} (last {} lines) ----\n{}", tail.len(), tail.join("\n"));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // BERTH_TEST_LOGS=1 shows them for passing tests too
        if std::thread::panicking() || std::env::var_os("BERTH_TEST_LOGS").is_some() {
            self.dump_logs();
        }
        // kill the daemons we started, then whatever else lives in the namespaces (kernels);
        // Net's Drop (after this) kills stragglers and removes the namespaces
        for a in &mut self.agents {
            if let Some(mut p) = a.proc.take() {
                unsafe { libc::kill(p.id() as i32, libc::SIGCONT) };
                let _ = p.kill();
                let _ = wait_timeout(&mut p, Duration::from_secs(10));
            }
        }
        for m in &mut self.managers {
            if let Some(mut m) = m.take() {
                unsafe { libc::kill(m.id() as i32, libc::SIGCONT) };
                let _ = m.kill();
                let _ = wait_timeout(&mut m, Duration::from_secs(10));
            }
        }
        for host in &self.net.hosts {
            for pid in ns_pids(host) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // SIGKILLed agents leave their cgroup scopes (`berth/<name>-<hash of data dir>`);
        // thousands of empty ones slow every later start on the machine. Exactly this test's:
        // a prefix (`a2-`) also took the live, momentarily empty scopes of other tests' agents.
        let scopes: Vec<String> =
            self.agents.iter().map(|a| berth_agent::runtime::cgroup_scope(&a.name, &a.data)).collect();
        super::remove_scopes(|scope| scopes.iter().any(|s| s == scope), 50);
    }
}

/// Polls `f` until it holds; panics with `what` after [`PATIENCE`].
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
