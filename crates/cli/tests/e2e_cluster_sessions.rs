//! Interactive sessions across real separate hosts (support/netns.rs): `berth exec` and
//! `berth port-forward` into kernel 1 of a two-node job reach its own node, a forward goes on
//! after the manager restarts, and an exec whose agent is killed fails and leaves no process
//! behind. Skipped (with a `SKIPPED:` line) without root or `ip`. Issue 17.

mod support;

use support::netns::{Cluster, alive, wait_for};

/// Waits until `pid` is gone.
fn wait_dead(pid: i32, what: &str) {
    wait_for(&format!("{what} (pid {pid}) to be gone"), || !alive(pid));
}

/// `berth port-forward` started as the cluster's admin: the child and its local port.
fn port_forward(c: &Cluster, args: &[&str]) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = support::base_cmd(c.home.path())
        .args([&["port-forward"], args].concat())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.split_whitespace().nth(2).and_then(|a| a.rsplit(':').next()).and_then(|p| p.parse().ok());
    (child, port.unwrap_or_else(|| panic!("no listening line: {line:?}")))
}

/// The body of `GET /who` through local port `port`, if it answered.
fn who(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /who HTTP/1.0\r\n\r\n").ok()?;
    let mut all = String::new();
    s.read_to_string(&mut all).ok()?;
    all.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).filter(|b| !b.is_empty())
}

#[test]
fn exec_and_port_forward_reach_kernel_one_on_its_node_through_restarts() {
    // A long heartbeat timeout: agents fence their kernels only after half of it, so the
    // exec'd command of a killed agent can die only of its parent-death signal here.
    let Some(mut c) = Cluster::start(2, &["--heartbeat-timeout", "600s"]) else { return };
    // Each kernel serves its rank on its own node's loopback (its /tmp is its own).
    let serve = "mkdir -p /tmp/www && echo rank=$RANK > /tmp/www/who && \
                 exec /usr/bin/python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www";
    let id = c.submit(&["--nodes", "2", "--", "sh", "-c", serve]);
    let d = c.wait_state(id, "RUNNING");
    let ids = id.to_string();
    let node1 = d["kernels"].as_array().unwrap().iter().find(|k| k["index"] == 1).unwrap()["binding"]["node"]
        .as_str()
        .unwrap()
        .to_string();

    // exec into kernel 1 runs on its node, in its environment.
    let out = c.ok(&["exec", &ids, "--kernel", "1", "--", "sh", "-c", "echo $RANK $BERTH_CLUSTER_ROLE; hostname"]);
    assert!(out.starts_with("1 sub1\n"), "{out}");

    // port-forward to kernel 1 reaches its server, not kernel 0's.
    let (mut fwd, port) = port_forward(&c, &[&ids, "--kernel", "1", ":8000"]);
    wait_for("kernel 1's server through the forward", || who(port).as_deref() == Some("rank=1\n"));

    // The manager restarted: the forward's listener stays, new connections go through again.
    c.kill_manager();
    c.start_manager();
    wait_for("the forward after the manager's restart", || who(port).as_deref() == Some("rank=1\n"));
    fwd.kill().unwrap();
    let _ = fwd.wait();

    // The agent of kernel 1 killed during an exec: the client ends with an error instead of
    // hanging, and the command does not outlive the agent that ran it.
    let mark = format!("{}/exec-sleep", c.shared.path().display());
    let mut exec = support::base_cmd(c.home.path())
        .args(["exec", &ids, "--kernel", "1", "--", "sh", "-c", &format!("echo $$ > {mark}; exec sleep 301")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the exec'd command", || std::fs::read_to_string(&mark).is_ok_and(|p| p.ends_with('\n')));
    let pid: i32 = std::fs::read_to_string(&mark).unwrap().trim().parse().unwrap();
    c.kill_agent(c.agent_index(&node1));
    let status = exec.wait().unwrap();
    assert!(!status.success(), "the exec must fail when its agent dies");
    wait_dead(pid, "the exec'd command of a killed agent");
}
